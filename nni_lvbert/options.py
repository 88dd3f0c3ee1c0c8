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
    """The flag metadata of option `name` of `cls` (the most derived declaration that has one), None: no flag."""
    for klass in (cls if isinstance(cls, type) else type(cls)).__mro__:
        f = getattr(klass, "__dataclass_fields__", {}).get(name)
        if f is not None and "help" in f.metadata:
            return dict(f.metadata)
    return None


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
    return flag_of(name, meta, field_default(type(opts).__dataclass_fields__[name]))


def to_dict(opts) -> dict:
    """The options as stored in a run directory (JSON-safe; `given` is not an option)."""
    d = dataclasses.asdict(opts)
    d.pop("given", None)
    return d


def given_fields(opts) -> set[str]:
    """Options set by the user: `opts.given` when the CLI filled it, else those differing from the defaults."""
    if getattr(opts, "given", None) is not None:
        return set(opts.given)
    out = set()
    for f in dataclasses.fields(opts):
        if f.name == "given":
            continue
        if getattr(opts, f.name) != field_default(f):
            out.add(f.name)
    return out


def _from_dict(opts, stored: dict):
    """A copy of `opts` with the stored values (nested option dataclasses rebuilt from their dicts)."""
    values = {}
    for f in dataclasses.fields(opts):
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
    return getattr(opts, name)


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
    nested = {f.name for f in dataclasses.fields(opts) if dataclasses.is_dataclass(getattr(opts, f.name))}
    for name in nested:  # e.g. search's EvolutionConfig: checked field by field, always the stored values
        mine, theirs = getattr(opts, name), getattr(saved, name)
        for field in sorted(given_fields_of_nested(opts, name)):
            a, b = getattr(mine, field), getattr(theirs, field)
            if a != b:
                raise UserError(f"{flag(field, mine)} {_show(a)} contradicts {where} ({field} {_show(b)}); "
                                "drop the option to resume, or start again with --overwrite")
    updates, may_change = {}, MAY_CHANGE | getattr(type(opts), "MAY_CHANGE_ON_RESUME", frozenset())
    for name in sorted(given - set(always_current) - nested):
        if not hasattr(saved, name):
            continue
        merged = dataclasses.replace(saved, **{name: getattr(opts, name)})
        if name in may_change or _value(merged, name) == _value(saved, name):
            updates[name] = getattr(opts, name)
            continue
        raise UserError(f"{flag(name, opts)} {_show(getattr(opts, name))} contradicts {where} "
                        f"({name} {_show(_value(saved, name))}); drop the option to resume, or start again with "
                        "--overwrite")
    updates.update({k: getattr(opts, k) for k in always_current if hasattr(opts, k)})
    if hasattr(opts, "given"):
        updates["given"] = opts.given
    return dataclasses.replace(saved, **updates)


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
    """A `cls` options value made from `parent`'s (a pipeline's options -> one stage's): every option of the option
    `groups` both classes have (`HardwareOptions`, ...) as `parent` holds it, then `values`. What the child does
    not take from a group is named in `values` or left to its default, never listed field by field."""
    shared = {f.name for g in groups for f in dataclasses.fields(g)}
    missing = sorted(n for n in shared if n not in cls.__dataclass_fields__ or not hasattr(parent, n))
    if missing:
        raise TypeError(f"{cls.__name__} from {type(parent).__name__}: no option(s) {', '.join(missing)}")
    return cls(**{**{n: getattr(parent, n) for n in shared}, **values})


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
