"""Train the supernet: NasExperiment(space, Lightning evaluator, SeededRandomOneShot).

Every step samples one layer type per slot (SPOS, LV-BERT §3.2) from (seed, global step), so the run is
reproducible, resumable with the same future paths, and DDP ranks agree on the path.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import UserError

# Training defaults: LV-BERT Table 5 for the paper sizes; `tiny` is sized for ~10 minutes on 2 CPU cores.
PRESETS = {
    "paper": dict(lr=2e-4, warmup_steps=10_000, max_steps=2_000_000, batch_size=128, dropout=0.1,
                  val_every=10_000, val_batches=100, ckpt_every=5_000),
    "tiny": dict(lr=2e-3, warmup_steps=100, max_steps=1_500, batch_size=32, dropout=0.0,
                 val_every=250, val_batches=20, ckpt_every=100),
}


@dataclass
class SupernetOptions:
    run_dir: str = "runs/supernet"
    space: str = "lvbert"
    size: str | None = None  # default: the space file's size
    corpus: list[str] | None = None  # None = embedded corpus
    tokenizer: str | None = None
    cache_dir: str | None = None
    max_docs: int | None = None
    val_fraction: float = 0.02
    seed: int = 0
    lr: float | None = None
    warmup_steps: int | None = None
    max_steps: int | None = None
    batch_size: int | None = None
    dropout: float | None = None
    sharing: str | None = None
    weight_decay: float = 0.0
    val_every: int | None = None
    val_batches: int | None = None
    ckpt_every: int | None = None
    accelerator: str = "auto"
    devices: str = "1"
    strategy: str | None = None
    precision: str | None = None
    num_workers: int = 0
    resume: bool = False
    overwrite: bool = False
    record_paths: bool = False  # write ranks/rank<r>.json with every sampled path and a weight digest
    progress: bool = True
    extra: dict = field(default_factory=dict)

    def preset(self) -> dict:
        return PRESETS["tiny" if self.size == "tiny" else "paper"]

    def resolved(self, key: str):
        value = getattr(self, key)
        return self.preset()[key] if value is None else value


def launcher_is_rank_zero() -> bool:
    """True in the process that started the run (Lightning/torchrun children have a non-zero rank env)."""
    return all(int(os.environ.get(v, "0")) == 0 for v in ("RANK", "LOCAL_RANK", "NODE_RANK"))


def in_nni_trial() -> bool:
    import nni

    return nni.get_experiment_id() != "STANDALONE"


TUNABLE = ("lr", "warmup_steps", "max_steps", "batch_size", "dropout", "weight_decay", "seed")


def apply_nni_parameters(opts: SupernetOptions) -> None:
    """As an nnictl trial, the tuner's parameters (e.g. {"lr": 0.002}) override the command-line options."""
    if not in_nni_trial():
        return
    import nni

    params = nni.get_next_parameter() or {}
    unknown = sorted(set(params) - set(TUNABLE))
    if unknown:
        raise UserError(f"search-space parameters {', '.join(unknown)} are not supernet options ({', '.join(TUNABLE)})")
    for k, v in params.items():
        setattr(opts, k, v)


def quiet_nni_logging() -> None:
    """NNI logs every experiment step at INFO and repeats a harmless 'training_service ignored' warning."""
    logging.getLogger("nni").setLevel(logging.WARNING)
    logging.getLogger("nni.nas.experiment.config.experiment").setLevel(logging.ERROR)


def state_digest(model) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _callbacks(opts: SupernetOptions, run_dir: Path, history: list):
    import nni
    import pytorch_lightning as pl

    class AtomicLastCheckpoint(pl.Callback):
        """checkpoints/last.ckpt every N steps, written to a temp file then renamed: a kill -9 never leaves a
        truncated checkpoint behind."""

        def __init__(self, every: int):
            self.every = every

        def _save(self, trainer):
            final = run_dir / "checkpoints" / "last.ckpt"
            tmp = final.with_suffix(".ckpt.tmp")
            trainer.save_checkpoint(tmp)  # collective: every rank calls, rank 0 writes
            if trainer.is_global_zero:
                os.replace(tmp, final)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step % self.every == 0:
                self._save(trainer)

        def on_train_end(self, trainer, pl_module):
            self._save(trainer)

    class ValidationReport(pl.Callback):
        """Keeps the validation curve for meta.json and reports it to NNI when running as a trial."""

        def on_validation_end(self, trainer, pl_module):
            if trainer.sanity_checking or "val_mlm_acc" not in trainer.callback_metrics:
                return
            acc = float(trainer.callback_metrics["val_mlm_acc"])
            history.append({"step": trainer.global_step, "val_mlm_acc": acc,
                            "val_loss": float(trainer.callback_metrics["val_loss"])})
            if trainer.is_global_zero and in_nni_trial():
                nni.report_intermediate_result(acc)

    return [AtomicLastCheckpoint(opts.resolved("ckpt_every")), ValidationReport()]


