import os
import socket
import time
import warnings
from pathlib import Path

XDIST_WORKER = bool(os.environ.get("PYTEST_XDIST_WORKER"))
if XDIST_WORKER:
    # Under pytest-xdist (scripts/test.sh runs two workers on CI's two cores) every worker, and every process its
    # tests start, uses one thread: two processes with two threads each on two cores slow each other 10-40x.
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

import numpy as np
import pytest
import torch

if XDIST_WORKER:
    torch.set_num_threads(1)

from nni_lvbert.config import ModelConfig, SpaceSpec

# the suite's order under pytest-xdist and its once-per-session directories (pytest finds the hooks here)
from tests.suite import built_once, pytest_collection_modifyitems, pytest_configure  # noqa: F401

warnings.filterwarnings("ignore", message=".*is found to be not a nn.Module.*")


def tiny_config(**kw) -> ModelConfig:
    """HF-test-sized config: hidden 32, 4 heads (2 DC heads of 16), vocab 100."""
    base = {"vocab_size": 100, "hidden_size": 32, "embedding_size": 32, "ff_size": 64, "num_heads": 4,
            "conv_head_size": 16, "max_length": 32, "max_position": 64, "dropout": 0.0, "attention_dropout": 0.0}
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
    return kill9_when(args, checkpoint_step_in(ckpt, first, last), timeout, watch=ckpt)


def sigint_mid_training(args: list[str], ckpt, first: int, last: int, timeout: float = 240):
    """As `kill9_mid_training` with a Ctrl-C (`sigint_when`): (the step seen, exit status, stderr)."""
    return sigint_when(args, checkpoint_step_in(ckpt, first, last), timeout, watch=ckpt)


def checkpoint_step_in(ckpt, first: int, last: int):
    """A condition: the global step checkpoint `ckpt` holds when in [first, last), else None."""
    from pathlib import Path

    def step_in_range():
        if not Path(ckpt).exists():
            return None
        try:
            step = torch.load(ckpt, map_location="cpu", weights_only=False)["global_step"]
        except Exception:  # noqa: BLE001 (a checkpoint being replaced right now: any read error means "not yet")
            return None
        return step if first <= step < last else None

    return step_in_range


def kill9_when(args: list[str], condition, timeout: float = 240, watch=None):
    """Run `python -m nni_lvbert.cli ARGS` in its own process group and SIGKILL it as soon as `condition()` returns
    something other than None; that value (None: the command finished first). With `watch` (a file the command
    rewrites or appends to), `condition()` runs at each change of that file with the process group stopped
    (SIGSTOP), so a fast run cannot slip through its window between two looks; without, every 50 ms."""
    import signal

    value, rc, tail, timed_out = signal_when(args, condition, signal.SIGKILL, timeout, watch)
    if value is None and (timed_out or rc != 0):  # not "finished before it could be killed"
        what = f"ran past {timeout} s" if timed_out else f"failed (exit {rc})"
        raise AssertionError(f"the command {what} before it could be killed; its stderr ends:\n{tail}")
    return value


def sigint_when(args: list[str], condition, timeout: float = 240, watch=None):
    """As `kill9_when`, but a Ctrl-C: SIGINT to the command's process (as `timeout -s INT` sends it), then wait for
    it to end. Returns (condition's value or None, exit status, stderr)."""
    import signal

    value, rc, err, timed_out = signal_when(args, condition, signal.SIGINT, timeout, watch, whole_err=True)
    assert not timed_out, f"the command ran past {timeout} s; its stderr ends:\n{err[-3000:]}"
    return value, rc, err


