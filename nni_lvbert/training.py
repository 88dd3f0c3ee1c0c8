"""Pieces shared by the one-shot trainings (supernet, IOT): Lightning trainer, atomic checkpoints, running a
NasExperiment quietly, ranks, and reporting to nnictl when the command runs as an NNI trial."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from .errors import UserError


@dataclass
class TrainOptions:
    """Options common to the one-shot trainings; None means "the size's preset" (see `resolved`)."""

    PRESETS: ClassVar[dict[str, dict]] = {}  # "tiny" and "paper": defaults of the None-able fields below

    run_dir: str = "runs/run"
    size: str | None = None
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
    progress: bool = True

    def preset(self) -> dict:
        return self.PRESETS["tiny" if self.size == "tiny" else "paper"]

    def resolved(self, key: str):
        value = getattr(self, key)
        return self.preset()[key] if value is None else value


def launcher_is_rank_zero() -> bool:
    """True in the process that started the run (Lightning/torchrun children have a non-zero rank env)."""
    return all(int(os.environ.get(v, "0")) == 0 for v in ("RANK", "LOCAL_RANK", "NODE_RANK"))


def in_nni_trial() -> bool:
    import nni

    return nni.get_experiment_id() != "STANDALONE"


def apply_tuner_parameters(opts, allowed: dict, what: str) -> dict:
    """As an nnictl trial, the tuner's parameters (e.g. {"lr": 0.002}) override the command-line options.

    `allowed` maps each tunable option to a converter (None: keep the value as sent); anything else is one clear
    line. Returns the parameters received."""
    import nni

    params = nni.get_next_parameter() or {}
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise UserError(f"tuner parameter(s) {', '.join(unknown)} are not {what} options; use {', '.join(allowed)}")
    for k, v in params.items():
        setattr(opts, k, allowed[k](v) if allowed[k] else v)
    return dict(params)


class TrialReporter:
    """Reports to nnictl, also from inside `NasExperiment.run()`: NNI's sequential engine swaps the trial command
    channel (and the current parameter record) for an in-process one while it trains, which would swallow
    intermediate results and send the final one with the engine's parameter id. Create it before the run."""

    def __init__(self):
        import nni.trial
        from nni.runtime.trial_command_channel import get_default_trial_command_channel

        self.channel, self.params = get_default_trial_command_channel(), nni.trial._params

    def _send(self, report, metric) -> None:
        import nni.trial
        from nni.runtime.trial_command_channel import (get_default_trial_command_channel,
                                                       set_default_trial_command_channel)

        inner, inner_params = get_default_trial_command_channel(), nni.trial._params
        set_default_trial_command_channel(self.channel)
        nni.trial._params = self.params
        try:
            report(metric)
        finally:
            set_default_trial_command_channel(inner)
            nni.trial._params = inner_params

    def intermediate(self, metric) -> None:
        import nni

        self._send(nni.report_intermediate_result, metric)

    def final(self, metric) -> None:
        import nni

        self._send(nni.report_final_result, metric)


def parse_devices(devices: str | int, batch_size: int) -> tuple[int | str, int]:
    """(devices for Lightning, device count); the global batch must split evenly over devices."""
    parsed = int(devices) if str(devices).isdigit() else devices
    n = parsed if isinstance(parsed, int) else 1
    if batch_size % n:
        raise UserError(f"batch size {batch_size} is not divisible by {n} devices")
    return parsed, n


def check_positive(**values) -> None:
    for name, v in values.items():
        if v < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {v}")


def atomic_checkpoint_callback(run_dir: Path, every: int):
    import pytorch_lightning as pl

    class AtomicLastCheckpoint(pl.Callback):
        """checkpoints/last.ckpt every N steps, written to a temp file then renamed: a kill -9 never leaves a
        truncated checkpoint behind."""

        def _save(self, trainer):
            final = run_dir / "checkpoints" / "last.ckpt"
            tmp = final.with_suffix(".ckpt.tmp")
            trainer.save_checkpoint(tmp, weights_only=False)  # collective: every rank calls, rank 0 writes
            if trainer.is_global_zero:
                os.replace(tmp, final)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step % every == 0:
                self._save(trainer)

        def on_train_end(self, trainer, pl_module):
            self._save(trainer)

    return AtomicLastCheckpoint()


def build_trainer(run_dir: Path, *, max_steps: int, devices, n_devices: int, accelerator: str, strategy: str | None,
                  precision: str | None, val_every: int, val_batches: int, ckpt_every: int, callbacks: list,
                  progress: bool):
    """NNI's traced Lightning Trainer with our conventions; returns (trainer, precision)."""
    import torch
    from nni.nas.evaluator.pytorch import Trainer
    from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger

    precision = precision or ("bf16-mixed" if torch.cuda.is_available() else "32-true")
    trainer = Trainer(
        max_steps=max_steps, accelerator=accelerator, devices=devices, precision=precision,
        strategy=strategy or ("ddp_find_unused_parameters_true" if n_devices > 1 else "auto"),
        val_check_interval=val_every, check_val_every_n_epoch=None, limit_val_batches=val_batches,
        num_sanity_val_steps=0,
        logger=[CSVLogger(run_dir / "logs", name="", version=_free_name(run_dir / "logs", "csv")),
                TensorBoardLogger(run_dir / "logs", name="", version="tensorboard")],
        callbacks=[atomic_checkpoint_callback(run_dir, ckpt_every), *callbacks], enable_checkpointing=False,
        enable_progress_bar=progress, log_every_n_steps=10,
        use_distributed_sampler=False,  # MLMDataModule shards each global batch over ranks itself
    )
    return trainer, precision


def _free_name(parent: Path, base: str) -> str:
    """csv, then csv-1, csv-2... for resumed sessions: Lightning's CSVLogger would delete an existing metrics.csv."""
    name, i = base, 0
    while (parent / name / "metrics.csv").exists():
        i += 1
        name = f"{base}-{i}"
    return name


def quiet_nni_logging() -> None:
    """NNI logs every experiment step at INFO and repeats a harmless 'training_service ignored' warning."""
    logging.getLogger("nni").setLevel(logging.WARNING)
    logging.getLogger("nni.nas.experiment.config.experiment").setLevel(logging.ERROR)


def run_nas_experiment(space, evaluator, strategy, run_dir: Path) -> None:
    """NasExperiment(space, evaluator, strategy).run() with its files under run_dir/nni."""
    from nni.nas.experiment import NasExperiment

    exp = NasExperiment(space, evaluator, strategy)
    exp.config.experiment_working_directory = str((run_dir / "nni").resolve())
    quiet_nni_logging()
    try:
        exp.run()
    finally:
        exp.stop()  # NNI otherwise stops it from atexit, logging into already-closed streams


def state_digest(model) -> str:
    import hashlib

    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
