"""The model store: one stand-alone pre-training per (arch, objective, shape, budget, data, seed), trained once and
reused across studies, searches (`search/rerank.py`) and processes, each model under its own lock; `one_process_each`
splits any list of locked work items between the processes that run it. Its models' validation metrics:
`scoring.py`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ..atomic import write_json
from ..config import size_names
from ..errors import UserError
from ..rundir import OPTIONS, RunDir
from ..shape import ModelShape


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Budget:
    """One stand-alone training budget: every compared model gets the same steps, batch and schedule."""

    steps: int
    lr: float
    warmup_steps: int
    batch_size: int
    dropout: float = 0.0

    def shortened(self, steps: int) -> Budget:
        """The same schedule cut to `steps` (short:N, --rerank): warm-up at most a tenth of it."""
        return dataclasses.replace(self, steps=steps, warmup_steps=min(self.warmup_steps, steps // 10))

    def options(self) -> dict:
        """As study options (the flags): steps is --max-steps."""
        values = dataclasses.asdict(self)
        return {"max_steps": values.pop("steps"), **values}

    @staticmethod
    def from_options(opts) -> dict:
        """The budget fields a study's options give (None: the preset's)."""
        return {"steps": opts.max_steps, **{k: getattr(opts, k) for k in ("lr", "warmup_steps", "batch_size",
                                                                          "dropout")}}

    def check(self) -> None:
        for name, flag in (("steps", "--max-steps"), ("batch_size", "--batch-size")):
            if getattr(self, name) < 1:
                raise UserError(f"{flag} must be at least 1, got {getattr(self, name)}")
        if self.lr <= 0 or self.warmup_steps < 0 or not 0 <= self.dropout < 1:
            raise UserError("--lr must be positive, --warmup-steps not negative and --dropout in [0, 1)")


_MISSING = object()
_SHAPE_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ModelShape)}


@dataclass(frozen=True)
class Standalone:
    """What a stand-alone pre-training is a function of (its store key)."""

    arch: str  # compact letters
    objective: str
    size: str  # the training preset's size name (tiny, small, ...)
    model_config: dict  # the shape (a ModelConfig dict)
    budget: Budget
    data: str  # prepared data directory
    seed: int
    data_seed: int

    def key(self) -> str:
        # the shape without its default-valued fields: a field added to ModelShape later (with a default) does
        # not re-key the models already in a store
        shape = {k: v for k, v in self.model_config.items() if _SHAPE_DEFAULTS.get(k, _MISSING) != v}
        blob = json.dumps({**dataclasses.asdict(self), "model_config": shape, "data": str(Path(self.data).resolve())},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]

    def dirname(self) -> str:
        return f"{self.arch}-{self.objective}-seed{self.seed}-{self.key()}"


def train_standalone(spec: Standalone, store: Path, progress: bool = True) -> Path:
    """Pre-train `spec` from scratch into the store (skipped when finished, resumed when interrupted; while another
    process trains it, waits for that)."""
    if not _finished(store, spec):
        store.mkdir(parents=True, exist_ok=True)
        with store_lock(_lock(store, spec)):  # another study sharing the store may be training it
            _train_unless_done(spec, store, progress)
    return store / spec.dirname()


def train_all(specs: list[tuple[str, Standalone]], store: Path, progress: bool = True) -> list[Path]:
    """Pre-train every (description, spec) into the store, each once, sharing the work with any other process that
    trains the same specs into the same store (see `one_process_each`)."""
    store.mkdir(parents=True, exist_ok=True)

    def work(item):
        i, (what, spec) = item
        log(f"[{i + 1}/{len(specs)}] {what}")
        _train_unless_done(spec, store, progress)

    one_process_each(list(enumerate(specs)), lambda item: _lock(store, item[1][1]), work,
                     skip=lambda item: _finished(store, item[1][1]))
    return [store / spec.dirname() for _, spec in specs]


def one_process_each(items: list, lock_of, work, skip=lambda item: False) -> None:
    """work(item) for every item not skipped, each under its lock (`lock_of(item)`, a file path). An item whose lock
    another process holds is left for later and the next one is worked on meanwhile, so the same study started in
    two processes (one per core or GPU) splits the items between them instead of queueing; when every item left
    is held elsewhere, this waits for the first and re-checks it (`work` must skip what is finished)."""
    pending = [item for item in items if not skip(item)]
    while pending:
        deferred = []
        for item in pending:
            with store_lock(lock_of(item), wait=False) as held:
                if held:
                    work(item)
                else:
                    log(f"left for later: another process holds {lock_of(item).name}")
                    deferred.append(item)
        if deferred and len(deferred) == len(pending):
            log(f"{len(deferred)} left, each being worked on by another process: waiting")
            with store_lock(lock_of(deferred[0])):
                work(deferred.pop(0))
        pending = deferred


def _lock(store: Path, spec: Standalone) -> Path:
    return store / f".{spec.dirname()}.lock"


def _finished(store: Path, spec: Standalone) -> bool:
    return RunDir(store / spec.dirname(), "pretrain").continuation() is None


def _train_unless_done(spec: Standalone, store: Path, progress: bool) -> None:
    """(under the spec's lock) train it, or resume it, unless finished."""
    path = store / spec.dirname()
    flags = RunDir(path, "pretrain").continuation(marker=OPTIONS)  # resumed from its own options.json
    if flags is not None:
        _train(spec, path, store, progress, **flags)


@contextlib.contextmanager
def store_lock(path: Path, wait: bool = True):
    """An exclusive lock (flock: released when the holder exits, even by kill -9), so studies running side by side
    on one model store train each model once. Yields True once held; with wait=False it yields False at once when
    another process holds it."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): one study per store at a time
        yield True
        return
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _train(spec: Standalone, path: Path, store: Path, progress: bool, resume: bool, overwrite: bool) -> None:
    from ..pretrain.train import PretrainOptions, train_pretrain

    accelerator = "cpu" if _cpu_only() else "auto"
    if resume:  # everything else from the run directory: a store that moved, or another machine's, resumes too
        train_pretrain(PretrainOptions.flat(out=str(path), resume=True, progress=progress, accelerator=accelerator,
                                       model_summary=False, given=["out", "progress", "accelerator", "model_summary"]))
        return
    config = store / f".{spec.dirname()}.model_config.json"
    write_json(config, spec.model_config)
    b = spec.budget
    opts = PretrainOptions.flat(
        out=str(path), arch=spec.arch, size=spec.size, model_config=str(config), objective=spec.objective,
        data=spec.data, data_seed=spec.data_seed, seed=spec.seed, lr=b.lr, warmup_steps=b.warmup_steps,
        max_steps=b.steps, batch_size=b.batch_size, dropout=b.dropout, val_every=b.steps, val_batches=4,
        ckpt_every=max(1, min(250, b.steps // 4)), progress=progress, resume=False,
        overwrite=overwrite, accelerator=accelerator,
        model_summary=False)  # a table per model would drown the study's log
    train_pretrain(opts)


def _cpu_only() -> bool:
    import torch

    return not torch.cuda.is_available()


def preset_size(scorer) -> str:
    """The training preset a supernet's stand-alone models are named by: the supernet's size when it is a preset
    (its shape comes from model_config.json either way), else its space's."""
    size = scorer.meta.get("size")
    return size if size in size_names() else scorer.spec.size


def standalone_spec(arch, seed: int, *, size: str, cfg: dict, budget, data: str, data_seed: int) -> Standalone:
    """One stand-alone MLM training (its model-store key) of an order (an Arch or compact letters)."""
    return Standalone(arch=getattr(arch, "compact", arch), objective="mlm", size=size, model_config=cfg,
                      budget=budget, data=data, seed=seed, data_seed=data_seed)
