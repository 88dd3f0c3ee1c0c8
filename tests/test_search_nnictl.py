"""`lvbert search` under nnictl: the packaged experiment, port checks, end to end (web UI on loopback, metrics,
export, stop) and `nnictl resume`. Slow: each starts a real NNI experiment."""
from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from nni_lvbert.search.algorithm import EvolutionConfig
from tests.conftest import SLOTS, free_port, one_error_line, run_cli
from tests.nnictl_helpers import wait_for_trials

REPO = Path(__file__).resolve().parent.parent
TYPES = ["dc", "sa", "ff", "glu"]


def test_committed_search_space_json_is_generated_from_the_model_space(capsys):
    import yaml

    code, out, _ = run_cli(["search", "space-json", "--space", "lvbert"], capsys)
    assert code == 0
    generated = json.loads(out)
    assert generated == json.loads((REPO / "experiments" / "search_space.json").read_text())
    assert len(generated) == 24 and all(v == {"_type": "choice", "_value": TYPES} for v in generated.values())
    config = yaml.safe_load((REPO / "experiments" / "search.yml").read_text())
    assert config["searchSpaceFile"] == "search_space.json"
    assert config["tuner"]["className"] == "nni_lvbert.search.tuner.LVBertEvolutionTuner"
    args = config["tuner"]["classArgs"]
    budget = EvolutionConfig(**{k: args[k] for k in ("population", "iterations", "topk", "crossover", "mutation",
                                                      "mutation_prob")}).budget
    assert config["maxTrialNumber"] == budget == 1000
    from nni_lvbert.search.nnictl import BIND_JS_FILE, DEFAULT_CONFIG

    assert BIND_JS_FILE == REPO / "experiments" / "bind_localhost.js" and BIND_JS_FILE.is_file()
    assert DEFAULT_CONFIG == REPO / "experiments" / "search.yml"


def test_checkout_experiment_config_resolves_as_written():
    """`nnictl create --config experiments/search.yml` from a checkout: NNI resolves the config's relative paths
    against the top-level experiments/ folder, and a trial's default supernet (../runs/quickstart/supernet, relative
    to that folder, where trials run) is where `lvbert supernet train` and the quickstart write, run from the
    checkout; search.yml and iot.yml carry the slot `lvbert init-experiment --supernet` fills in."""
    import shlex

    from nni.experiment.config import ExperimentConfig

    from nni_lvbert.supernet.train import SupernetOptions

    folder = REPO / "experiments"
    config = ExperimentConfig.load(str(folder / "search.yml")).canonical_copy()
    assert Path(config.trial_code_directory) == folder and Path(config.search_space_file).is_file()
    command = shlex.split(config.trial_command)
    default = command[command.index("--supernet") + 1]
    assert default == "${LVBERT_SUPERNET:-../runs/quickstart/supernet}"
    assert (folder / "../runs/quickstart/supernet").resolve() == (REPO / SupernetOptions().out).resolve()
    from nni_lvbert.init_experiment import SUPERNET_SLOT, WITH_SUPERNET
    from nni_lvbert.pipeline import PipelineOptions

    assert (REPO / PipelineOptions().out / "supernet").resolve() == (REPO / SupernetOptions().out).resolve()
    for name in WITH_SUPERNET:
        assert SUPERNET_SLOT in (folder / name).read_text()


