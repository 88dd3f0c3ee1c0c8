"""Where a command's options come from: the command line, the run directory (--resume) and rank 0 (DDP).

- **Given options.** `lvbert` records which options the user typed (`args.given`, see `given_dests`); an API
  caller that builds an options dataclass by hand gives whatever differs from the field defaults.
- **Resume.** A resumed run takes every option from the run directory; an option given again with another value
  is one `error:` line naming both values, unless the option is one that may change between sessions
  (`MAY_CHANGE`: devices, progress, ...; an options class adds its own in `MAY_CHANGE_ON_RESUME`, e.g. the
  ranking study's `rankers`). `RunDir.begin` is where every command does this.
- **DDP ranks.** Lightning's DDP launcher re-runs the command line for ranks > 0. Rank 0 publishes the options it
  settled on in the environment its children inherit (`publish`), and every other rank adopts them (`adopt`)
  instead of re-checking (or, worse, re-creating) the run directory rank 0 has just made.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, ClassVar

from .errors import UserError

RANK0_ENV = "LVBERT_RANK0_OPTIONS"

# Options that may differ between the sessions of one run: how it is computed and shown, not what it computes
# (hardware, display, caches, where the output directory is). Any other option given again on --resume must equal
# the stored one. One set for every command: an option name means the same thing in each.
MAY_CHANGE = frozenset({
    "out", "resume", "overwrite", "progress", "model_summary",  # the run directory and the console
    "accelerator", "devices", "num_nodes", "ddp_strategy", "precision", "num_workers", "compile",  # Lightning
    "device", "threads", "cache_dir", "cache_mb", "prefix_cache", "record_paths",  # scoring and data caches
})


def launcher_is_rank_zero() -> bool:
    """True in the process that started the run (Lightning/torchrun children, the processes of other nodes and
    srun's other tasks have a non-zero rank env)."""
    return all(int(os.environ.get(v, "0") or 0) == 0 for v in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"))


# --- command line ---------------------------------------------------------------------------------------------
def _leaf_parsers(parser: argparse.ArgumentParser, args) -> list[argparse.ArgumentParser]:
    """The chain of parsers (root, subcommand, action...) that parsed `args`."""
    chain = [parser]
    while True:
        sub = next((a for a in chain[-1]._actions if isinstance(a, argparse._SubParsersAction)), None)
        name = getattr(args, sub.dest, None) if sub is not None else None
        if name is None or name not in sub.choices:
            return chain
        chain.append(sub.choices[name])


def given_dests(parser: argparse.ArgumentParser, args, argv: list[str]) -> set[str]:
    """Destinations of the options typed on the command line (exact, `--opt=value`, or an unambiguous prefix)."""
    given: set[str] = set()
    tokens = [t.split("=", 1)[0] for t in argv if t.startswith("-") and t != "--"]
    for p in _leaf_parsers(parser, args):
        optionals = [a for a in p._actions if a.option_strings]
        strings = [s for a in optionals for s in a.option_strings]
        for tok in tokens:
            exact = [a for a in optionals if tok in a.option_strings]
            if exact:
                given.add(exact[0].dest)
                continue
            prefixed = {a.dest for a in optionals for s in a.option_strings if s.startswith(tok) and s.startswith("--")}
            if len(prefixed) == 1 and tok.startswith("--") and not any(s == tok for s in strings):
                given |= prefixed
    return given


# --- options dataclasses ----------------------------------------------------------------------------------------
def field_default(f: dataclasses.Field) -> Any:
    """A dataclass field's default (its factory's value), MISSING when it has none."""
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING


def opt(default: Any = dataclasses.MISSING, help: str = "", *, default_factory: Any = dataclasses.MISSING,
        flag: str | None = None, metavar: str | None = None, choices=None, nargs: str | None = None,
        const: Any = None, type: Any = None, exclusive: str | None = None, group: str | None = None) -> Any:
    """An option: a dataclass field whose metadata makes its command-line flag (`cliargs.add_options`).

    The flag is `--` + the name with dashes (`flag` to spell it otherwise; a bool that defaults to True is
    `--no-NAME`), its type and `nargs` come from the annotation (`T | None` -> T, `list[T]` -> one or more), and
    its help ends with the default unless the help speaks of it. `exclusive` names a set of options that exclude
    each other, `group` overrides the help section (default: the `GROUP` of the options class that declares the
    field). Fields made with plain `field()` or a bare default have no flag (`hpo`, `given`, ...); a subclass may
    re-declare a field with a bare default to change only its default, keeping its base's flag and help."""
    meta = {"help": help, "flag": flag, "metavar": metavar, "choices": choices, "nargs": nargs, "const": const,
            "type": type, "exclusive": exclusive, "group": group}
    meta = {k: v for k, v in meta.items() if v is not None}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=meta)


def option_meta(cls, name: str) -> dict | None:
    """The flag metadata of option `name` of `cls` (the most derived declaration that has one; an option of a flat
    group is its group class's), None: no flag."""
    cls = cls if isinstance(cls, type) else type(cls)
    group = _flat_index(cls).get(name)
    if group is not None:
        return option_meta(group[1], name)
    for klass in cls.__mro__:
        f = getattr(klass, "__dataclass_fields__", {}).get(name)
        if f is not None and "help" in f.metadata:
            return dict(f.metadata)
    return None


# --- flat option groups: nested values, flat everywhere a user or a file sees them --------------------------------
FLAT = "flat_group"  # field metadata: an option group (`HardwareOptions`, ...) held as one value


def flat_group(cls) -> Any:
    """A field holding option group `cls` (default: its defaults) whose options keep their own names outside the
    value: flat flags, --config keys, --print-config lines and options.json keys (`to_dict`)."""
    return dataclasses.field(default_factory=cls, metadata={FLAT: True})


def flat_groups(cls) -> dict[str, type]:
    """{field name: group class} of `cls`'s flat groups (`flat_group`), in declaration order."""
    cls = cls if isinstance(cls, type) else type(cls)
    return {f.name: type(field_default(f)) for f in dataclasses.fields(cls) if f.metadata.get(FLAT)}


def _flat_index(cls) -> dict[str, tuple[str, type]]:
    """{option name: (group field, group class)} of the options in `cls`'s flat groups."""
    if not dataclasses.is_dataclass(cls):
        return {}
    return {f.name: (g, group) for g, group in flat_groups(cls).items() for f in dataclasses.fields(group)}


def get_option(opts, name: str) -> Any:
    """Option `name` of `opts`, looked up in its flat groups too (`opts.hardware.devices` for "devices")."""
    where = _flat_index(type(opts)).get(name)
    return getattr(getattr(opts, where[0]), name) if where else getattr(opts, name)


def has_option(opts, name: str) -> bool:
    return name in _flat_index(type(opts)) or hasattr(opts, name)


def _split(cls, values: dict) -> tuple[dict, dict]:
    """(`cls`'s fields, {flat group: {option: value}}) of `values` named flat (a group's options by their own
    names; a whole group may be given too, its options then change it)."""
    index, top, options = _flat_index(cls), {}, {}
    for k, v in values.items():
        if k in index:
            options.setdefault(index[k][0], {})[k] = v
        else:
            top[k] = v
    return top, options


def _grouped(cls, values: dict, base: dict) -> dict:
    """`values` (flat) as `cls`'s keyword arguments: each flat group's options applied to that group as `values`
    gives it whole, else as `base` holds it, else to its defaults."""
    top, options = _split(cls, values)
    for g, changes in options.items():
        top[g] = dataclasses.replace(top.get(g) or base.get(g) or flat_groups(cls)[g](), **changes)
    return top


def replace_options(opts, **values):
    """`dataclasses.replace` taking the options of flat groups by their own names (`devices=...`)."""
    return dataclasses.replace(opts, **_grouped(type(opts), values, {g: getattr(opts, g) for g in flat_groups(opts)}))


def flat_options(cls, **values):
    """A `cls` options value from flat keyword arguments: each flat group's options by their own names (what
    `lvbert` builds from its flags, as API callers and tests spell it)."""
    return cls(**_grouped(cls, values, {}))


class FlatOptions:
    """A mixin of options classes with flat groups: `Options.flat(devices="2", ...)` (`flat_options`)."""

    @classmethod
    def flat(cls, **values):
        return flat_options(cls, **values)


def flag_of(name: str, meta: dict, default: Any) -> str:
    """The flag of an option: its own spelling, `--no-NAME` for a bool defaulting to True, else `--NAME`."""
    if meta.get("flag"):
        return meta["flag"]
    return ("--no-" if default is True else "--") + name.replace("_", "-")


def flag(name: str, opts=None) -> str:
    """The flag a user types for option `name` of `opts` (error messages name it)."""
    meta = option_meta(opts, name) if opts is not None else None
    if meta is None:
        return "--" + name.replace("_", "-")
    where = _flat_index(type(opts)).get(name)
    return flag_of(name, meta, field_default((where[1] if where else type(opts)).__dataclass_fields__[name]))


def to_dict(opts) -> dict:
    """The options as stored in a run directory (JSON-safe; `given` is not an option)."""
    full, d = dataclasses.asdict(opts), {}
    full.pop("given", None)
    groups = flat_groups(opts)
    for name, value in full.items():  # a flat group's options in its place, by their own names
        d.update(value) if name in groups else d.__setitem__(name, value)
    return d


def given_fields(opts) -> set[str]:
    """Options set by the user: `opts.given` when the CLI filled it, else those differing from the defaults."""
    if getattr(opts, "given", None) is not None:
        return set(opts.given)
    out = set()
    for f in dataclasses.fields(opts):
        value, default = getattr(opts, f.name), field_default(f)
        if f.name == "given":
            continue
        if f.metadata.get(FLAT):  # a flat group: its options by their own names
            out |= {g.name for g in dataclasses.fields(value) if getattr(value, g.name) != getattr(default, g.name)}
        elif value != default:
            out.add(f.name)
    return out


def _from_dict(opts, stored: dict):
    """A copy of `opts` with the stored values (nested option dataclasses rebuilt from their dicts, flat groups from
    their options' own keys)."""
    values = {}
    for f in dataclasses.fields(opts):
        if f.metadata.get(FLAT):
            current = getattr(opts, f.name)
            values[f.name] = dataclasses.replace(current, **{g.name: stored[g.name] for g in dataclasses.fields(
                current) if g.name in stored})
            continue
        if f.name not in stored or f.name == "given":
            continue
        v, current = stored[f.name], getattr(opts, f.name)
        if dataclasses.is_dataclass(current) and isinstance(v, dict):
            v = dataclasses.replace(current, **v)
        values[f.name] = v
    return dataclasses.replace(opts, **values)


def _value(opts, name: str) -> Any:
    resolved = getattr(opts, "resolved", None)
    if resolved is not None and name in getattr(opts, "PRESETS", {}).get("paper", {}):
        return resolved(name)
    return get_option(opts, name)


def resume_from(opts, stored: dict | None, where, *, always_current=("resume", "overwrite")):
    """`opts` for resuming the run in `where`: the stored options, with given options checked against them.

    A given option that contradicts the stored value is one `error:` line naming both values; options in
    `MAY_CHANGE` (or the class's `MAY_CHANGE_ON_RESUME`) take the given value; `always_current` (resume/overwrite)
    always come from `opts`."""
    if stored is None:
        raise UserError(f"cannot resume {where}: it holds no stored options (made by an older nni-lvbert?); "
                        "start it again with --overwrite")
    given = given_fields(opts)
    saved = _from_dict(opts, stored)
    nested = {f.name for f in dataclasses.fields(opts) if dataclasses.is_dataclass(getattr(opts, f.name))
              and not f.metadata.get(FLAT)}
    for name in nested:  # e.g. search's EvolutionConfig: checked field by field, always the stored values
        mine, theirs = getattr(opts, name), getattr(saved, name)
        for field in sorted(given_fields_of_nested(opts, name)):
            a, b = getattr(mine, field), getattr(theirs, field)
            if a != b:
                raise UserError(f"{flag(field, mine)} {_show(a)} contradicts {where} ({field} {_show(b)}); "
                                "drop the option to resume, or start again with --overwrite")
    updates, may_change = {}, MAY_CHANGE | getattr(type(opts), "MAY_CHANGE_ON_RESUME", frozenset())
    for name in sorted(given - set(always_current) - nested):  # a flat group's options by their own names
        if not has_option(saved, name):
            continue
        mine = get_option(opts, name)
        merged = replace_options(saved, **{name: mine})
        if name in may_change or _value(merged, name) == _value(saved, name):
            updates[name] = mine
            continue
        raise UserError(f"{flag(name, opts)} {_show(mine)} contradicts {where} "
                        f"({name} {_show(_value(saved, name))}); drop the option to resume, or start again with "
                        "--overwrite")
    updates.update({k: getattr(opts, k) for k in always_current if hasattr(opts, k)})
    if hasattr(opts, "given"):
        updates["given"] = opts.given
    return replace_options(saved, **updates)


def given_fields_of_nested(opts, name: str) -> set[str]:
    """Given fields of a nested option dataclass: the CLI lists them in `opts.given` by their own names."""
    nested = getattr(opts, name)
    if getattr(opts, "given", None) is not None:
        return {f.name for f in dataclasses.fields(nested)} & set(opts.given)
    default = type(nested)()
    return {f.name for f in dataclasses.fields(nested) if getattr(nested, f.name) != getattr(default, f.name)}


def _show(v) -> str:
    return " ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)


def derive(cls, parent, groups: tuple[type, ...], **values):
    """A `cls` options value made from `parent`'s (a pipeline's options -> one stage's): every option group in
    `groups` both classes have (`HardwareOptions`, ...) as `parent` holds it (a flat group as one value, a mixin's
    options one by one), then `values` (flat, see `flat_options`). What the child does not take from a group is
    named in `values` or left to its default, never listed field by field."""
    shared: dict = {}
    for group in groups:
        mine = next((g for g, k in flat_groups(cls).items() if issubclass(k, group)), None)
        theirs = next((g for g, k in flat_groups(parent).items() if issubclass(k, group)), None)
        if mine and theirs:  # as one value (a subclass of the group, e.g. IOT's, rebuilt from its options)
            value, kind = getattr(parent, theirs), flat_groups(cls)[mine]
            shared[mine] = value if type(value) is kind else kind(**{f.name: getattr(value, f.name)
                                                                    for f in dataclasses.fields(value)})
            continue
        names = [f.name for f in dataclasses.fields(group)]
        missing = sorted(n for n in names if n not in cls.__dataclass_fields__ or not hasattr(parent, n))
        if missing:
            raise TypeError(f"{cls.__name__} from {type(parent).__name__}: no option(s) {', '.join(missing)}")
        shared.update({n: getattr(parent, n) for n in names})
    return cls(**{**shared, **_grouped(cls, values, shared)})


# --- the output group every command with a run directory has ------------------------------------------------------
@dataclass(frozen=True)
class OutputOptions:
    """Where a command writes (its run directory) and what a second session does with it."""

    GROUP: ClassVar[str] = "output and resume"

    out: str = opt("runs/run", "output directory", metavar="DIR")
    resume: bool = opt(False, "continue the interrupted run in --out with the options it stored (finished parts are "
                              "kept)", exclusive="resume")
    overwrite: bool = opt(False, "replace a non-empty output directory", exclusive="resume")
    progress: bool = opt(True, "no progress bars")


# --- DDP ranks --------------------------------------------------------------------------------------------------
def publish(kind: str, opts) -> None:
    """Rank 0: hand the settled options to the ranks Lightning's launcher starts (they inherit the environment)."""
    published = json.loads(os.environ.get(RANK0_ENV, "{}"))
    published[kind] = to_dict(opts)
    os.environ[RANK0_ENV] = json.dumps(published)


def adopt(kind: str, opts):
    """Rank > 0: rank 0's options for this stage. A rank started from outside (torchrun, SLURM, another node) has
    none published: it runs its own command line, rank 0's; with --resume, the options rank 0 resumes with, read
    as rank 0 reads them (`resume_from`) from the run directory, which every node must then see (a shared disk)."""
    stored = json.loads(os.environ.get(RANK0_ENV, "{}")).get(kind)
    if stored:
        return _from_dict(opts, stored)
    if getattr(opts, "resume", False) and getattr(opts, "out", None):
        from .rundir import RunDir

        run = RunDir(opts.out, kind)
        options = run.stored_options() if run.path.is_dir() else None
        if options is None:
            raise UserError(f"cannot resume {run.path} on this node (rank > 0): it holds no stored options here; "
                            "--resume on several nodes needs the run directory on a disk every node shares")
        return resume_from(opts, options, run.path)
    return opts
