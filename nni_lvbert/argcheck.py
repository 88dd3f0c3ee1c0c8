"""The command line as argparse reads it, checked before a command runs, with nothing heavy imported.

- **One walker** over the parser tree (`subparsers`, `commands`, `chain`, `command_words`): `lvbert` (the chain
  of parsers that read a command line, the words of a "continue with" line), the did-you-mean check and the
  generated reference (`clidoc`) all use it.
- **`parse_args`**: argparse's parse, plus what the commands need from argparse itself:
  `args.given`, the options typed (`typed`: the command line read again with every option's default SUPPRESSed,
  so only what was typed lands in the namespace: prefixes and `--opt=value` as argparse reads them), and
  `--config FILE.yaml` (`with_config`) put in through `set_defaults` on the command's parser before the command line
  is read again, so a flag typed wins over the file; the file's keys count as given.
- **One error line.** argparse's own errors (`--resume --overwrite`, a bad choice) and an unknown flag are one
  `error:` line and at most one hint line (`see lvbert supernet train --help`), not the usage block; an unknown
  flag names the flag it most likely misspells (`cliargs.close_match`, as an unknown `--config` key does).
- `check_values`: --space, --size and --arch's spelling checked before a command imports torch, NNI or Lightning
  (seconds on a loaded CPU): a typo is one line at once. The commands' own checks still run, with the same messages.

Plain argparse, not tyro or jsonargparse: `cliargs`'s docstring says why.
"""
from __future__ import annotations

import argparse

from .cliargs import close_match, read_config


class Parser(argparse.ArgumentParser):
    """`lvbert`'s parsers (its subcommands' too: argparse makes them of the root's class): an error is one line."""

    def error(self, message: str):
        self.exit(2, f"error: {message}\nsee {self.prog} --help\n")


# --- the one walker over the parser tree ----------------------------------------------------------------------
def subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = (), help_: str = ""):
    """(command words, parser, the help line its parent lists it with) of every leaf command, in the order
    `lvbert --help` lists them."""
    sub = subparsers(parser)
    if sub is None:
        yield path, parser, help_
        return
    helps = {c.dest: c.help or "" for c in sub._choices_actions}
    for name, child in sub.choices.items():
        yield from commands(child, (*path, name), helps.get(name, ""))


def chain(parser: argparse.ArgumentParser, args) -> list[argparse.ArgumentParser]:
    """The chain of parsers (root, subcommand, action...) that parsed `args`."""
    out = [parser]
    while (sub := subparsers(out[-1])) is not None and getattr(args, sub.dest, None) in sub.choices:
        out.append(sub.choices[getattr(args, sub.dest)])
    return out


def command_words(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """The subcommand words at the start of `argv` (`supernet train`)."""
    words = []
    for token in argv:
        sub = subparsers(parser)
        if sub is None or token not in sub.choices:
            break
        words.append(token)
        parser = sub.choices[token]
    return words


# --- parsing ----------------------------------------------------------------------------------------------------
def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """`parser.parse_args(argv)` with `args.given` (`typed`); leftover arguments exit 2 with one
    `error: unrecognized option --max-setps (did you mean --max-steps?)` line (and a hint line when nothing is
    close)."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        leaf = chain(parser, args)[-1]
        message = unrecognized(leaf, extras)
        hint = "" if message.endswith("?)") else f"see {leaf.prog} --help\n"
        leaf.exit(2, f"error: {message}\n{hint}")
    args.given = typed(parser, args, argv)
    return args


def typed(parser: argparse.ArgumentParser, args, argv: list[str]) -> set[str]:
    """The destinations of the options typed in `argv`: argv read again with every option's default SUPPRESSed
    (what `argument_default=SUPPRESS` does), so only typed options are set."""
    actions = [a for p in chain(parser, args) for a in p._actions if a.option_strings]
    defaults = [a.default for a in actions]
    try:
        for a in actions:
            a.default = argparse.SUPPRESS
        seen, _ = parser.parse_known_args(argv)
    finally:
        for a, default in zip(actions, defaults):
            a.default = default
    return {a.dest for a in actions if hasattr(seen, a.dest)}


def with_config(parser: argparse.ArgumentParser, args, argv: list[str]) -> argparse.Namespace:
    """`args` with the values of its --config file (`cliargs.read_config`: one `error:` line for a bad file) as
    the command's defaults (`set_defaults`), argv read again over them: a typed flag wins; the file's keys count
    as given."""
    cls = getattr(args, "options_cls", None)
    if not getattr(args, "config", None) or cls is None:
        return args
    values = read_config(cls, args.config, getattr(args, "options_skip", ()))
    chain(parser, args)[-1].set_defaults(**values)
    new, _ = parser.parse_known_args(argv)
    new.given = set(getattr(args, "given", ())) | set(values)
    return new


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
