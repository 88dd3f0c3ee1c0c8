"""The Algorithm-1 tuner registered the NNI way (experiments/tuner_meta.yml): `nnictl algo register --meta`, `nnictl
algo list` shows it, a config saying `tuner: {name: LVBertEvolution}` runs the same trials as the shipped
`className` config, `nnictl algo unregister` removes it. NNI's registry lives in $NNI_CONFIG_DIR here (a temp
folder), so the test leaves the user's NNI installation as it was. Slow: two real nnictl experiments."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nni_lvbert.resources import REGISTERED_TUNER, SEARCH_CONFIG, TUNER_META
from tests.conftest import free_port, run_cli
from tests.nnictl_helpers import create_experiment, stop_experiment, wait_for_trials

NNICTL = str(Path(sys.executable).with_name("nnictl"))
TRIALS = 2  # the size of tests/test_search_nnictl.py's by-hand experiment


def nnictl(*args: str) -> str:
    out = subprocess.run([NNICTL, *args], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"))
    assert out.returncode == 0, out.stdout + out.stderr
    return re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)


def test_the_meta_file_names_the_shipped_tuner():
    meta = yaml.safe_load(TUNER_META.read_text())
    shipped = yaml.safe_load(SEARCH_CONFIG.read_text())["tuner"]
    assert meta == {"algoType": "tuner", "builtinName": REGISTERED_TUNER, "className": shipped["className"]}


def trial_parameters(configs: list[Path]) -> list[list[dict]]:
    """Per config, the parameters of its experiment's trials in the order the tuner sent them. The experiments run
    side by side (one trial at a time each) and are stopped."""
    ports = [free_port() for _ in configs]
    started = []
    try:
        for config, port in zip(configs, ports):
            started.append(create_experiment(config, config.parent / "bind_localhost.js", port))
        out = []
        for port in ports:
            jobs = wait_for_trials(port, TRIALS, timeout=240)
            assert [j["status"] for j in jobs] == ["SUCCEEDED"] * TRIALS, jobs
            sent = [json.loads(h) for j in jobs for h in j["hyperParameters"]]
            out.append([p["parameters"] for p in sorted(sent, key=lambda p: p["parameter_id"])])
        return out
    finally:
        for exp_id in started:
            stop_experiment(exp_id)


@pytest.mark.slow
def test_registered_tuner_runs_the_same_trials_as_the_classname_config(tiny, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NNI_CONFIG_DIR", str(tmp_path / "nni-config"))  # NNI's registry, for nnictl and the dispatcher
    folder = tmp_path / "my-exp"
    code, _, err = run_cli(["init-experiment", str(folder), "--supernet", str(tiny["run"])], capsys)
    assert code == 0, err
    assert REGISTERED_TUNER not in nnictl("algo", "list")
    assert f"{REGISTERED_TUNER} registered" in nnictl("algo", "register", "--meta", str(folder / TUNER_META.name))
    listed = [line for line in nnictl("algo", "list").splitlines() if REGISTERED_TUNER in line]
    assert len(listed) == 1 and "| user " in listed[0] and "LVBertEvolutionTuner" in listed[0]

    config = yaml.safe_load((folder / "search.yml").read_text())
    config["maxTrialNumber"] = TRIALS
    config["tuner"]["classArgs"].update(population=TRIALS, iterations=1, topk=1)
    config["trialCommand"] += " --val-tokens 2048 --threads 1"
    by_class = folder / "by-class.yml"
    by_class.write_text(yaml.safe_dump(config, sort_keys=False))
    config["tuner"] = {"name": REGISTERED_TUNER, "classArgs": config["tuner"]["classArgs"]}
    by_name = folder / "by-name.yml"
    by_name.write_text(yaml.safe_dump(config, sort_keys=False))

    by_name_trials, by_class_trials = trial_parameters([by_name, by_class])
    assert by_name_trials == by_class_trials
    assert len({tuple(p.values()) for p in by_name_trials}) == TRIALS

    assert f"{REGISTERED_TUNER} unregistered" in nnictl("algo", "unregister", REGISTERED_TUNER)
    assert REGISTERED_TUNER not in nnictl("algo", "list")
