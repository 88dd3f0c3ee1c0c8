"""Command-line flags generated from the options dataclasses, `--config`/`--print-config`, and result printing.

A command with a run directory declares its options once, as dataclass fields made with `options.opt` (help, flag
spelling); `add_options(parser, Options)` turns every such field into its flag, in the help
section of the options group that declares it (`DataOptions`, `HardwareOptions`, `OutputOptions`, ...), and adds
`--config FILE.yaml` (option values from a file; flags typed on the command line win) and `--print-config` (the
options as such a file, then exit). `options_from_args` builds the dataclass back from the parsed flags.

Why our own generator on argparse, not tyro or jsonargparse (both on PyPI; looked at again for issue 52): both make
a command line from dataclasses, but not ours. tyro prefixes a nested group's flags (`--hardware.devices`, unless
each group is marked to omit them), gives every bool both `--flag` and `--no-flag`, draws its own help (so every
`--help` and docs/cli.md change) and reads no `--config` YAML with our flat keys. jsonargparse keeps field names as
flags (`--max_steps`), nests groups (`--hardware.devices`), spells `--print_config` and nests its config keys.
transformers' `HfArgumentParser` gives every field two spellings and booleans a value (`--sop [SOP]`). Each changes
flags or `--config` keys users type, and none composes with the subcommand tree and lazy imports `lvbert` keeps for
its start-up time. argparse has what the rest needs: SUPPRESSed defaults say what was typed, `set_defaults` layers a
--config file under the typed flags (`argcheck`). This generator reads the same kind of field metadata (help,
aliases) as `HfArg`.

One spelling per meaning: `--out` is every command's output directory, `--ddp-strategy` the Lightning strategy and
`--search` the search strategies. The spellings renamed before the first release (0.1.0) are gone.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import types
import typing
from dataclasses import dataclass
from typing import Any

from .errors import UserError
from .options import FLAT, field_default, flag_of, option_meta


def add_json_arg(p) -> None:
    """Every command that prints a result takes --json; its function returns the result as a dict (cli.main prints
    it with `print_result`)."""
    p.add_argument("--json", action="store_true", help="print the result as one JSON object (default: one readable "
                                                       "line per field)")


def _shown(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
        return " ".join(_shown(v) for v in value)
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value)
    return str(value)


def print_result(result: dict, as_json: bool) -> None:
    """A command's result on stdout: with --json one JSON object on one line (nothing else is printed to stdout by
    our code), else one aligned `field  value` line per field."""
    if as_json:
        print(json.dumps(result))
        return
    width = max((len(k) for k in result), default=0)
    for key, value in result.items():
        print(f"{key:<{width}}  {_shown(value)}")


# --- flags from the options dataclasses ----------------------------------------------------------------------
@dataclass
class Option:
    """One flag-bearing field of an options class (nested option groups flattened): `parent` names the field of
    the nested group it belongs to (e.g. search's `evolution`), None at the top level; `flat`: a group whose
    options a --config file and --print-config name at the top level (`options.flat_group`: hardware, data)."""

    name: str
    type: Any
    default: Any
    meta: dict
    section: str | None
    parent: str | None = None
    flat: bool = False

    @property
    def base(self):
        """The annotation without `| None`."""
        args = [a for a in typing.get_args(self.type) if a is not type(None)]
        if typing.get_origin(self.type) in (typing.Union, types.UnionType) and len(args) == 1:
            return args[0]
        return self.type

    @property
    def is_list(self) -> bool:
        return typing.get_origin(self.base) is list


def _section(cls, name: str) -> str | None:
    """The help section of option `name`: the GROUP of the most basic options class that declares it."""
    for klass in reversed(cls.__mro__):
        if name in getattr(klass, "__dataclass_fields__", {}) and "GROUP" in vars(klass):
            return klass.GROUP
    return None


def options_of(cls, parent: str | None = None, flat: bool = False) -> list[Option]:
    """Every field of `cls` that has a flag (see `options.opt`), nested option groups flattened."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta = option_meta(cls, f.name)
        default = field_default(f)
        if dataclasses.is_dataclass(default):  # a nested options group (search's EvolutionConfig, HardwareOptions)
            out += options_of(type(default), parent=f.name, flat=bool(f.metadata.get(FLAT)))
        elif meta is not None:
            section = (meta["group"] or None) if "group" in meta else _section(cls, f.name)
            out.append(Option(f.name, hints[f.name], default, meta, section, parent, flat))
    return out


def _shown_default(value) -> str:
    return " ".join(map(str, value)) if isinstance(value, (list, tuple)) else f"{value:g}" if isinstance(
        value, float) else str(value)


def _help(o: Option) -> str:
    text = o.meta["help"]
    if o.default is None or isinstance(o.default, bool) or o.default in ("", []) or "default" in text:
        return text
    default = _shown_default(o.default).replace("%", "%%")  # argparse formats help with %: escape the value's
    return f"{text} (default {default})"


def add_actions(sub, name: str, help_: str, dest: str | None = None, metavar: str = "ACTION"):
    """A command made of actions (`lvbert supernet train|few-shot`): the subparsers its actions are added to. Given
    without an action it prints its help and exits 2."""
    p = sub.add_parser(name, help=help_)
    p.set_defaults(func=lambda args: p.print_help() or 2)
    return p.add_subparsers(dest=dest or f"{name}_command", metavar=metavar)


def add_command(sub, name: str, help_: str, options_cls, func, **kwargs) -> argparse.ArgumentParser:
    """A command whose flags come from `options_cls` (`add_options`; kwargs: its skip/defaults) and that runs
    `func(args)`."""
    p = sub.add_parser(name, help=help_, description=kwargs.pop("description", None))
    add_options(p, options_cls, **kwargs)
    p.set_defaults(func=func)
    return p


def add_options(p: argparse.ArgumentParser, cls, skip: tuple[str, ...] = (), defaults: dict | None = None) -> None:
    """`cls`'s flags on parser `p` (one per option field, in its group's help section), `--config`,
    `--print-config` and `--json`; `skip` leaves out options this command does not offer, `defaults` changes
    some for this command (`lvbert glue`'s --out)."""
    add_flags(p, cls, skip, defaults)
    g = p.add_argument_group("options files")
    g.add_argument("--config", default=None, metavar="FILE.yaml",
                   help="option values from a YAML file (keys: the option names, as --print-config writes them); "
                        "flags typed on the command line win")
    g.add_argument("--print-config", action="store_true",
                   help="print this command's options (defaults, --config and the flags given) as YAML and exit")
    add_json_arg(p)
    p.set_defaults(options_cls=cls, options_skip=tuple(skip))


def add_flags(p, cls, skip: tuple[str, ...] = (), defaults: dict | None = None) -> None:
    """Only the flags of `cls`'s options (`add_options` without the options-file flags: `search nnictl` takes the
    latency budget's)."""
    sections: dict[str | None, Any] = {None: p}
    exclusive: dict[str, Any] = {}
    for o in options_of(cls):
        if o.name in skip:
            continue
        if defaults and o.name in defaults:
            o = dataclasses.replace(o, default=defaults[o.name])
        if o.default is None and o.name in _preset_fields(cls):
            o = dataclasses.replace(o, meta={**o.meta, "help": f"{o.meta['help']} ({_preset_text(cls, o.name)})"})
        if o.section not in sections:
            sections[o.section] = p.add_argument_group(o.section)
        target = sections[o.section]
        if o.meta.get("exclusive"):
            if o.meta["exclusive"] not in exclusive:
                exclusive[o.meta["exclusive"]] = target.add_mutually_exclusive_group()
            target = exclusive[o.meta["exclusive"]]
        _add(target, o)


def _preset_fields(cls) -> set[str]:
    rows = list((getattr(cls, "PRESETS", None) or {}).values())
    return set.intersection(*(set(r) for r in rows)) if rows else set()


def _preset_text(cls, name: str) -> str:
    """An option's preset values, e.g. "preset: tiny 100, paper/small 5,000" (`presets.py`)."""
    by_value: dict = {}
    for preset, row in cls.PRESETS.items():
        by_value.setdefault(row[name], []).append(preset)
    return "preset: " + ", ".join(f"{'/'.join(names)} {_shown_default(v)}" for v, names in by_value.items()).replace(
        "%", "%%")


def _add(target, o: Option) -> None:
    meta = o.meta
    kwargs: dict[str, Any] = {"dest": o.name, "default": o.default, "help": _help(o)}
    if o.base is bool:
        kwargs["action"] = "store_false" if o.default else "store_true"
    else:
        if "type" in meta:
            kwargs["type"] = meta["type"]
        elif o.is_list:
            kwargs["type"], kwargs["nargs"] = typing.get_args(o.base)[0], "+"
        else:
            kwargs["type"] = o.base
        kwargs.update({k: meta[k] for k in ("metavar", "choices", "nargs", "const") if k in meta})
    target.add_argument(flag_of(o.name, meta, o.default), **kwargs)


# --- parsed flags -> options ----------------------------------------------------------------------------------
def options_from_args(cls, args, **extra):
    """`cls` (an options dataclass) from parsed args: every option from its flag (or --config), nested option
    groups rebuilt, plus `given` = the options set by the user, on the command line or in --config
    (`argcheck.parse_args`; what a resumed run checks against its stored options)."""
    names = {f.name for f in dataclasses.fields(cls)}
    values = {name: value for name, value in vars(args).items() if name in names and name != "given"}
    nested = {}
    for o in options_of(cls):
        if o.parent is not None and hasattr(args, o.name):
            nested.setdefault(o.parent, {})[o.name] = getattr(args, o.name)
    for parent, fields_ in nested.items():
        values[parent] = type(field_default(cls.__dataclass_fields__[parent]))(**fields_)
    values.update(extra)
    if "given" in names:
        values["given"] = sorted(set(getattr(args, "given", ())) & ({o.name for o in options_of(cls)} | names))
    return cls(**values)


def close_match(word: str, choices) -> str | None:
    """The choice `word` most likely misspells (difflib's closest), None when none is close: what an unknown
    --config key or an unknown flag (`argcheck.parse_args`) suggests."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return close[0] if close else None


def read_config(cls, path: str, skip: tuple[str, ...] = ()) -> dict:
    """The options a --config YAML file sets, checked: one `error:` line for an unreadable file, an unknown key or a
    value of the wrong type. Nested groups may be written nested (`evolution: {population: 8}`) or flat."""
    import yaml

    from .safeio import read_bytes

    try:
        data = yaml.safe_load(read_bytes(path, "--config file")) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"--config {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UserError(f"--config {path}: expected a mapping of option names to values, got {type(data).__name__}")
    options = {o.name: o for o in options_of(cls) if o.name not in skip}
    parents = {o.parent for o in options.values() if o.parent and not o.flat}
    flat = {}
    for key, value in data.items():
        if key in parents and isinstance(value, dict):
            flat.update(value)
        else:
            flat[key] = value
    out = {}
    for key, value in flat.items():
        if key not in options:
            close = close_match(str(key), options)
            hint = f"did you mean {close}?" if close else f"options: {', '.join(sorted(options))}"
            raise UserError(f"--config {path}: unknown option {key!r} ({hint})")
        out[key] = _checked(options[key], value, path)
    return out


def _checked(o: Option, value, path: str):
    """A --config value as its flag would have made it."""
    bad = UserError(f"--config {path}: {o.name} must be {_type_name(o)}, got {value!r}")
    if value is None:
        return None
    if "type" in o.meta and isinstance(value, str):  # a custom parser of the flag's text (a comma-separated list)
        return o.meta["type"](value)
    if o.is_list:
        items = value if isinstance(value, list) else [value]
        elem = typing.get_args(o.base)[0]
        return [_scalar(elem, v, bad) for v in items]
    value = _scalar(o.base, value, bad)
    if "choices" in o.meta and value not in o.meta["choices"]:
        raise UserError(f"--config {path}: {o.name} must be one of {', '.join(map(str, o.meta['choices']))}, "
                        f"got {value!r}")
    return value


def _scalar(kind, value, bad: UserError):
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if isinstance(value, (bool, dict, list)):
        raise bad
    if kind is float and isinstance(value, (int, float)):
        return float(value)
    if kind is int and isinstance(value, int):
        return value
    if kind is str:
        return str(value)
    raise bad


def _type_name(o: Option) -> str:
    base = typing.get_args(o.base)[0] if o.is_list else o.base
    name = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(base, str(base))
    return f"a list of {name.split(' ', 1)[-1]}s" if o.is_list else name


def config_yaml(cls, args) -> str:
    """The options a command would run with, as a --config file (`--print-config`); with --resume, those stored in
    the run directory, the given ones checked against them as the run itself would."""
    import yaml

    opts = options_from_args(cls, args)
    if getattr(opts, "resume", False) and getattr(opts, "out", None):
        from .rundir import RunDir  # the CLI boundary: rundir (arch, config, yaml) only when it is needed

        run = RunDir(opts.out)
        if run.stored_options() is not None:
            opts = run.resumed(opts)
    if hasattr(opts, "resolve"):  # the values a run would use, not None for "the preset's"
        opts = opts.resolve()
    out: dict = {}
    for o in options_of(cls):
        if o.name in getattr(args, "options_skip", ()):
            continue
        value = getattr(getattr(opts, o.parent), o.name) if o.parent else getattr(opts, o.name)
        (out.setdefault(o.parent, {}) if o.parent and not o.flat else out)[o.name] = value
    return yaml.safe_dump(out, sort_keys=False, allow_unicode=True).rstrip()


def run_training(args, options_cls, train, summary) -> dict:
    """A training command: its options from the command line, the run, and `summary(meta)` as its result (nothing
    on a DDP rank > 0: rank 0 reports)."""
    meta = train(options_from_args(options_cls, args))
    return summary(meta) if meta else {}
