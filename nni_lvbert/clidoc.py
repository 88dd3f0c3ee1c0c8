"""The command-line reference (docs/cli.md), generated from the parsers `lvbert` itself runs.

    python -m nni_lvbert.clidoc            # print it
    python -m nni_lvbert.clidoc --write    # write docs/cli.md (tests/test_cli_reference.py fails when it drifts)

One section per command that runs something (`lvbert supernet train`, ...): its help line and a table of its
options with their defaults.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .argcheck import commands

REFERENCE = Path("docs") / "cli.md"  # relative to the repository root
HEADER = """# Command-line reference

Generated from the parsers by `python -m nni_lvbert.clidoc --write`; do not edit by hand
(`tests/test_cli_reference.py` fails when this page and the commands disagree). Every command that prints a result
takes `--json` (one JSON object instead of one `field  value` line per field).
"""


def _cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _flags(action: argparse.Action) -> str:
    shown = action.metavar or ("{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper())
    metavar = "" if action.nargs == 0 else f" {shown}"
    if action.nargs in ("+", "*"):
        metavar += " ..."
    if not action.option_strings:  # a positional
        return f"`{action.metavar or action.dest}`"
    return ", ".join(f"`{n}{metavar}`" for n in action.option_strings)


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS) or action.required:
        return ""
    value = action.default
    if isinstance(value, (list, tuple)):
        value = " ".join(map(str, value))
    return f"`{value}`"


def reference() -> str:
    from .cli import build_parser

    sections = [HEADER.rstrip()]
    for path, parser, help_ in commands(build_parser()):
        lines = [f"## `lvbert {' '.join(path)}`", "", _cell(help_ or parser.description or "")]
        rows = [a for a in parser._actions if not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS]
        if rows:
            lines += ["", "| option | default | meaning |", "|---|---|---|"]
            lines += [f"| {_flags(a)} | {_default(a)} | {_cell(a.help or '')} |" for a in rows]
        sections.append("\n".join(lines))
    return "\n\n".join(sections) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nni_lvbert.clidoc", description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help=f"write {REFERENCE} (run from the repository root)")
    args = p.parse_args(argv)
    text = reference()
    if args.write:
        from .atomic import write_text

        write_text(REFERENCE, text)
        print(f"wrote {REFERENCE}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
