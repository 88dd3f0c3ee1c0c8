"""Test (and benchmark) helpers for nnictl experiments: create and stop one, wait for its trials and read its metrics
through NNI's REST API."""
from __future__ import annotations

import json
import time


def wait_for_trials(port: int, n: int, timeout: float, host: str = "127.0.0.1") -> list[dict]:
    """Poll the REST API until `n` trials ended; every trial job seen."""
    import urllib.request

    deadline = time.time() + timeout
    jobs: list[dict] = []
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/api/v1/nni/trial-jobs", timeout=5) as r:
                jobs = json.loads(r.read())
        except OSError:
            jobs = []
        done = [j for j in jobs if j.get("status") in ("SUCCEEDED", "FAILED", "USER_CANCELED", "SYS_CANCELED")]
        if len(done) >= n:
            return jobs
        time.sleep(1.0)
    raise TimeoutError(f"{len(jobs)} trials seen, fewer than {n} ended within {timeout:.0f} s")


def metric_data(port: int, host: str = "127.0.0.1") -> list[dict]:
    """Every metric record NNI holds (intermediate: type PERIODICAL, final: FINAL)."""
    import urllib.request

    with urllib.request.urlopen(f"http://{host}:{port}/api/v1/nni/metric-data", timeout=5) as r:
        return json.loads(r.read())


def metric_value(m: dict):
    """A metric record's reported value (NNI stores it JSON-encoded, a dict metric twice)."""
    data = json.loads(m["data"])
    return json.loads(data) if isinstance(data, str) else data


def create_experiment(config, bind_js, port: int) -> str:
    """`nnictl create --config CONFIG --port PORT` with the venv's python on PATH, one thread per trial and the web UI
    on 127.0.0.1 (BIND_JS: the experiment folder's bind_localhost.js); the experiment ID it printed."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    from nni_lvbert.search.nnictl import _nnictl

    env = dict(os.environ, OMP_NUM_THREADS="1", NNI_BIND_HOST="127.0.0.1", NODE_OPTIONS=f"--require {bind_js}",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    out = subprocess.run([_nnictl(), "create", "--config", str(config), "--port", str(port)], env=env,
                         capture_output=True, text=True, timeout=120)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)
    match = re.search(r"Experiment ID:\s*(\w+)", text) or re.search(r"experiment id is\s+(\w+)", text)
    assert out.returncode == 0 and match, text[-2000:]
    return match.group(1)


def stop_experiment(exp_id: str) -> None:
    import subprocess

    from nni_lvbert.search.nnictl import _nnictl

    subprocess.run([_nnictl(), "stop", exp_id], capture_output=True, timeout=120)
