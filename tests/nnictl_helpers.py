"""Test (and benchmark) helper for nnictl experiments: wait for trials through NNI's REST API."""
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
