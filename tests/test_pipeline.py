"""`lvbert run` end to end (tiny): data -> supernet -> search, DDP with 2 CPU ranks, kill -9 + --resume."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nni_lvbert.cli import main
from tests.conftest import kill9_when

REPO = Path(__file__).resolve().parent.parent
SMALL_SEARCH = ["--population", "4", "--iterations", "2", "--topk", "2", "--crossover", "2", "--mutation", "2"]


def run_args(out, cache_dir, steps=4, *extra):
    return ["run", "--out", str(out), "--size", "tiny", "--max-docs", "120", "--cache-dir", str(cache_dir),
            "--supernet-max-steps", str(steps), *SMALL_SEARCH, "--no-progress", *extra]


@pytest.mark.slow
def test_run_with_two_cpu_ranks_then_pretrain_on_two(tmp_path, cache_dir):
    """Lightning's DDP launcher re-runs `lvbert run` for rank 1: it joins the supernet training with rank 0's
    options (instead of refusing the directory rank 0 just made) and leaves the search to rank 0. For --pretrain,
    rank 0 launches a new rank 1 that joins the pre-training (the pretrain DDP path of `lvbert pretrain`)."""
    out = tmp_path / "ddp"
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    env.pop("PYTEST_CURRENT_TEST", None)
    res = subprocess.run([sys.executable, "-m", "nni_lvbert.cli",
                          *run_args(out, cache_dir, 4, "--devices", "2", "--accelerator", "cpu", "--objective",
                                    "electra", "--pretrain-max-steps", "3", "--json")],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    meta = json.loads((out / "supernet" / "meta.json").read_text())
    assert meta["world_size"] == 2 and meta["steps"] == 4
    best = json.loads((out / "search" / "best_arch.json").read_text())
    assert len(best["compact"]) == 24 and 0.0 <= best["score"] <= 1.0
    history = (out / "search" / "history.jsonl").read_text().splitlines()
    assert len(history) == 4 + 1 * (2 + 2)  # searched once, by rank 0 only
    pretrain = json.loads((out / "pretrain" / "meta.json").read_text())
    assert pretrain["world_size"] == 2 and pretrain["steps"] == 3 and pretrain["arch"] == best["compact"]
    assert (out / "pretrain" / "hf-generator" / "config.json").is_file()
    summary = json.loads(res.stdout.strip().splitlines()[-1])  # --json: one line, the last on stdout
    assert summary["arch"] == best["compact"] and summary["hf"] == str(out / "pretrain" / "hf")
    assert "already" not in res.stderr  # one run of each stage


@pytest.mark.slow
def test_run_resumes_from_the_run_directory_alone(tmp_path, cache_dir, capsys):
    """kill -9 during the search stage, then exactly `lvbert run --out D --resume`: the run finishes with the
    options it was started with; a contradicting option is one line."""
    out = tmp_path / "run"
    steps = 4
    history = out / "search" / "history.jsonl"

    def two_scored():
        n = len(history.read_text().splitlines()) if history.is_file() else 0
        return n if 2 <= n < 8 else None

    killed_at = kill9_when(run_args(out, cache_dir, steps, "--seed", "3"), two_scored, watch=history)
    assert killed_at is not None, "the search finished before it could be killed"
    capsys.readouterr()
    assert main(["run", "--out", str(out), "--resume", "--size", "small"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--size small contradicts" in err[0] and "size tiny" in err[0]
    assert main(["run", "--out", str(out), "--resume"]) == 0
    meta = json.loads((out / "supernet" / "meta.json").read_text())
    assert meta["steps"] == steps and meta["seed"] == 3 and meta["options"]["max_docs"] == 120
    best = json.loads((out / "search" / "best_arch.json").read_text())
    assert best["seed"] == 3 and best["budget"] == 8
    assert len(history.read_text().splitlines()) == 8  # nothing scored twice
    # finished: a second resume does nothing new and prints the same answer
    capsys.readouterr()
    assert main(["run", "--out", str(out), "--resume", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["arch"] == best["compact"]
    # a non-empty directory without --resume/--overwrite is refused
    assert main(run_args(out, cache_dir, steps)) == 2


def test_pretrain_on_several_devices_under_an_outside_launcher_is_one_line(tmp_path, cache_dir, capsys,
                                                                           monkeypatch):
    """Under torchrun (LOCAL_RANK set before anything started) rank 0 cannot launch new ranks for --pretrain."""
    out = tmp_path / "run"
    for var, value in (("LOCAL_RANK", "0"), ("SLURM_NTASKS", "2")):
        with monkeypatch.context() as m:
            m.setenv(var, value)
            assert main(run_args(out, cache_dir, 4, "--devices", "2", "--objective", "mlm")) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and "torchrun" in err[0], err
        assert not out.exists()


def test_pretrain_on_several_nodes_is_one_line(tmp_path, cache_dir, capsys):
    """The ranks of other nodes are not rank 0's to launch again for the pre-training stage."""
    out = tmp_path / "run"
    assert main(run_args(out, cache_dir, 4, "--num-nodes", "2", "--objective", "mlm")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "--num-nodes 2`" in err[0], err
    assert not out.exists()


def test_run_hands_every_hardware_option_to_the_supernet_stage(tmp_path, cache_dir, capsys, monkeypatch):
    """`lvbert run` takes the whole hardware group of the training commands, and each value reaches the supernet
    stage (its options.json; the search stage is cut short here)."""
    from nni_lvbert.search import run as search_run

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_ = capsys.readouterr().out
    for flag in ("--accelerator", "--devices", "--num-nodes", "--ddp-strategy", "--precision", "--num-workers",
                 "--compile"):
        assert f"{flag} " in help_, flag

    class Stop(Exception):
        pass

    def stop(opts, log=None):
        raise Stop

    monkeypatch.setattr(search_run, "run_search", stop)
    out = tmp_path / "run"
    with pytest.raises(Stop):
        main(run_args(out, cache_dir, 2, "--accelerator", "cpu", "--ddp-strategy", "auto", "--precision", "32-true",
                      "--num-workers", "1"))
    stored = json.loads((out / "supernet" / "options.json").read_text())
    assert {k: stored[k] for k in ("accelerator", "devices", "num_nodes", "ddp_strategy", "precision", "num_workers",
                                   "compile")} == {"accelerator": "cpu", "devices": "1", "num_nodes": 1,
                                                   "ddp_strategy": "auto", "precision": "32-true", "num_workers": 1,
                                                   "compile": None}
    meta = json.loads((out / "supernet" / "meta.json").read_text())
    assert meta["steps"] == 2 and meta["precision"] == "32-true"


def test_an_unknown_compile_backend_is_one_line_before_anything_is_written(tmp_path, cache_dir, capsys):
    out = tmp_path / "run"
    assert main(run_args(out, cache_dir, 4, "--compile", "nonesuch")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --compile nonesuch: not a torch.compile backend"), err
    assert not out.exists()


def test_ctrl_c_during_the_search_names_the_run_command_to_resume(tmp_path, cache_dir, capsys, monkeypatch):
    from nni_lvbert.search import scorer as scorer_mod

    def interrupted(self, arch):
        raise KeyboardInterrupt

    monkeypatch.setattr(scorer_mod.SupernetScorer, "score", interrupted)
    out = tmp_path / "run"
    assert main(run_args(out, cache_dir, 4, "--val-every", "3")) == 130
    err = capsys.readouterr().err
    assert f"continue with: lvbert run --out {out} --resume" in err and "lvbert search run" not in err
    supernet = json.loads((out / "supernet" / "meta.json").read_text())
    assert [h["step"] for h in supernet["validation"]] == [3, 4]  # --val-every, then the last step
    # minutes count every part: the interrupted part is in elapsed.json (made long here), the resumed summary adds it
    parts = json.loads((out / "elapsed.json").read_text())["parts_seconds"]
    assert len(parts) == 1 and parts[0] > 0
    (out / "elapsed.json").write_text(json.dumps({"parts_seconds": [600.0]}))
    monkeypatch.undo()
    capsys.readouterr()
    assert main(["run", "--out", str(out), "--resume", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["minutes"] >= 10.0 > summary["minutes_this_part"]
    parts = json.loads((out / "elapsed.json").read_text())["parts_seconds"]
    assert len(parts) == 2 and parts[0] == 600.0
    assert abs(summary["minutes"] - sum(parts) / 60) <= 0.1