def train_supernet(opts: SupernetOptions) -> dict:
    import nni
    import pytorch_lightning as pl
    import torch
    from nni.nas.evaluator.pytorch import Lightning, Trainer
    from nni.nas.experiment import NasExperiment
    from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger

    from ..config import load_size, load_space
    from ..data import MLMDataModule, prepare
    from ..space import LVBertSpace
    from . import rundir
    from .lightning_module import MLMModule
    from .strategy import SeededRandomOneShot

    apply_nni_parameters(opts)
    run_dir = Path(opts.run_dir)
    spec = load_space(opts.space)
    opts.size = opts.size or spec.size
    cfg = load_size(opts.size, dropout=opts.resolved("dropout"), attention_dropout=opts.resolved("dropout"),
                    sharing=opts.sharing)
    max_steps, batch_size = opts.resolved("max_steps"), opts.resolved("batch_size")
    for name, v in [("max_steps", max_steps), ("batch_size", batch_size), ("val_every", opts.resolved("val_every")),
                    ("ckpt_every", opts.resolved("ckpt_every"))]:
        if v < 1:
            raise UserError(f"{name} must be at least 1, got {v}")
    devices = int(opts.devices) if str(opts.devices).isdigit() else opts.devices
    n_dev = devices if isinstance(devices, int) else 1
    if batch_size % n_dev:
        raise UserError(f"batch size {batch_size} is not divisible by {n_dev} devices")

    if launcher_is_rank_zero():
        rundir.prepare_run_dir(run_dir, opts.resume, opts.overwrite)
    pl.seed_everything(opts.seed, workers=True, verbose=False)

    data = prepare(corpus=opts.corpus, size=opts.size, vocab_size=None if opts.tokenizer else cfg.vocab_size,
                   max_length=cfg.max_length, tokenizer=opts.tokenizer, val_fraction=opts.val_fraction,
                   seed=opts.seed, cache_dir=opts.cache_dir, max_docs=opts.max_docs)
    cfg.vocab_size = data.vocab_size  # a given tokenizer decides the vocabulary
    if launcher_is_rank_zero():
        rundir.save_static(run_dir, spec, cfg, data.tokenizer_dir)
    dm = MLMDataModule(data, batch_size=batch_size // n_dev, seed=opts.seed, num_workers=opts.num_workers)

    space = LVBertSpace(spec, cfg)
    module = MLMModule(lr=opts.resolved("lr"), warmup_steps=opts.resolved("warmup_steps"), max_steps=max_steps,
                       weight_decay=opts.weight_decay)
    strategy = opts.strategy or ("ddp_find_unused_parameters_true" if n_dev > 1 else "auto")
    precision = opts.precision or ("bf16-mixed" if torch.cuda.is_available() else "32-true")
    history: list[dict] = []
    trainer = Trainer(
        max_steps=max_steps, accelerator=opts.accelerator, devices=devices, strategy=strategy, precision=precision,
        val_check_interval=opts.resolved("val_every"), check_val_every_n_epoch=None,
        limit_val_batches=opts.resolved("val_batches"), num_sanity_val_steps=0,
        logger=[CSVLogger(run_dir / "logs", name="", version="csv"),
                TensorBoardLogger(run_dir / "logs", name="", version="tensorboard")],
        callbacks=_callbacks(opts, run_dir, history), enable_checkpointing=False,
        enable_progress_bar=opts.progress, log_every_n_steps=10, deterministic=False,
        use_distributed_sampler=False,  # MLMDataModule shards each global batch over ranks itself
    )
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    evaluator = Lightning(module, trainer, datamodule=dm,
                          fit_kwargs={"ckpt_path": str(ckpt)} if opts.resume else None)
    oneshot = SeededRandomOneShot(seed=opts.seed, record_paths=opts.record_paths)

    previous = json.loads((run_dir / "meta.json").read_text()) if opts.resume and (run_dir / "meta.json").is_file() else {}
    start = time.time()
    exp = NasExperiment(space, evaluator, oneshot)
    exp.config.experiment_working_directory = str((run_dir / "nni").resolve())
    quiet_nni_logging()
    try:
        exp.run()
    finally:
        exp.stop()  # NNI otherwise stops it from atexit, logging into already-closed streams

    if opts.record_paths:
        _record_rank(run_dir, trainer, space, trainer.lightning_module.path_log)
    if not trainer.is_global_zero:
        return {}
    rundir.save_weights(run_dir, space)
    meta = {
        "run_dir": str(run_dir),
        "space": spec.to_dict(),
        "size": opts.size,
        "seed": opts.seed,
        "steps": trainer.global_step,
        "train_seconds": previous.get("train_seconds", 0.0) + (time.time() - start),
        "validation": previous.get("validation", []) + history,
        "final_val_mlm_acc": history[-1]["val_mlm_acc"] if history else previous.get("final_val_mlm_acc"),
        "data": {"path": str(data.path), "settings": data.settings, "stats": data.stats},
        "tokenizer": "tokenizer",
        "options": {k: v for k, v in asdict(opts).items() if k not in ("extra",)},
        "world_size": trainer.world_size,
        "precision": precision,
    }
    rundir.write_json_atomic(run_dir / "meta.json", meta)
    if in_nni_trial() and meta["final_val_mlm_acc"] is not None:
        nni.report_final_result(meta["final_val_mlm_acc"])
    return meta


def _record_rank(run_dir: Path, trainer, space, path_log) -> None:
    from ..arch import to_compact
    from .rundir import write_json_atomic

    write_json_atomic(run_dir / "ranks" / f"rank{trainer.global_rank}.json", {
        "rank": trainer.global_rank,
        "paths": [[step, to_compact([path[k] for k in sorted(path)])] for step, path in path_log],
        "weights_sha256": state_digest(space),
    })