def test_nnictl_port_in_use_is_one_line(tiny, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, _, err = run_cli(["search", "nnictl", "--supernet", str(tiny["run"]), "--port", str(port)], capsys)
    assert code == 2 and f"port {port} is already in use" in one_error_line(err)
    code, _, err = run_cli(["search", "nnictl", "--supernet", str(tiny["root"] / "nope"), "--port",
                            str(free_port())], capsys)
    assert code == 2 and "supernet directory not found" in one_error_line(err)
    code, _, err = run_cli(["search", "nnictl", "--supernet", str(tiny["run"]), "--port", str(free_port()),
                            "--trial-gpus", "-1"], capsys)
    assert code == 2 and "--trial-gpus must be >= 0" in one_error_line(err)


def test_init_experiment_with_a_supernet_fills_the_configs_and_export_finds_it(tiny, tmp_path, capsys):
    """`init-experiment DIR --supernet RUN`: search.yml and iot.yml name RUN (absolute), search_space.json is RUN's
    own space; export's supernet comes from a trial command as written (a path, or ${LVBERT_SUPERNET:-D} resolved
    against the trial folder); a missing supernet is one line and writes nothing."""
    from nni_lvbert.init_experiment import SUPERNET_SLOT
    from nni_lvbert.search.nnictl import space_json, supernet_from_config
    from nni_lvbert.supernet.rundir import supernet_dir

    run = Path(tiny["run"]).resolve()
    code, _, err = run_cli(["init-experiment", str(tmp_path / "no"), "--supernet", str(tmp_path / "nope")], capsys)
    assert code == 2 and "supernet directory not found" in one_error_line(err) and not (tmp_path / "no").exists()
    folder = tmp_path / "my-exp"
    code, out, err = run_cli(["init-experiment", str(folder), "--supernet", str(tiny["run"]), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["supernet"] == str(run) and "LVBERT_SUPERNET" not in json.loads(out)["or_by_hand"]
    for name in ("search.yml", "iot.yml"):
        text = (folder / name).read_text()
        assert SUPERNET_SLOT not in text and f"--supernet {run}" in text
    assert json.loads((folder / "search_space.json").read_text()) == space_json(supernet_dir(run).spec)
    import yaml

    config = yaml.safe_load((folder / "search.yml").read_text())
    assert supernet_from_config(config) == str(run)
    shipped = yaml.safe_load((REPO / "experiments" / "search.yml").read_text())
    shipped["trialCodeDirectory"] = str(tmp_path / "exp")
    assert supernet_from_config(shipped) == str(tmp_path / "exp" / "../runs/quickstart/supernet")
    code, _, err = run_cli(["init-experiment", str(folder), "--supernet", str(tiny["run"])], capsys)
    assert code == 2 and "--overwrite" in one_error_line(err)


def supernet_meta_size(run) -> str:
    from nni_lvbert.supernet.rundir import load_supernet

    size = load_supernet(run).meta["size"]
    assert size != load_supernet(run).spec.size  # the fixture's space file names another size
    return size


def _non_loopback_address() -> str | None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.254", 9))  # no packet is sent; picks the outgoing interface
            ip = s.getsockname()[0]
    except OSError:
        return None
    return None if ip.startswith("127.") else ip


def start_tiny_experiment(tiny, tmp_path, capsys, port: int, iterations: int) -> str:
    """`lvbert search nnictl` on the tiny supernet: 2 + 2 * (iterations - 1) trials, 2 at a time; the experiment ID."""
    code, out, err = run_cli(["search", "nnictl", "--supernet", str(tiny["run"]), "--port", str(port),
                              "--out", str(tmp_path / "exp"), "--max-trials", str(2 + 2 * (iterations - 1)),
                              "--concurrency", "2", "--population", "2", "--iterations", str(iterations),
                              "--topk", "2", "--crossover", "1", "--mutation", "1", "--val-tokens", "2048",
                              "--trial-threads", "1", "--json"], capsys)
    assert code == 0, err
    return json.loads(out)["experiment"]


@pytest.mark.slow
def test_nnictl_end_to_end_stop_and_resume(tiny, scorer, tmp_path, capsys):
    """nni_lvbert/experiments/search.yml under nnictl (2 trials at a time, generation barriers), the web UI on
    loopback only; stopped with a trial done, `lvbert search nnictl resume ID` ends with every candidate of the
    budget scored exactly once (NNI re-runs the interrupted trials; the tuner awaits them). Then the web UI's data:
    each trial's architecture and a score equal to the in-process scorer's; `lvbert search export`; stop."""
    import urllib.request

    port = free_port()
    exp_id = start_tiny_experiment(tiny, tmp_path, capsys, port, iterations=2)
    nnictl = str(Path(sys.executable).with_name("nnictl"))
    try:
        outside = _non_loopback_address()
        if outside:  # the web UI / REST API listens on 127.0.0.1 only
            with socket.socket() as s, pytest.raises(OSError):
                s.settimeout(2)
                s.connect((outside, port))
        before = wait_for_trials(port, 1, timeout=150)
        subprocess.run([nnictl, "stop", exp_id], capture_output=True, timeout=60)
        port = free_port()
        code, _out, err = run_cli(["search", "nnictl", "resume", exp_id, "--port", str(port)], capsys)
        assert code == 0, err
        jobs = wait_for_trials(port, 4, timeout=240)
        archs = {j["trialJobId"]: json.loads(j["hyperParameters"][0])["parameters"] for j in jobs}
        assert len(jobs) == 4 and len({tuple(a.values()) for a in archs.values()}) == 4, (before, jobs)
        assert all(j["status"] == "SUCCEEDED" for j in jobs)
        assert all(set(a) == {f"layer{i:02d}" for i in range(SLOTS)} for a in archs.values())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/nni/metric-data", timeout=5) as r:
            metrics = [m for m in json.loads(r.read()) if m["type"] == "FINAL" and m["trialJobId"] in archs]
        assert len({m["trialJobId"] for m in metrics}) == 4
        # NNI 3.0 may hand a trial the parameters of another started with it (nni_compat.read_trial_db): a score
        # belongs to the parameter id it was reported for, and each parameter id is scored once
        by_id = {str(json.loads(h)["parameter_id"]): json.loads(h)["parameters"] for j in jobs
                 for h in j["hyperParameters"]}
        assert sorted(str(m["parameterId"]) for m in metrics) == sorted(by_id)
        for m in metrics:
            value = json.loads(m["data"])
            value = json.loads(value) if isinstance(value, str) else value
            # the trial's score is the in-process scorer's score of the same architecture
            assert value["default"] == pytest.approx(scorer.score(list(by_id[str(m["parameterId"])].values())),
                                                      abs=1e-6)
        code, _out, err = run_cli(["search", "export", "--experiment", exp_id, "--supernet", str(tiny["run"]),
                                  "--out", str(tmp_path / "export")], capsys)
        assert code == 0, err
        best = json.loads((tmp_path / "export" / "best_arch.json").read_text())
        assert best["score"] == pytest.approx(max(scorer.score(list(a.values())) for a in archs.values()))
        assert best["experiment"]["id"] == exp_id and len(best["arch"]) == SLOTS
        # the space block names the size the supernet was trained at, not its space file's default (issue #41)
        assert best["supernet"]["space"]["size"] == best["supernet"]["size"] == supernet_meta_size(tiny["run"])
    finally:
        subprocess.run([nnictl, "stop", exp_id], capture_output=True, timeout=60)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/nni/check-status", timeout=2)
    code, _, err = run_cli(["search", "nnictl", "resume", "nosuchid", "--port", str(free_port())], capsys)
    assert code == 2 and "unknown NNI experiment 'nosuchid'" in one_error_line(err)
    code, _, err = run_cli(["search", "nnictl", "resume", "--port", str(free_port())], capsys)
    assert code == 2 and "give the experiment to resume" in one_error_line(err)


def _by_hand(folder: Path, port: int) -> tuple[str, dict]:
    """`nnictl create --config FOLDER/search.yml --port P` as the docs write it (the venv's python first on PATH, the
    web UI on loopback); the experiment ID and the environment."""
    import os

    from nni_lvbert.nni_compat import experiment_id_in

    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               NODE_OPTIONS=f"--require {folder / 'bind_localhost.js'}")
    env.pop("LVBERT_SUPERNET", None)
    proc = subprocess.run([str(Path(sys.executable).with_name("nnictl")), "create", "--config",
                           str(folder / "search.yml"), "--port", str(port)], env=env, capture_output=True, text=True,
                          timeout=120)
    exp_id = experiment_id_in(re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr))
    assert proc.returncode == 0 and exp_id, proc.stdout + proc.stderr
    return exp_id, env


def _small_budget(folder: Path, trials: int) -> None:
    """The copied search.yml with a budget of `trials` candidates scored on few tokens (the supernet untouched)."""
    import yaml

    config = yaml.safe_load((folder / "search.yml").read_text())
    config["maxTrialNumber"] = trials
    config["tuner"]["classArgs"].update(population=trials, iterations=1, topk=1)
    config["trialCommand"] += " --val-tokens 2048 --threads 1"
    (folder / "search.yml").write_text(yaml.safe_dump(config, sort_keys=False))


def _status(port: int) -> dict:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/nni/check-status", timeout=5) as r:
        return json.loads(r.read())


@pytest.mark.slow
def test_nnictl_by_hand_init_experiment_create_export_and_a_loud_failure(tiny, tmp_path, capsys):
    """docs/guide/search.md by hand: `lvbert init-experiment my-exp --supernet RUN`, plain `nnictl create --config
    my-exp/search.yml`, two trials, `lvbert search export --experiment ID` without --supernet. Then a copy without a
    supernet (nothing at ../runs/quickstart/supernet): the first trial fails and the experiment ends ERROR (not
    DONE), the trial's error in the tuner's log and in export's message."""
    import time

    from nni_lvbert.nni_compat import experiment_dir

    nnictl = str(Path(sys.executable).with_name("nnictl"))
    folder = tmp_path / "my-exp"
    code, _out, err = run_cli(["init-experiment", str(folder), "--supernet", str(tiny["run"]), "--json"], capsys)
    assert code == 0, err
    _small_budget(folder, 2)
    port = free_port()
    exp_id, _ = _by_hand(folder, port)
    try:
        jobs = wait_for_trials(port, 2, timeout=240)
        assert [j["status"] for j in jobs] == ["SUCCEEDED"] * 2, jobs
        code, _out, err = run_cli(["search", "export", "--experiment", exp_id, "--out", str(tmp_path / "export"),
                                  "--json"], capsys)
        assert code == 0, err
        best = json.loads((tmp_path / "export" / "best_arch.json").read_text())
        assert best["supernet"]["run_dir"] == str(Path(tiny["run"]).resolve()) and len(best["arch"]) == SLOTS
    finally:
        subprocess.run([nnictl, "stop", exp_id], capture_output=True, timeout=60)

    lost = tmp_path / "elsewhere" / "my-exp"  # no ../runs/quickstart/supernet next to it, no $LVBERT_SUPERNET
    code, _, err = run_cli(["init-experiment", str(lost)], capsys)
    assert code == 0, err
    _small_budget(lost, 2)
    port = free_port()
    exp_id, _ = _by_hand(lost, port)
    try:
        deadline = time.time() + 180
        while _status(port)["status"] not in ("ERROR", "DONE", "STOPPED") and time.time() < deadline:
            time.sleep(1)
        status = _status(port)
        assert status["status"] == "ERROR", status
        jobs = wait_for_trials(port, 1, timeout=10)
        assert len(jobs) == 1 and jobs[0]["status"] == "FAILED"  # the experiment stopped at the first failure
        log = (experiment_dir(exp_id) / "log" / "dispatcher.log").read_text()
        assert "a trial failed before any trial reported a score" in log and "supernet directory not found" in log
        code, _, err = run_cli(["search", "export", "--experiment", exp_id], capsys)
        assert code == 2 and "no finished trial" in one_error_line(err)
        assert "supernet directory not found" in one_error_line(err)
    finally:
        subprocess.run([nnictl, "stop", exp_id], capture_output=True, timeout=60)
