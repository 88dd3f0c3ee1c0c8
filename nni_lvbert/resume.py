"""Resume: the options a run directory stored, with the options given again checked against them, by value.

A resumed run takes every option from its run directory (`RunDir.begin` calls `resume_from`, the one merge); an
option given again must mean what the stored one means, else one `error:` line names both values. Values are
compared resolved, not as typed: a size's preset values (`TrainOptions.resolved`), a path with or without a
trailing slash or `./` (`data/` is `data`), an architecture in any spelling (best_arch.json, a name, letters) by
its layer letters. Options in `MAY_CHANGE` (devices, progress, ...) or in a class's `MAY_CHANGE_ON_RESUME` take
the value given; nested option groups (search's `evolution`) are checked field by field and keep the stored
values. `differing` is the same comparison over two stored dictionaries (search.json's settings, --overwrite's
note).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from .arch import is_named, named_arch, parse_arch
from .errors import UserError
from .options import FLAT, MAY_CHANGE, flag, from_dict, get_option, given_fields, has_option, replace_options


def resume_from(opts, stored: dict | None, where, *, always_current=("resume", "overwrite")):
    """`opts` for resuming the run in `where`: the stored options, the given ones checked against them (module
    docstring); `always_current` (resume/overwrite) always come from `opts`."""
    if stored is None:
        raise UserError(f"cannot resume {where}: it holds no stored options (made by an older nni-lvbert?); "
                        "start it again with --overwrite")
    saved = from_dict(opts, stored)
    nested = {f.name for f in dataclasses.fields(opts) if dataclasses.is_dataclass(getattr(opts, f.name))
              and not f.metadata.get(FLAT)}
    for group in sorted(nested):  # e.g. search's EvolutionConfig: checked field by field, always the stored values
        mine, theirs = getattr(opts, group), getattr(saved, group)
        for name in sorted(given_fields(opts, group)):
            _check(name, getattr(mine, name), getattr(theirs, name), flag(name, mine), where)
    updates, may_change = {}, MAY_CHANGE | getattr(type(opts), "MAY_CHANGE_ON_RESUME", frozenset())
    for name in sorted(given_fields(opts) - set(always_current) - nested):  # flat groups' options by their names
        if not has_option(saved, name):
            continue
        mine = get_option(opts, name)
        if name not in may_change:
            merged = replace_options(saved, **{name: mine})
            _check(name, _resolved(merged, name), _resolved(saved, name), flag(name, opts), where, mine)
        updates[name] = mine
    updates.update({k: getattr(opts, k) for k in always_current if hasattr(opts, k)})
    if hasattr(opts, "given"):
        updates["given"] = opts.given
    return replace_options(saved, **updates)


def differing(before: dict, now: dict, skip=frozenset()) -> list[str]:
    """The keys of `now` whose value is not `before`'s (compared as `resume_from` compares), `skip` aside."""
    return [k for k in now if k not in skip and not same(k, before.get(k), now[k])]


def same(name: str, a, b) -> bool:
    """Whether two values of option `name` mean the same: equal, the same path, or (`arch`) the same layers."""
    if a == b:
        return True
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(name, x, y) for x, y in zip(a, b))
    if not isinstance(a, str) or not isinstance(b, str):
        return False
    if name == "arch":
        letters = _arch_letters(a, b), _arch_letters(b, a)
        if None not in letters:
            return letters[0] == letters[1]
    return _same_path(a, b)


def _same_path(a: str, b: str) -> bool:
    if not a or not b:
        return False
    if os.path.normpath(a) == os.path.normpath(b):
        return True
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except (OSError, RuntimeError):
        return False


def _arch_letters(text: str, other: str) -> str | None:
    """An architecture's layer letters, whatever its spelling (a name at the other one's slot count); None when
    `text` is no architecture."""
    try:
        if is_named(text):
            slots = len(parse_arch(other)) if not is_named(other) else 24
            return named_arch(text, slots)
        return parse_arch(text).compact
    except UserError:
        return None


def _resolved(opts, name: str):
    """The value a run uses for option `name`: the size's preset's where it is left unset."""
    resolved = getattr(opts, "resolved", None)
    if resolved is not None and name in getattr(opts, "PRESETS", {}).get("paper", {}):
        return resolved(name)
    return get_option(opts, name)


_AS_COMPARED = object()


def _check(name: str, mine, theirs, typed: str, where, shown=_AS_COMPARED) -> None:
    if not same(name, mine, theirs):
        raise UserError(f"{typed} {_show(mine if shown is _AS_COMPARED else shown)} contradicts {where} ({name} "
                        f"{_show(theirs)}); drop the option to resume, or start again with --overwrite")


def _show(v) -> str:
    return " ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)
