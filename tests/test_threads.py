"""A fair share of the cores for each computing process (nni_lvbert/threads.py, issue 55 item 2)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nni_lvbert import threads
from nni_lvbert.argcheck import parse_args
from nni_lvbert.cli import build_parser, computes, main
from nni_lvbert.cliargs import options_from_args
from nni_lvbert.resources import EXPERIMENTS_DIR


@pytest.fixture
def registry(tmp_path, monkeypatch):
    """A private registry ($LVBERT_CACHE/running), no thread settings inherited, this process not yet settled."""
    monkeypatch.setenv("LVBERT_CACHE", str(tmp_path / "cache"))
    for var in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", threads.CONCURRENCY_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(threads, "_decision", None)
    return tmp_path / "cache" / "running"


@pytest.fixture
def neighbour():
    """A live process other than this one (the fake second training)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc.pid
    proc.kill()
    proc.wait()


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_explicit_threads_win_over_the_environment_and_the_share():
    env = {"OMP_NUM_THREADS": "1", threads.CONCURRENCY_ENV: "4"}
    assert threads.fair_share(3, concurrency=2, env=env, running=5, n_cores=8) == (3, "--threads")


def test_omp_num_threads_wins_over_a_known_concurrency():
    assert threads.fair_share(None, concurrency=2, env={"OMP_NUM_THREADS": "5"}, n_cores=8) == (5, "$OMP_NUM_THREADS")
    assert threads.fair_share(None, concurrency=2, env={"OMP_NUM_THREADS": ""}, n_cores=8)[0] == 4  # set but empty


def test_known_concurrency_divides_the_cores():
    assert threads.fair_share(None, concurrency=4, env={}, running=1, n_cores=8)[0] == 2
    assert threads.fair_share(None, env={threads.CONCURRENCY_ENV: "2"}, running=1, n_cores=8)[0] == 4
    assert threads.fair_share(None, concurrency=16, env={}, n_cores=2)[0] == 1  # at least one
    assert threads.fair_share(None, concurrency=1, env={}, running=3, n_cores=8)[0] is None  # alone: torch's choice


def test_the_registry_counts_live_computing_processes_only(registry, neighbour):
    dead = dead_pid()
    threads.register()
    threads.register(neighbour)
    registry.mkdir(parents=True, exist_ok=True)
    (registry / str(dead)).write_text("")
    assert threads.computing() == sorted([os.getpid(), neighbour])
    assert not (registry / str(dead)).exists()  # a dead process's file is removed
    assert threads.fair_share(None, env={}, n_cores=4) == (2, "2 lvbert processes computing on this machine: "
                                                                  "4 cores / 2")
    (registry / str(neighbour)).write_text("1")  # a reused pid: another start time than the registered process's
    assert threads.computing() == [os.getpid()]
    assert threads.fair_share(None, env={}, n_cores=4)[0] is None  # alone again: torch's own choice


def test_settle_sets_torch_threads_and_keeps_a_study_s_explicit_choice(registry):
    import torch

    before = torch.get_num_threads()
    try:
        first = threads.settle(1)
        assert torch.get_num_threads() == 1 and first["why"] == "--threads" and first["threads"] == 1
        assert threads.settle(None) is first  # a training inside a study keeps the study's --threads
        assert threads.decision() == first
        with pytest.raises(threads.UserError, match="--threads must be at least 1"):
            threads.settle(0)
    finally:
        torch.set_num_threads(before)


def test_omp_wait_policy_is_passive_only_beside_another_lvbert(registry, neighbour, monkeypatch):
    assert not threads.quiet_spinning() and "OMP_WAIT_POLICY" not in os.environ  # alone: OpenMP's default
    threads.register(neighbour)
    assert threads.quiet_spinning() and os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the user's value is never overridden
    assert not threads.quiet_spinning() and os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_lvbert_sets_the_wait_policy_before_a_computing_command_runs(registry, neighbour, tmp_path, monkeypatch):
    threads.register(neighbour)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    argv = ["search", "score", "--supernet", str(tmp_path / "none"), "--arch", "ccc"]
    assert main(argv) == 2  # no supernet: one error line, after the policy was decided
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert main(argv) == 2
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


@pytest.mark.parametrize("argv, cls", [(["search", "score", "--threads", "2"], "nni_lvbert.search.options.ScoreOptions"),
                                       (["run", "--threads", "2"], "nni_lvbert.pipeline.PipelineOptions"),
                                       (["search", "run", "--threads", "2"], "nni_lvbert.search.run.SearchOptions"),
                                       (["supernet", "train", "--threads", "2"], None),
                                       (["finetune", "--threads", "2"], None)])
