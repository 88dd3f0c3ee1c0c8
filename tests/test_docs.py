"""The docs' commands as written. Every code block of the user guide (docs/index.md and the guide's pages in the
order of mkdocs.yml's nav, docs/deploy.md included) is marked:

    <!-- docs-test: run -->            its commands run here, in a temp copy of the quickstart's layout (tiny)
    <!-- docs-test: tiny -->           its commands run as written at tiny settings, one block after another as a
                                       newcomer follows the guide: in a copy of a tiny quickstart's outputs (made by
                                       the guide's own commands), without the directories the block writes itself;
                                       step counts and budgets shrunk (`TINY`, through --config and given values),
                                       and a latency budget taken from the block's own table (`budget_from_table`)
    <!-- docs-test: python -->         its Python runs as written in a fresh process, in such a copy; only
                                       `PYTHON_SHRUNK`'s training steps (and validation period) are shrunk
    <!-- docs-test: parse REASON -->   not run (REASON: minutes of training, nnictl, a GPU, ...): every `lvbert` line
                                       must parse with the real CLI, every script it names must exist
    <!-- docs-test: skip REASON -->    not checked (installs, the two top-level scripts)

A block without a mark fails, so a new command cannot slip into the guide untested. The README's tour lines are
parsed the same way. Every output of every command (`--out`, `> FILE`, `init-experiment DIR`) is under runs/, and no
command writes a directory a command before it in the guide wrote (`test_the_guide_runs_in_order`): a reader can
follow the pages one after another. `mkdocs build --strict` (in .ci/run) checks links and anchors.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest
import yaml

from nni_lvbert.cli import build_parser, main

REPO = Path(__file__).resolve().parent.parent


def guide_pages() -> list[Path]:
    """docs/index.md, then the user guide's pages in the order of mkdocs.yml's nav (a reader's order)."""
    import yaml

    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    guide = next(entry["User guide"] for entry in nav if "User guide" in entry)
    return [REPO / "docs" / "index.md", *(REPO / "docs" / next(iter(page.values())) for page in guide)]


PAGES = guide_pages()
BLOCK = re.compile(r"(?:<!-- docs-test: (\w+)\s*(.*?)\s*-->\n)?```(\w*)\n(.*?)```", re.DOTALL)
MARKS = {"run", "tiny", "python", "parse", "skip"}
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


def unwrapped(argv: list[str]) -> list[str]:
    """`argv` without a leading `taskset -c CPUS`, `env` and `VAR=value` words: the command they run."""
    while argv:
        if argv[0] == "taskset" and argv[1:2] == ["-c"]:
            argv = argv[3:]
        elif argv[0] == "env" or re.match(r"^[A-Z_]+=", argv[0]):
            argv = argv[1:]
        else:
            break
    return argv


def parse_error(argv: list[str]) -> str | None:
    """None when `argv` (a line of the docs) is a valid command as written, else why not."""
    tool, *args = unwrapped(redirected(argv)[0])
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
        if args[:1] == ["stop"] and "--all" in args:
            return "`nnictl stop --all` stops every experiment of the user: stop the one (`nnictl stop ID`)"
        if args[:2] == ["algo", "register"]:  # the shipped registry entry (init-experiment copies it)
            meta = Path(args[args.index("--meta") + 1])
            return None if meta.name in {f.name for f in EXPERIMENT_FILES} else f"no shipped {meta.name}"
        if args[:2] in (["algo", "list"], ["algo", "unregister"]):
            return None
        return None if args[:1] in (["stop"], ["resume"], ["experiment"]) else f"unknown nnictl command {args}"
    return f"unknown tool {tool!r}: mark the block `skip` with a reason"


ALL = list(blocks())


def test_the_guide_has_blocks_of_every_kind():
    assert len(ALL) >= 20 and {b[2] for b in ALL} == MARKS
    assert set((REPO / "docs" / "guide").glob("*.md")) < set(PAGES) and REPO / "docs" / "deploy.md" in PAGES


@pytest.mark.parametrize("page,line,mark,reason,lang,text", ALL, ids=[f"{b[0].name}:{b[1]}" for b in ALL])
def test_every_block_is_marked_and_its_commands_parse(page, line, mark, reason, lang, text):
    assert mark in MARKS, f"{page}:{line}: mark the block <!-- docs-test: run|tiny|parse REASON|skip REASON -->"
    assert mark in ("run", "tiny", "python") or reason, f"{page}:{line}: `{mark}` needs a reason"
    if mark == "skip":
        return
    if mark == "python":
        assert lang == "python", f"{page}:{line}: a `python` block is Python"
        compile(text, f"{page}:{line}", "exec")
        return
    assert lang == "bash", f"{page}:{line}: only bash blocks can be run or parsed"
    cmds = commands(text)
    assert cmds, f"{page}:{line}: an empty block"
    for argv in cmds:
        assert parse_error(argv) is None, f"{page}:{line}: {shlex.join(argv)}: {parse_error(argv)}"


def test_readme_tour_commands_parse():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    lines = re.findall(r"^\| [^|]+ \| `(lvbert [^`]+)` \|", readme, re.MULTILINE)
    assert len(lines) >= 10
    for line in lines:
        assert parse_error(shlex.split(line)) is None, line
    assert len(readme.encode()) <= 15_000


def written(argv: list[str]) -> list[str]:
    """The paths a line of the docs writes: its `> FILE`, its --out (a lvbert command's default one too) and
    init-experiment's DIR; nothing for --print-config or a line that does not parse."""
    argv, stdout_file = redirected(argv)
    argv = unwrapped(argv)
    paths = [stdout_file] if stdout_file else []
    if argv[:1] == ["lvbert"]:
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                args = build_parser().parse_args(argv[1:])
        except SystemExit:
            return paths
        if not getattr(args, "print_config", False):
            paths += [v for v in (getattr(args, "out", None), getattr(args, "dir", None)) if v]
    elif "--out" in argv:
        paths.append(argv[argv.index("--out") + 1])
    return paths


def test_every_output_is_under_runs():
    """Issue #41: examples wrote supernet.yaml, T.json, tiny-cpu.json, search-4ms/, my-exp/ into the repository's
    root; every output of the guide's and the README's commands goes under runs/ (ignored by git)."""
    lines = [(f"{page.name}:{line}", argv) for page, line, mark, _, _, text in ALL if mark in ("run", "tiny", "parse")
             for argv in commands(text)]
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    lines += [("README.md", shlex.split(cmd)) for cmd in re.findall(r"`(lvbert [^`]+)`", readme)]
    checked = 0
    for where, argv in lines:
        for path in written(argv):
            assert path.startswith("runs/"), f"{where}: {shlex.join(argv)} writes {path}, outside runs/"
            checked += 1
    assert checked >= 50


def test_the_guide_runs_in_order():
    """Following the pages in nav order after the quickstart, no command refuses its output as another's: a command
    that refuses a non-empty output (it has --overwrite) never names a directory a command before it wrote, nor one
    above it (issue #41: hf.md's export wrote runs/quickstart/model, then deploy.md's export refused it)."""
    quickstart = shlex.split(QUICKSTART[0])
    by = {Path(p): "the quickstart" for p in ("runs/quickstart", "runs/quickstart/supernet", "runs/quickstart/search")}
    for page, line, mark, _, _, text in ALL:
        if mark not in ("run", "tiny", "parse"):
            continue
        for argv in commands(text):
            argv = unwrapped(redirected(argv)[0])
            if argv[:1] != ["lvbert"] or argv == quickstart:  # the quickstart's own command: the reader ran it
                continue
            args = build_parser().parse_args(argv[1:])
            target = getattr(args, "out", None) or getattr(args, "dir", None)
            if (target is None or not hasattr(args, "overwrite") or args.overwrite or getattr(args, "resume", False)
                    or getattr(args, "print_config", False)):
                continue
            target = Path(target)
            clash = [p for p in by if p == target or target in p.parents]
            assert not clash, (f"{page.name}:{line}: {shlex.join(argv)} writes {target}, which is not empty after "
                               f"{by[clash[0]]}")
            stages = ["supernet", "search"] + (["pretrain"] if getattr(args, "objective", None) else [])
            for path in [target, *(target / s for s in stages if argv[1] == "run")]:
                by[path] = f"{page.name}:{line} ({shlex.join(argv)})"
    assert len(by) >= 30


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
    assert sorted(p.name for p in quickstart_copy.iterdir()) == ["runs"]  # every output under runs/
    # what the search page's by-hand block promises: the copied configs name the supernet
    search_yml = (quickstart_copy / "runs" / "my-exp" / "search.yml").read_text()
    assert str((quickstart_copy / "runs" / "quickstart" / "supernet").resolve()) in search_yml
    assert "LVBERT_SUPERNET:-" not in search_yml.split("trialCommand:")[1].splitlines()[0]


# --- tiny blocks: the guide's training commands, as written, at tiny settings ---------------------------------------
# option values every tiny block runs with (those of each command's options class, through --config), and the
# values that replace the same options where a command gives them (a step count is a number, not the path tested)
TINY = {"max_steps": 4, "supernet_max_steps": 4, "pretrain_max_steps": 4, "warmup_steps": 1, "val_every": 2,
        "val_batches": 2, "ckpt_every": 2, "max_docs": 200, "population": 4, "iterations": 2, "topk": 2,
        "crossover": 2, "mutation": 2, "val_tokens": 512, "rerank_steps": 4, "max_train_examples": 32,
        "epochs": 1.0, "batch_size": 8}
GIVEN_ONLY = {"rerank": 2}  # replaced where given, never added (it switches a stage on)
# what the tiny quickstart is made of: the guide's own first commands (run, pretrain, IOT and HF-directory pages)
QUICKSTART = ["lvbert run --size tiny --out runs/quickstart",
              "lvbert pretrain --arch runs/quickstart/search/best_arch.json --size tiny --out runs/quickstart/pretrain",
              "lvbert iot train --supernet runs/quickstart/supernet --orders-from runs/quickstart/search --m 4 "
              "--out runs/quickstart/iot",
              "lvbert export --supernet runs/quickstart/supernet --arch runs/quickstart/search/best_arch.json "
              "--out runs/quickstart/model"]


def _tiny_argv(argv: list[str], config_dir: Path) -> tuple[list[str], str | None, argparse.Namespace]:
    """`argv` (lvbert ...) at tiny settings: given TINY options replaced, the rest through --config."""
    import yaml

    from nni_lvbert.cliargs import options_of

    argv, stdout_file = redirected(argv)
    args = build_parser().parse_args(argv[1:])
    cls = getattr(args, "options_cls", None)
    if cls is None:
        return argv, stdout_file, args
    flags = {s: action.dest for action in build_parser_actions(argv) for s in action.option_strings}
    out = list(argv)
    for i, tok in enumerate(out[:-1]):
        name = flags.get(tok.split("=", 1)[0])
        if name in {**TINY, **GIVEN_ONLY} and "=" not in tok:
            out[i + 1] = str({**TINY, **GIVEN_ONLY}[name])
    out = budget_from_table(out)
    offered = {o.name for o in options_of(cls)} - set(args.options_skip)
    values = {name: TINY[name] for name in offered if name in TINY}
    if "--supernet" in out:  # the supernet's prepared data, not a corpus of its own
        values.pop("max_docs", None)
    if values and "--config" not in out and not getattr(args, "resume", False):  # a resumed run has its options: nothing is added
        config = config_dir / f"tiny-{cls.__name__}.yaml"
        config.write_text(yaml.safe_dump(values))
        out += ["--config", str(config)]
    return out, stdout_file, build_parser().parse_args(out[1:])


def budget_from_table(argv: list[str]) -> list[str]:
    """`--max-latency-ms` set to the median order of the command's own `--latency-table`, the reader's step that
    deploy.md asks for: its number is its machine's (a slower CPU cannot meet it), the docs say to take your table's."""
    from nni_lvbert.config import load_space
    from nni_lvbert.search.latency import LatencyModel, load_table

    if "--max-latency-ms" not in argv or "--latency-table" not in argv:
        return argv
    table = Path(argv[argv.index("--latency-table") + 1])
    if not table.is_file():
        return argv
    out = list(argv)
    out[out.index("--max-latency-ms") + 1] = str(LatencyModel(load_table(table, "cpu")).spread(load_space("lvbert"))
                                                 ["median"])
    return out


def build_parser_actions(argv: list[str]):
    """The actions of the (sub)parser that parses `argv`."""
    parser = build_parser()
    for word in argv[1:]:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or word not in sub.choices:
            break
        parser = sub.choices[word]
    return parser._actions


def run_tiny(argv: list[str], capsys, where: str, config_dir: Path) -> None:
    argv, stdout_file, _ = _tiny_argv(argv, config_dir)
    code = main(argv[1:])
    out, err = capsys.readouterr()
    if stdout_file:
        Path(stdout_file).write_text(out)
    assert code == 0, f"{where}: {shlex.join(argv)} exited {code}: {err.strip()[-800:]}"


@pytest.fixture(scope="module")
def tiny_quickstart(tmp_path_factory, one_thread):
    """A tiny quickstart's outputs (runs/quickstart/{supernet,search,pretrain,iot}), made by the guide's commands."""
    import os

    root = tmp_path_factory.mktemp("guide")
    before = os.getcwd()
    os.chdir(root)
    try:
        capsys = _NoCapture()
        for line in QUICKSTART:
            run_tiny(shlex.split(line), capsys, "quickstart", root)
    finally:
        os.chdir(before)
    return root


class _NoCapture:
    """capsys' readouterr for module-scoped work (pytest's capsys is per test): output goes to the test log."""

    def readouterr(self):
        return "", ""


TINY_BLOCKS = [b for b in ALL if b[2] == "tiny"]


@pytest.mark.parametrize("page,line,mark,reason,lang,text", TINY_BLOCKS,
                         ids=[f"{b[0].name}:{b[1]}" for b in TINY_BLOCKS])
def test_tiny_blocks_run_as_written(tiny_quickstart, tmp_path, monkeypatch, capsys, page, line, mark, reason, lang,
                                    text):
    import shutil

    work = tmp_path / "work"
    shutil.copytree(tiny_quickstart, work, symlinks=True)
    monkeypatch.chdir(work)
    at_start = {p for p in Path("runs").rglob("*") if p.is_dir()}
    for argv in commands(text):
        assert argv[0] == "lvbert", f"{page}:{line}: a tiny block runs lvbert commands"
        _, _, args = _tiny_argv(argv, tmp_path)
        # a command that writes --out (it refuses a non-empty one: a run directory it does not resume, an export)
        writes = (hasattr(args, "overwrite") and not getattr(args, "resume", False)
                  and not getattr(args, "print_config", False))
        out = Path(args.out) if writes and getattr(args, "out", None) else None
        if out is not None and out in at_start and out.exists():
            shutil.rmtree(out)  # the block makes this directory itself: start where its reader stands
        run_tiny(argv, capsys, f"{page}:{line}", tmp_path)
    assert sorted(p.name for p in work.iterdir()) == sorted(p.name for p in tiny_quickstart.iterdir())  # runs/ only


def test_every_training_page_has_a_tiny_block():
    pages = {b[0].name for b in TINY_BLOCKS}
    assert {"run.md", "supernet.md", "search.md", "iot.md", "pretrain.md", "finetune.md", "hf.md", "deploy.md"} <= pages


# --- python blocks: the guide's Python, as written, in a fresh process -------------------------------------------
# the only change made to a block's text: training steps and the validation period and size that go with them (a
# reader's 1,000 Trainer steps on the tiny export are minutes of CPU for nothing the test checks); each replaced text
# must be in some block, so none goes stale
PYTHON_SHRUNK = {"max_steps=1000": "max_steps=2", "val_check_interval=250": "val_check_interval=2",
                 "limit_val_batches=20": "limit_val_batches=2"}
PYTHON_BLOCKS = [b for b in ALL if b[2] == "python"]


def test_python_shrinking_is_in_use():
    assert all(any(old in b[5] for b in PYTHON_BLOCKS) for old in PYTHON_SHRUNK)


@pytest.mark.parametrize("page,line,mark,reason,lang,text", PYTHON_BLOCKS,
                         ids=[f"{b[0].name}:{b[1]}" for b in PYTHON_BLOCKS])
def test_python_blocks_run_as_written(tiny_quickstart, tmp_path, page, line, mark, reason, lang, text):
    """In a copy of the tiny quickstart (runs/quickstart/model: the HF page's export), in a fresh process as a reader
    runs it; it writes nothing outside runs/."""
    import os
    import shutil
    import subprocess
    import sys

    work = tmp_path / "work"
    shutil.copytree(tiny_quickstart, work, symlinks=True)
    for old, new in PYTHON_SHRUNK.items():
        text = text.replace(old, new)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"),
           "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "-c", text], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{page}:{line}: {proc.stderr[-3000:]}"
    assert sorted(p.name for p in work.iterdir()) == sorted(p.name for p in tiny_quickstart.iterdir())  # runs/ only


def test_scale_out_yaml_blocks_are_valid_nni_configs(tmp_path):
    """Each training-service YAML of the scale-out page, put into the shipped experiments/standalone.yml as the page
    says (edit only the training service), passes NNI's own experiment-config validation (a misspelled field, a
    service NNI lacks or `maxTrialNumberPerGpu` without `trialGpuNumber` fails it)."""
    from nni.experiment.config import ExperimentConfig

    base = yaml.safe_load((REPO / "experiments" / "standalone.yml").read_text(encoding="utf-8"))
    base["searchSpaceFile"] = str(REPO / "experiments" / "standalone.yml")  # any existing file: not read here
    key = tmp_path / "id_rsa"
    key.write_text("not a key: NNI's validation only checks the file exists")
    text = (REPO / "docs" / "guide" / "scale-out.md").read_text(encoding="utf-8")
    platforms = []
    for block in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL):
        edit = yaml.safe_load(block)
        assert set(edit) <= {"trialConcurrency", "trialGpuNumber", "trainingService"}, set(edit)
        for machine in edit["trainingService"].get("machineList", []):
            machine["sshKeyFile"] = str(key)
        config = ExperimentConfig(**{**base, **edit})
        config.validate()
        platforms.append(config.training_service.platform)
    assert platforms == ["local", "remote"]
