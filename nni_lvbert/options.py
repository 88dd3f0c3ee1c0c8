"""Options: dataclass fields that are also flags (`opt`), flat option groups, what the user gave, and the
`MAY_CHANGE` table of options a resumed run may take anew.

- **Given options.** `lvbert` records which options the user typed or set in --config (`args.given`, from
  argparse itself: `argcheck.typed`); an API caller that builds an options dataclass by hand has no parser, so
  what it gave is what differs from the field defaults (`given_fields`).
- **Resume** (`resume.resume_from`, called from `RunDir.begin`) and the **DDP rank hand-over** (`ranks`) have
  modules of their own.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

# Options that may differ between the sessions of one run: how it is computed and shown, not what it computes
# (hardware, display, caches, where the output directory is). Any other option given again on --resume must equal
# the stored one. One set for every command: an option name means the same thing in each.
MAY_CHANGE = frozenset({
    "out", "resume", "overwrite", "progress", "model_summary",  # the run directory and the console
    "accelerator", "devices", "num_nodes", "ddp_strategy", "precision", "num_workers", "compile",  # Lightning
    "device", "threads", "cache_dir", "cache_mb", "prefix_cache", "record_paths",  # scoring and data caches
})


# --- options dataclasses ----------------------------------------------------------------------------------------
def field_default(f: dataclasses.Field) -> Any:
    """A dataclass field's default (its factory's value), MISSING when it has none."""
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING


def opt(default: Any = dataclasses.MISSING, help: str = "", *, default_factory: Any = dataclasses.MISSING,
        flag: str | None = None, metavar: str | None = None, choices=None, nargs: str | None = None,
        const: Any = None, type: Any = None, exclusive: str | None = None, group: str | None = None,
        stored: bool = True) -> Any:
    """An option: a dataclass field whose metadata makes its command-line flag (`cliargs.add_options`).

    The flag is `--` + the name with dashes (`flag` to spell it otherwise; a bool that defaults to True is
    `--no-NAME`), its type and `nargs` come from the annotation (`T | None` -> T, `list[T]` -> one or more), and
    its help ends with the default unless the help speaks of it. `exclusive` names a set of options that exclude
    each other, `group` overrides the help section (default: the `GROUP` of the options class that declares the
    field), `stored=False` keeps it out of options.json (`to_dict`: a session's setting a --resume decides anew,
    e.g. --threads' fair share of the cores). Fields made with plain `field()` or a bare default have no flag
    (`hpo`, `given`, ...); a subclass may re-declare a field with a bare default to change only its default,
    keeping its base's flag and help."""
    meta = {"help": help, "flag": flag, "metavar": metavar, "choices": choices, "nargs": nargs, "const": const,
            "type": type, "exclusive": exclusive, "group": group, "stored": None if stored else False}
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
    """The options as stored in a run directory (JSON-safe; `given` is not an option, nor one made with
    `opt(stored=False)`)."""
    full, d = dataclasses.asdict(opts), {}
    full.pop("given", None)
    groups = flat_groups(opts)
    for name, value in full.items():  # a flat group's options in its place, by their own names
        d.update(value) if name in groups else d.__setitem__(name, value)
    return {k: v for k, v in d.items() if (option_meta(opts, k) or {}).get("stored", True)}


def given_fields(opts, group: str | None = None) -> set[str]:
    """Options set by the user (of nested option group `group`, by their own names): `opts.given` when the CLI
    filled it, else those differing from the defaults (an API caller has no parser to ask)."""
    if getattr(opts, "given", None) is not None:
        names = set(opts.given)
        return names if group is None else names & {f.name for f in dataclasses.fields(getattr(opts, group))}
    if group is not None:
        value = getattr(opts, group)
        return {f.name for f in dataclasses.fields(value) if getattr(value, f.name) != getattr(type(value)(), f.name)}
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


def from_dict(opts, stored: dict):
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
