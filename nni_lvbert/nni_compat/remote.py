"""NNI 3.0's `remote` training service (SSH machines; nni_node/training_service/remote_v3, used when `reuseMode` is
false, NNI 3.0's default): what its worker start does on each machine and what it may leave there. Used by
tests/test_standalone_remote.py, which runs it against a private sshd on 127.0.0.1; docs/guide/studies.md
("Remote machines over SSH") says the same to users."""
from __future__ import annotations

from pathlib import Path

# --- `pip install nni --upgrade` on every machine ----------------------------------------------------------------
# NNI 3.0's remote worker (remote_v3/worker.js, Worker.start) runs `PYTHON -m pip install nni --upgrade` over SSH on
# each machine at every experiment start, in the environment `pythonPath` names, and fails the machine when pip
# fails. With an index reachable it may upgrade nni in the project's venv; without one pip retries before it says
# "already satisfied". The remote side's environment with REMOTE_WORKER_ENV (the test's sshd sets it with `SetEnv`;
# a user can put it in the SSH user's environment, e.g. sshd's `SetEnv` or `PermitUserEnvironment`) keeps pip off
# any index: the installed nni satisfies `nni`, nothing changes.
# Drop when: the remote worker no longer installs nni (worker.js has no `pip install`), or the project pins an nni
# that pip would not move (then the upgrade is a no-op everywhere).
REMOTE_WORKER_ENV = {"PIP_NO_INDEX": "1"}


# --- The trial keeper daemon left on a machine -------------------------------------------------------------------
# The worker launches a detached node "trial keeper" per machine (nni.tools.nni_manager_scripts.launch_trial_keeper:
# `os.setpgrp`, its pid in ~/nni-experiments/EXP/environments/ENV/trial_keeper*/trial_keeper.pid, `~` the SSH
# user's HOME, not configurable). `nnictl stop` asks it to shut down over its channel; when the manager goes first
# (a killed nnictl, a test's timeout) it stays. These are the process-group ids to end (os.killpg) once the
# experiment is stopped.
# Drop when: NNI's trial keeper exits on its own when its manager channel is gone for good.
def remote_trial_keeper_pids(home: Path) -> list[int]:
    """Pids of the trial keepers NNI launched under `home` (an SSH user's HOME) that still run."""
    import os

    pids = []
    for pid_file in Path(home).glob("nni-experiments/*/environments/*/trial_keeper*/trial_keeper.pid"):
        try:
            pid = int(pid_file.read_text().strip())
            os.kill(pid, 0)
        except (OSError, ValueError):
            continue
        pids.append(pid)
    return pids