def signal_when(args: list[str], condition, sig, timeout: float = 240, watch=None, whole_err: bool = False):
    """Run the CLI with ARGS, send `sig` when `condition()` is not None (see kill9_when); returns (that value,
    exit status, stderr (its last 3,000 characters unless whole_err), whether it timed out)."""
    import os
    import signal
    import subprocess
    import sys
    import tempfile
    import time
    from pathlib import Path

    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.pop("PYTEST_CURRENT_TEST", None)
    err = tempfile.TemporaryFile()  # noqa: SIM115 (the caller reads and closes it with the process)
    proc = subprocess.Popen([sys.executable, "-m", "nni_lvbert.cli", *args], cwd=Path(__file__).resolve().parent.parent,
                            env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)

    def signature():
        try:
            st = os.stat(watch)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def send():
        if sig == signal.SIGKILL:
            os.killpg(proc.pid, sig)
        else:  # to the command only (its process group may be stopped: continue it after)
            os.kill(proc.pid, sig)
            os.killpg(proc.pid, signal.SIGCONT)

    sent, deadline, seen = None, time.time() + timeout, None
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
            send()
            sent = value
            break
        time.sleep(0.05 if watch is None else 0.005)
    if sent is not None and sig != signal.SIGKILL:
        try:
            proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            pass
    timed_out = proc.poll() is None and (sent is None or sig != signal.SIGKILL)  # a SIGINT must end it too
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    err.seek(0)
    text = err.read().decode(errors="replace")
    err.close()
    return sent, proc.returncode, text if whole_err else text[-3000:], timed_out


# --- the tiny shared fixtures (HF model-tester style): data, a supernet, a model directory ---------------------------
SLOTS = 6


def tiny_spec(name: str = "tiny6", slots: int = SLOTS, candidates=("dc", "sa", "ff", "glu")) -> SpaceSpec:
    return SpaceSpec(name=name, slots=slots, candidates=list(candidates), size="tiny")


def prepare_tiny_data(root: Path):
    from nni_lvbert.data import prepare

    corpus = root / "corpus.txt"
    if not corpus.exists():
        corpus.write_text("\n\n".join(wiki_texts(160)) + "\n", encoding="utf-8")
    return prepare([str(corpus)], "tiny", vocab_size=500, max_length=32, val_fraction=0.1,
                   cache_dir=root / "cache")


def build_tiny_supernet(run_dir: Path, data, spec: SpaceSpec | None = None, steps: int = 40, seed: int = 0,
                        size: str = "tiny-test", **cfg_overrides) -> Path:
    """Write a supernet run directory (weights, space, config, tokenizer, meta.json) for `spec`."""
    from nni_lvbert.data.masking import mlm_collator
    from nni_lvbert.rundir import RunDir
    from nni_lvbert.space import LVBertSpace
    from nni_lvbert.supernet.rundir import WEIGHTS
    from nni_lvbert.supernet.strategy import SeededRandomOneShot

    spec = spec or tiny_spec()
    start = time.perf_counter()
    torch.manual_seed(seed)
    cfg = tiny_config(vocab_size=data.vocab_size, **cfg_overrides)
    space = LVBertSpace(spec, cfg)
    SeededRandomOneShot().mutate_model(space)
    if steps:
        tok = data.tokenizer()
        train = data.train_dataset()[:]
        collate = mlm_collator(tok, 0.15, seed=seed)
        opt = torch.optim.Adam(space.parameters(), lr=3e-3)
        rng = np.random.default_rng(seed)
        space.train()
        for step in range(steps):
            idx = rng.choice(len(train["input_ids"]), size=16, replace=False)
            rows = [{"input_ids": train["input_ids"][i], "token_type_ids": train["token_type_ids"][i]} for i in idx]
            batch = collate(rows)
            for i, layer in enumerate(space.layers):
                layer.resample(memo={layer.label: spec.candidates[int(rng.integers(len(spec.candidates)))]})
            out = space(batch["input_ids"], batch.get("attention_mask"), batch["token_type_ids"], batch["labels"])
            opt.zero_grad()
            out.loss.backward()
            opt.step()
        space.eval()
    run = RunDir(run_dir, "supernet")
    run.path.mkdir(parents=True, exist_ok=True)
    run.save_static(spec, cfg, data.tokenizer_dir)
    run.save_weights(space, WEIGHTS)
    run.write_json("meta.json", {
        "run_dir": str(run_dir), "space": spec.to_dict(), "size": size, "seed": seed, "steps": steps,
        "data": {"path": str(data.path)}, "final_val_mlm_acc": None,
        "train_seconds": time.perf_counter() - start, "device_type": "cpu", "cpu_threads": torch.get_num_threads(),
    })
    return run_dir


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """The tiny prepared data (vocab ~500, 32 tokens) of the embedded corpus' first 160 documents."""
    return prepare_tiny_data(built_once(tmp_path_factory, "data", prepare_tiny_data))


