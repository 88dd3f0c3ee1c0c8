"""How the suite runs under pytest-xdist (scripts/test.sh: -n 2 --dist loadfile): the order test files are handed
to the workers, and directories built once per pytest session for both workers. tests/conftest.py imports these."""
import fcntl
import os
import shutil
from pathlib import Path

import pytest

XDIST_WORKER = bool(os.environ.get("PYTEST_XDIST_WORKER"))

# The costliest files first, then the rest in collection order, so that the last file a worker takes is a short one
# (xdist's default puts files with many tests first, which left the few-but-slow nnictl, multi-node and wheel
# files for the end: one worker ran them while the other had nothing left). Roughly by wall time on 2 cores; the
# files that start nnictl experiments apart, so that the two workers seldom run two experiments at once.
SLOW_FIRST = ["test_multinode.py", "test_tuner_registry.py", "test_docs.py", "test_search_nnictl.py",
              "test_standalone_nnictl.py",
              "test_pipeline.py", "test_supernet.py", "test_supernet_nnictl.py", "test_graph_export.py",
              "test_pretrain.py", "test_wheel.py", "test_standalone_remote.py", "test_study.py", "test_iot.py",
              "test_ranking.py", "test_finetune.py", "test_python_api.py", "test_corrupt.py", "test_tuner_resume.py",
              "test_data.py"]


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: hand out files in collection order (below)
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before --ff/--nf (cacheprovider), which may reorder after this
def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order is kept


def built_once(tmp_path_factory, name: str, build) -> Path:
    """The directory NAME, made by `build(directory)` once per pytest session: under pytest-xdist the first worker
    that needs it builds it while the other waits on a file lock, then both read it (a worker's basetemp is
    <session's basetemp>/gwN). Read-only for tests: copy before changing anything in it."""
    base = tmp_path_factory.getbasetemp()
    base = base.parent if XDIST_WORKER else base
    root, done = base / f"shared-{name}", base / f"shared-{name}.built"
    with open(base / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            build(root)
            done.touch()
    return root
