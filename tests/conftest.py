import os
import socket
import warnings

XDIST_WORKER = bool(os.environ.get("PYTEST_XDIST_WORKER"))
if XDIST_WORKER:
    # Under pytest-xdist (scripts/test.sh runs two workers on CI's two cores) every worker, and every process its
    # tests start, uses one thread: two processes with two threads each on two cores slow each other 10-40x.
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

if XDIST_WORKER:
    torch.set_num_threads(1)

from nni_lvbert.config import ModelConfig

warnings.filterwarnings("ignore", message=".*is found to be not a nn.Module.*")


def tiny_config(**kw) -> ModelConfig:
    """HF-test-sized config: hidden 32, 4 heads (2 DC heads of 16), vocab 100."""
    base = dict(vocab_size=100, hidden_size=32, embedding_size=32, ff_size=64, num_heads=4, conv_head_size=16,
                max_length=32, max_position=64, dropout=0.0, attention_dropout=0.0)
    base.update(kw)
    return ModelConfig(**base)


@pytest.fixture
def cfg():
    return tiny_config()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for tiny models: on 2 shared cores, spinning thread pools make them several times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wiki_texts(n):
    """The first n Wikipedia documents of the embedded corpus (small real-text corpora for tests)."""
    import json
    import lzma

    from nni_lvbert.data.corpus import EMBEDDED_DIR

    out = []
    with lzma.open(EMBEDDED_DIR / "wikipedia_vital_en.jsonl.xz", "rt", encoding="utf-8") as f:
        for line in f:
            out.append(json.loads(line)["text"])
            if len(out) == n:
                return out
    return out


def kill9_mid_training(args: list[str], ckpt, first: int, last: int, timeout: float = 240) -> int | None:
    """Run `python -m nni_lvbert.cli ARGS` in its own process group and SIGKILL it as soon as checkpoint `ckpt`
    holds a global step in [first, last); the step it was killed at (None: it finished first)."""
    from pathlib import Path

    def step_in_range():
        if not Path(ckpt).exists():
            return None
        try:
            step = torch.load(ckpt, map_location="cpu", weights_only=False)["global_step"]
        except Exception:  # being replaced right now
            return None
        return step if first <= step < last else None

    return kill9_when(args, step_in_range, timeout, watch=ckpt)


def kill9_when(args: list[str], condition, timeout: float = 240, watch=None):
    """Run `python -m nni_lvbert.cli ARGS` in its own process group and SIGKILL it as soon as `condition()` returns
    something other than None; that value (None: the command finished first). With `watch` (a file the command
    rewrites or appends to), `condition()` runs at each change of that file with the process group stopped
    (SIGSTOP), so a fast run cannot slip through its window between two looks; without, every 50 ms."""
    import os
    import signal
    import subprocess
    import sys
    import tempfile
    import time
    from pathlib import Path

    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.pop("PYTEST_CURRENT_TEST", None)
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "nni_lvbert.cli", *args], cwd=Path(__file__).resolve().parent.parent,
                            env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)

    def signature():
        try:
            st = os.stat(watch)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    killed_at, deadline, seen = None, time.time() + timeout, None
    while time.time() < deadline and proc.poll() is None:
        if watch is None:
            value = condition()
        elif (now := signature()) is not None and now != seen:
            try:
                os.killpg(proc.pid, signal.SIGSTOP)
            except ProcessLookupError:  # ended meanwhile
                break
            seen, value = signature(), condition()
            if value is None:
                os.killpg(proc.pid, signal.SIGCONT)
        else:
            value = None
        if value is not None:
            os.killpg(proc.pid, signal.SIGKILL)
            killed_at = value
            break
        time.sleep(0.05 if watch is None else 0.005)
    timed_out = killed_at is None and proc.poll() is None
    if timed_out:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    err.seek(0)
    tail = err.read().decode(errors="replace")[-3000:]
    err.close()
    if killed_at is None and (timed_out or proc.returncode != 0):  # not "finished before it could be killed"
        what = f"ran past {timeout} s" if timed_out else f"failed (exit {proc.returncode})"
        raise AssertionError(f"the command {what} before it could be killed; its stderr ends:\n{tail}")
    return killed_at
