"""The docs' commands as written. Every code block of the user guide (docs/index.md, docs/guide/*.md) is marked:

    <!-- docs-test: run -->            its commands run here, in a temp copy of the quickstart's layout (tiny)
    <!-- docs-test: parse REASON -->   not run (REASON: minutes of training, nnictl, a GPU, ...): every `lvbert` line
                                       must parse with the real CLI, every script it names must exist
    <!-- docs-test: skip REASON -->    not checked (installs, the two top-level scripts, Python snippets)

A block without a mark fails, so a new command cannot slip into the guide untested. The README's tour lines are
parsed the same way. `mkdocs build --strict` (in .ci/run) checks links and anchors.
"""
from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from nni_lvbert.cli import build_parser, main

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "docs" / "index.md", *sorted((REPO / "docs" / "guide").glob("*.md"))]
BLOCK = re.compile(r"(?:<!-- docs-test: (\w+)\s*(.*?)\s*-->\n)?```(\w*)\n(.*?)```", re.S)
MARKS = {"run", "parse", "skip"}
SEARCHED = "fccfgfcccgsssfsggcsgfcgc"  # the quickstart's winner (docs/results.md)


def blocks():
    """(page, line, mark, reason, language, text) of every fenced block of the guide."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            line = text[:m.start()].count("\n") + 1
            yield page.relative_to(REPO), line, m.group(1), m.group(2), m.group(3), m.group(4)


def commands(block: str) -> list[list[str]]:
    """A shell block's commands as argv lists: continuation lines joined, comments and VAR=value prefixes dropped,
    `&&` chains split."""
    joined = re.sub(r"\\\n\s*", " ", block)
    out = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            argv, words = words[:cut], words[cut + 1:]
            while argv and re.match(r"^[A-Z_]+=", argv[0]):
                argv = argv[1:]
            if argv:
                out.append(argv)
    return out


def redirected(argv: list[str]) -> tuple[list[str], str | None]:
    """`argv` without a trailing `> FILE`, and FILE (None without one)."""
    if ">" in argv:
        i = argv.index(">")
        return argv[:i], argv[i + 1]
    return argv, None


def parse_error(argv: list[str]) -> str | None:
    """None when `argv` (a line of the docs) is a valid command as written, else why not."""
    tool, *args = redirected(argv)[0]
    if tool == "lvbert":
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                build_parser().parse_args(args)
        except SystemExit as exc:
            return f"does not parse ({exc.code}): {err.getvalue().strip().splitlines()[-1:]}"
        return None
    if tool in ("python", "bash") and args and args[0].endswith((".py", ".sh")):
        return None if (REPO / args[0]).is_file() else f"{args[0]} does not exist"
    if tool == "nnictl":
        from nni_lvbert.resources import EXPERIMENT_FILES

        if args[:1] == ["create"]:
            config = Path(args[args.index("--config") + 1])
            return None if config.name in {f.name for f in EXPERIMENT_FILES} else f"no shipped {config.name}"
        return None if args[:1] in (["stop"], ["resume"], ["experiment"]) else f"unknown nnictl command {args}"
    return f"unknown tool {tool!r}: mark the block `skip` with a reason"


ALL = list(blocks())


def test_the_guide_has_blocks_of_every_kind():
    assert len(ALL) >= 20 and {b[2] for b in ALL} == MARKS


@pytest.mark.parametrize("page,line,mark,reason,lang,text", ALL, ids=[f"{b[0].name}:{b[1]}" for b in ALL])
def test_every_block_is_marked_and_its_commands_parse(page, line, mark, reason, lang, text):
    assert mark in MARKS, f"{page}:{line}: mark the block <!-- docs-test: run|parse REASON|skip REASON -->"
    assert mark == "run" or reason, f"{page}:{line}: `{mark}` needs a reason"
    if mark == "skip":
        return
    assert lang == "bash", f"{page}:{line}: only bash blocks can be run or parsed"
    cmds = commands(text)
    assert cmds, f"{page}:{line}: an empty block"
    for argv in cmds:
        assert parse_error(argv) is None, f"{page}:{line}: {shlex.join(argv)}: {parse_error(argv)}"


def test_readme_tour_commands_parse():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    lines = re.findall(r"^\| [^|]+ \| `(lvbert [^`]+)` \|", readme, re.M)
    assert len(lines) >= 10
    for line in lines:
        assert parse_error(shlex.split(line)) is None, line
    assert len(readme.encode()) <= 15_000


@pytest.fixture
def quickstart_copy(tiny, tmp_path, monkeypatch):
    """A temp working directory laid out like the quickstart's: runs/quickstart/supernet (the tiny test supernet)
    and runs/quickstart/search/best_arch.json (the quickstart's winner)."""
    import json

    from nni_lvbert.arch import Arch

    run = tmp_path / "runs" / "quickstart"
    run.mkdir(parents=True)
    (run / "supernet").symlink_to(tiny["run"], target_is_directory=True)
    (run / "search").mkdir()
    winner = Arch.parse(SEARCHED)
    (run / "search" / "best_arch.json").write_text(json.dumps({"arch": winner.dict, "compact": winner.compact}))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_run_blocks_run_as_written(quickstart_copy, capsys):
    ran = 0
    for page, line, mark, _, _, text in ALL:
        if mark != "run":
            continue
        for argv in commands(text):
            assert argv[0] == "lvbert", f"{page}:{line}: a run block runs lvbert commands"
            argv, stdout_file = redirected(argv)
            code = main(argv[1:])
            out, err = capsys.readouterr()
            if stdout_file:
                Path(stdout_file).write_text(out)
            assert code == 0, f"{page}:{line}: {shlex.join(argv)} exited {code}: {err.strip()[-500:]}"
            ran += 1
    assert ran >= 3
    # what the search page's by-hand block promises: the copied configs name the supernet
    search_yml = (quickstart_copy / "my-exp" / "search.yml").read_text()
    assert str((quickstart_copy / "runs" / "quickstart" / "supernet").resolve()) in search_yml
    assert "LVBERT_SUPERNET:-" not in search_yml.split("trialCommand:")[1].splitlines()[0]
