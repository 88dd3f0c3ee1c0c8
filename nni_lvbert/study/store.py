"""The model store: one stand-alone pre-training per (arch, objective, shape, budget, data, seed), trained once and
reused across studies and processes (each model under its own lock), and the MLM metrics of a stored model on
validation tokens, kept beside it (`Validation`): scored once per validation set, whichever study asks.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..atomic import write_json
from ..rundir import META, OPTIONS, RunDir
from ..shape import ModelShape
from .common import Budget, log


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


def mlm_model(run_path: Path):
    """The MLM model of a finished pre-training run (ELECTRA: its generator), weights loaded, eval mode."""
    from ..arch import parse_arch
    from ..pretrain.objectives import build_objective
    from ..pretrain.train import WEIGHTS

    run = RunDir(run_path, "pretrain")
    run.require([WEIGHTS, "model_config.json", "arch.json", META])
    meta = run.meta
    gen = meta.get("generator_config")
    fraction = gen["hidden_size"] / run.cfg.hidden_size if gen else 0.25
    model = build_objective(meta["objective"], run.cfg, parse_arch(run.read_json("arch.json")["compact"]),
                            sop=bool(meta.get("sop")), generator_fraction=fraction)
    run.load_weights(model, WEIGHTS, "its model_config.json")
    model.eval()
    return model.mlm if meta["objective"] == "mlm" else model.generator


def standalone_accuracy(run_path: Path, batches) -> float:
    """MLM accuracy of a stand-alone model on the given fixed-masked validation batches (search.validation's)."""
    from ..search.validation import model_accuracy

    return model_accuracy(mlm_model(run_path).to(batches[0].input_ids.device), batches)


def standalone_metrics(run_path: Path, batches) -> dict:
    """MLM accuracy and loss with standard errors of a stand-alone model (`search.validation.model_metrics`)."""
    from ..search.validation import model_metrics

    return model_metrics(mlm_model(run_path).to(batches[0].input_ids.device), batches)


SCORES = "scores"  # a stored model's metrics, one file per validation set: scores/<Validation.key()>.json


@dataclass
class Validation:
    """Validation batches and what identifies them (data, masking, data seed, token counts: a scorer's val_stats).
    A finished model's metrics on them are kept in its run directory (scores/<key>.json), so every study and
    process sharing the store scores a model once per validation set; a model re-trained from scratch loses its
    directory, scores included."""

    batches: list
    identity: dict

    @classmethod
    def of(cls, batches: list, stats: dict, data_seed: int) -> "Validation":
        """Batches loaded by `validation_batches` (or a scorer: its `val_stats`) with the masking's data seed."""
        return cls(batches, {**stats, "data_seed": data_seed})

    @classmethod
    def load(cls, data_path: str, cfg, val_tokens: int, masking: str, data_seed: int) -> "Validation":
        """The validation set of `validation_batches`."""
        batches, stats = validation_batches(data_path, cfg, val_tokens, masking=masking, data_seed=data_seed)
        return cls.of(batches, stats, data_seed)

    def key(self) -> str:
        blob = json.dumps({**self.identity, "data": str(Path(self.identity["data"]).resolve())}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]

    def _file(self, run_path: Path) -> Path:
        return run_path / SCORES / f"{self.key()}.json"

    def metrics(self, run_path: Path) -> dict:
        """`standalone_metrics` of a finished model, computed once (kept in its directory)."""
        from ..safeio import read_json

        path = self._file(run_path)
        if path.is_file():
            return read_json(path)["metrics"]
        import time

        from ..cost import scoring_minutes

        start = time.perf_counter()
        m = standalone_metrics(run_path, self.batches)
        write_json(path, {"validation": self.identity, "metrics": m,
                          "core_minutes": scoring_minutes(time.perf_counter() - start)})
        return m

    def core_minutes(self, paths: list[Path]) -> float:
        """What scoring these models cost, whoever scored them (kept with their metrics)."""
        from ..safeio import read_json

        return sum(read_json(self._file(p)).get("core_minutes", 0.0) for p in paths)

    def metrics_all(self, paths: list[Path], what: str = "") -> list[dict]:
        """`metrics` of every model, split with any other process scoring the same models (`one_process_each`)."""
        def work(item):
            i, path = item
            if not self._file(path).is_file():
                log(f"[{i + 1}/{len(paths)}] scoring {what}{path.name} on {len(self.batches)} validation batches")
                self.metrics(path)

        one_process_each(list(enumerate(paths)), lambda item: item[1].parent / f".{item[1].name}.score.lock", work,
                         skip=lambda item: self._file(item[1]).is_file())
        return [self.metrics(p) for p in paths]


def validation_batches(data_path: str, cfg, val_tokens: int, masking: str = "fixed", data_seed: int = 0):
    """The validation batches every compared model is scored on (the first `val_tokens` tokens; `masking` as
    `search.validation.load_val_batches`)."""
    from ..search.validation import load_val_batches

    return load_val_batches(data_path, val_tokens, 64, cfg.pad_token_id, cfg.vocab_size, cfg.max_position,
                            masking=masking, data_seed=data_seed)


def preset_size(scorer) -> str:
    """The training preset a supernet's stand-alone models are named by: the supernet's size when it is a preset
    (its shape comes from model_config.json either way), else its space's."""
    from ..config import size_names

    size = scorer.meta.get("size")
    return size if size in size_names() else scorer.spec.size


def standalone_spec(arch, seed: int, *, size: str, cfg: dict, budget, data: str, data_seed: int) -> Standalone:
    """One stand-alone MLM training (its model-store key) of an order (an Arch or compact letters)."""
    return Standalone(arch=getattr(arch, "compact", arch), objective="mlm", size=size, model_config=cfg,
                      budget=budget, data=data, seed=seed, data_seed=data_seed)
