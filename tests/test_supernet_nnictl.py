"""supernet.yml under nnictl: the trial trains a supernet and the web UI gets intermediate + final validation MLM
accuracy. The experiment folder is the copy `lvbert init-experiment` makes of the repository's experiments/;
only the trial command's scale is shrunk, everything else (relative paths included) is the file as shipped."""
import json
import os
import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from nni_lvbert.init_experiment import init_experiment
from nni_lvbert.resources import EXPERIMENTS_DIR
from nni_lvbert.search.nnictl import _nnictl
from tests.conftest import free_port
from tests.nnictl_helpers import wait_for_trials

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "experiments"  # top-level in the repository (nni_lvbert/experiments/ in the wheel)


@pytest.mark.slow
def test_supernet_yml_reports_intermediate_and_final_results(tmp_path):
    assert EXPERIMENTS_DIR == SHIPPED
    exp = tmp_path / "my-exp"
    init_experiment(exp)
    shipped = yaml.safe_load((exp / "supernet.yml").read_text())
    assert shipped == yaml.safe_load((SHIPPED / "supernet.yml").read_text())
    cmd = shlex.split(shipped["trialCommand"])
    assert cmd[:5] == ["python", "-m", "nni_lvbert.cli", "supernet", "train"]
    run_dir = cmd[cmd.index("--out") + 1]  # relative to the experiment folder, where trials run
    assert run_dir == "../runs/nnictl-supernet/$NNI_TRIAL_JOB_ID"
    tiny = ["--max-steps", "6", "--val-every", "3", "--val-batches", "2", "--batch-size", "8", "--max-docs", "120",
            "--cache-dir", str(tmp_path / "cache"), "--out", run_dir]
    config = dict(shipped, trialCommand=" ".join(cmd[:5] + ["--size", "tiny", "--no-progress"] + tiny),
                  experimentWorkingDirectory=str(tmp_path / "nni"))
    (exp / "supernet.yml").write_text(yaml.safe_dump(config))
    # as documented: run from the activated venv, so the trial's `python` is the venv's
    env = dict(os.environ, NODE_OPTIONS=f"--require {exp / 'bind_localhost.js'}", NNI_BIND_HOST="127.0.0.1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    port = free_port()
    out = subprocess.run([_nnictl(), "create", "--config", str(exp / "supernet.yml"), "--port", str(port)],
                         env=env, capture_output=True, text=True, timeout=120)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)
    match = re.search(r"Experiment ID:\s*(\w+)", text) or re.search(r"experiment id is\s+(\w+)", text)
    assert out.returncode == 0 and match, text[-2000:]
    try:
        jobs = wait_for_trials(port, 1, timeout=240)
        assert [j["status"] for j in jobs] == ["SUCCEEDED"], jobs
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/nni/metric-data", timeout=5) as r:
            metrics = json.loads(r.read())
        kinds = [m["type"] for m in metrics]
        assert kinds.count("PERIODICAL") == 2 and kinds.count("FINAL") == 1, kinds
        values = [float(json.loads(json.loads(m["data"]))) if isinstance(json.loads(m["data"]), str)
                  else float(json.loads(m["data"])) for m in metrics]
        assert all(0.0 <= v <= 1.0 for v in values)
        trial_dir = tmp_path / "runs" / "nnictl-supernet" / jobs[0]["trialJobId"]  # next to my-exp/
        meta = json.loads((trial_dir / "meta.json").read_text())
        assert meta["steps"] == 6 and meta["options"]["lr"] == 0.002  # the tuner's parameter reached the trial
    finally:
        subprocess.run([_nnictl(), "stop", match.group(1)], capture_output=True, timeout=120)
