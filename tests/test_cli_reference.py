"""docs/cli.md is generated from the parsers (`python -m nni_lvbert.clidoc --write`): it fails here when a flag,
default or help text changes without the page, and every option of every command has its help text."""
from __future__ import annotations

import argparse
from pathlib import Path

from nni_lvbert import clidoc
from nni_lvbert.argcheck import commands as walk
from nni_lvbert.cli import build_parser

REPO = Path(__file__).resolve().parent.parent


def test_the_committed_reference_is_the_generated_one():
    committed = (REPO / clidoc.REFERENCE).read_text(encoding="utf-8")
    assert committed == clidoc.reference(), "docs/cli.md is stale: run `python -m nni_lvbert.clidoc --write`"


def test_every_command_is_in_the_reference_and_every_option_explained():
    text = clidoc.reference()
    commands = list(walk(build_parser()))
    assert len(commands) >= 19
    for path, parser, _ in commands:
        assert f"## `lvbert {' '.join(path)}`" in text
        for action in parser._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"lvbert {' '.join(path)} {action.option_strings or action.dest}: no help text"


def test_results_take_json():
    text = clidoc.reference()
    sections = dict(s.split("\n", 1) for s in text.split("\n## ")[1:])
    for name in ("`lvbert supernet train`", "`lvbert search run`", "`lvbert pretrain`", "`lvbert finetune`",
                 "`lvbert run`", "`lvbert study ranking`", "`lvbert iot eval`", "`lvbert export`"):
        assert "`--json`" in sections[name], name
