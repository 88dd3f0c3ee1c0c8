"""The command line checked before a command runs, with nothing heavy imported (`lvbert` calls both).

- `parse_args`: argparse's `parse_args`, except that a flag no parser knows is reported by the (sub)command it was
  typed to: that command's usage, then one `error:` line with a did-you-mean, as an unknown `--config` key is
  (`cliargs.close_match`). argparse's own `parse_args` reports it at the top-level parser, whose usage says nothing
  about the command's flags.
- `check_values`: the values several commands read the same way (--space, --size, --arch's spelling), checked
  before a command imports torch, NNI or Lightning (seconds on a loaded CPU): a typo is one line at once, not after
  the imports. The commands' own checks still run, with the same messages; these only run them earlier.
"""
from __future__ import annotations

import argparse
import sys

from .options import _leaf_parsers


def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """`parser.parse_args(argv)`; leftover arguments exit 2 with the usage of the command they were typed to and one
    `error: unrecognized option --max-setps (did you mean --max-steps?)` line."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        leaf = _leaf_parsers(parser, args)[-1]
        leaf.print_usage(sys.stderr)
        leaf.exit(2, f"error: {unrecognized(leaf, extras)}\n")
    return args


def _is_flag(token: str) -> bool:
    if not token.startswith("-") or token in ("-", "--"):
        return False
    try:  # a negative number is a value (of a flag argparse did not know)
        float(token)
        return False
    except ValueError:
        return True


def unrecognized(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """The message for arguments `parser` did not take: each unknown flag with the closest of its flags, else (only
    stray values) argparse's own `unrecognized arguments: ...`."""
    from .cliargs import close_match

    flags = [t.split("=", 1)[0] for t in extras if _is_flag(t)]
    if not flags:
        return f"unrecognized arguments: {' '.join(extras)}"
    # compared without the dashes every flag shares (else "--foo" is "close" to "--out")
    known = {s.lstrip("-"): s for a in parser._actions for s in a.option_strings if s.startswith("--")}
    named = []
    for flag in dict.fromkeys(flags):
        close = close_match(flag.lstrip("-"), known)
        named.append(f"{flag} (did you mean {known[close]}?)" if close else flag)
    return f"unrecognized option{'s' if len(named) > 1 else ''} {', '.join(named)}"


def check_values(args) -> None:
    """--space (a space name or YAML), --size (a sizes.yaml name) and --arch (its spelling: letters, digits, a JSON
    dict or file; named archs depend on the slot count and are left to the command) of any command that has them:
    one `UserError` line, the command's own message."""
    space, size, arch = (getattr(args, name, None) for name in ("space", "size", "arch"))
    if isinstance(space, str) and space:
        from .config import load_space

        load_space(space)
    if isinstance(size, str) and size:
        from .config import size_values

        size_values(size)
    if isinstance(arch, str) and arch.strip():
        from .arch import is_named, parse_arch

        if not is_named(arch):
            parse_arch(arch)