@pytest.fixture(scope="session")
def study_supernet(tmp_path_factory, tiny_data):
    """Prepared data and a 6-slot supernet trained 300 SPOS steps (long enough that candidates score differently),
    for the studies' tests."""
    root = built_once(tmp_path_factory, "study", lambda d: build_tiny_supernet(d / "supernet", tiny_data, steps=300))
    return {"root": root, "data": tiny_data, "run": root / "supernet"}


def _build_tiny(root: Path, data) -> None:
    build_tiny_supernet(root / "supernet", data, steps=30)
    build_tiny_supernet(root / "other", data, spec=tiny_spec("tiny4", 4, ("dc", "ff")), steps=0)
    (root / "tiny6.yaml").write_text("name: tiny6\nslots: 6\ncandidates: [dc, sa, ff, glu]\nsize: tiny\n")


@pytest.fixture(scope="session")
def tiny(tmp_path_factory, tiny_data):
    """Prepared data (vocab ~500, 32 tokens) and two supernet runs: `run` (6 slots of dc/sa/ff/glu, 30 SPOS steps)
    and `other` (4 slots of dc/ff, untrained). Shared by every test file of the session: copy before changing them."""
    root = built_once(tmp_path_factory, "tiny", lambda d: _build_tiny(d, tiny_data))
    return {"root": root, "data": tiny_data, "run": root / "supernet", "other": root / "other",
            "space_file": root / "tiny6.yaml", "tokenizer": tiny_data.tokenizer_dir}


@pytest.fixture(scope="module")
def scorer(tiny):
    from nni_lvbert.search.scorer import SupernetScorer

    return SupernetScorer(tiny["run"], val_tokens=2048, batch_size=32)


def tiny_model_dir(root: Path, data=None) -> Path:
    """A tiny LV-BERT model directory (4 slots dc/sa/ff/glu, hidden 32) with the tiny prepared data's tokenizer
    (`data`'s, else prepared under ROOT)."""
    from nni_lvbert.hf import LVBertForMaskedLM
    from nni_lvbert.hf.convert import hf_config
    from nni_lvbert.hf.save import save_hf_model

    out = root / "model"
    if not out.exists():
        data = data or prepare_tiny_data(root)
        torch.manual_seed(0)
        cfg = tiny_config(vocab_size=data.vocab_size)
        save_hf_model(LVBertForMaskedLM(hf_config(cfg, ["dc", "sa", "ff", "glu"])), tokenizer_dir=data.tokenizer_dir,
                      out_dir=out)
    return out


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory, tiny_data):
    """An exported model directory (what `lvbert export` / `lvbert pretrain` write); copy before changing it."""
    return built_once(tmp_path_factory, "model", lambda d: tiny_model_dir(d, tiny_data)) / "model"


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """An empty data cache per test file (its tests reuse what they prepared)."""
    return tmp_path_factory.mktemp("cache")


# --- the command line ---------------------------------------------------------------------------------------------
def run_cli(argv, capsys):
    """`lvbert ARGV` in process: (exit code, stdout, stderr)."""
    from nni_lvbert.cli import main

    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str, *needles: str, alone: bool = True) -> str:
    """The one `error:` line of a command's stderr, with every needle in it and no traceback; `alone`: nothing else
    on stderr (False: notes and warnings may stand beside it)."""
    lines = [x for x in err.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert not alone or len(lines) == 1, err
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def one_error(capsys, rc: int, *needles: str, alone: bool = False) -> str:
    """Exit 2 and `one_error_line` of what the command wrote to stderr."""
    err = capsys.readouterr().err
    assert rc == 2, err
    return one_error_line(err, *needles, alone=alone)