def test_every_computing_command_takes_threads(argv, cls):
    from nni_lvbert.options import get_option

    args = parse_args(build_parser(), argv)
    assert computes(args)
    opts = options_from_args(args.options_cls, args)
    assert get_option(opts, "threads") == 2
    if cls:
        assert f"{type(opts).__module__}.{type(opts).__name__}" == cls


def test_one_threads_help_text_everywhere():
    from nni_lvbert.options import option_meta
    from nni_lvbert.pipeline import PipelineOptions
    from nni_lvbert.search.options import LatencyTableOptions, ScoreOptions
    from nni_lvbert.search.run import SearchOptions
    from nni_lvbert.study.common import StudyOptions
    from nni_lvbert.supernet.train import SupernetOptions

    for cls in (PipelineOptions, ScoreOptions, SearchOptions, LatencyTableOptions, StudyOptions, SupernetOptions):
        assert option_meta(cls, "threads")["help"] == threads.HELP, cls


def test_run_passes_threads_to_its_search_stage(tmp_path):
    from nni_lvbert.pipeline import PipelineOptions, search_options, supernet_options

    opts = PipelineOptions.flat(threads=1)
    assert search_options(opts, tmp_path, False).threads == 1
    assert supernet_options(opts, tmp_path, False).hardware.threads == 1


def test_nnictl_trials_get_cores_over_trial_concurrency(registry, tmp_path, monkeypatch):
    monkeypatch.setattr(threads, "cores", lambda: 8)
    assert threads.per_trial(4) == 2 and threads.per_trial(16) == 1 and threads.per_trial(1) is None
    assert threads.config_concurrency(EXPERIMENTS_DIR / "standalone.yml") == 2  # the shipped study experiment
    threads.start_trial(EXPERIMENTS_DIR / "standalone.yml")  # a study's trial: its experiment's trialConcurrency
    assert os.environ[threads.CONCURRENCY_ENV] == "2"
    assert threads.fair_share(env=os.environ, n_cores=8)[0] == 4
    assert threads.computing() == [os.getpid()]  # registered as computing
    assert threads.config_concurrency(tmp_path / "missing.yml") is None


def test_search_trial_takes_threads():
    from nni_lvbert.search import trial

    r = subprocess.run([sys.executable, "-m", "nni_lvbert.search.trial", "--help"], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(Path(trial.__file__).parents[2])}, timeout=120)
    assert r.returncode == 0 and "fair share of the cores" in r.stdout


@pytest.mark.parametrize("given, concurrency, expected", [(None, 2, "--threads 4"), ("3", 2, "--threads 3"),
                                                          (None, 1, None)])
def test_search_nnictl_trials_default_to_cores_over_concurrency(given, concurrency, expected, tmp_path, monkeypatch):
    import dataclasses
    from types import SimpleNamespace

    import yaml

    from nni_lvbert.config import load_size, load_space
    from nni_lvbert.search import nnictl
    from nni_lvbert.search.options import NnictlOptions
    from nni_lvbert.supernet import rundir

    monkeypatch.setattr(threads, "cores", lambda: 8)
    monkeypatch.setattr(rundir, "supernet_dir", lambda path: SimpleNamespace(spec=load_space("lvbert"),
                                                                             cfg=load_size("tiny")))
    monkeypatch.setattr(nnictl, "_check_port", lambda port: None)
    seen = {}
    monkeypatch.setattr(nnictl, "_run_nnictl", lambda cmd, env, failure: seen.setdefault("cmd", cmd) and "abcd1234")
    opts = NnictlOptions(supernet=str(tmp_path / "sn"), out=str(tmp_path / "exp"), concurrency=concurrency,
                         trial_threads=int(given) if given else None)
    nnictl.create(dataclasses.replace(opts, experiment_config=str(nnictl.DEFAULT_CONFIG)))
    command = yaml.safe_load(Path(seen["cmd"][seen["cmd"].index("--config") + 1]).read_text())["trialCommand"]
    assert (expected in command) if expected else "--threads" not in command, command
    assert command.count("--threads") <= 1


def test_a_training_s_threads_are_not_stored_and_a_resume_decides_anew():
    from nni_lvbert.options import to_dict
    from nni_lvbert.pipeline import PipelineOptions
    from nni_lvbert.supernet.train import SupernetOptions

    for cls in (SupernetOptions, PipelineOptions):
        opts = cls.flat(threads=2, devices="1")
        assert opts.hardware.threads == 2 and "threads" not in to_dict(opts) and to_dict(opts)["devices"] == "1"
