"""The Lightning Trainer every training command uses, and what goes with it: CSV + TensorBoard logs, DDP defaults,
quiet start-up, torch.compile, the optimizer and the schedule (its callbacks are `callbacks.py`'s). `training.fit`
drives it; nothing here knows about run directories beyond the path it writes logs and checkpoints to.
"""
from __future__ import annotations

from pathlib import Path

from .errors import UserError
from .nni_compat import DropMessage


def adamw(groups: list[dict], **kwargs):
    """torch's AdamW over parameter `groups`, fused (one kernel for every parameter) when all are on a GPU; torch's
    default elsewhere. Every training's optimizer (supernet/IOT/pre-training, fine-tuning) is made here."""
    import torch

    fused = all(p.is_cuda for g in groups for p in g["params"]) or None
    return torch.optim.AdamW(groups, fused=fused, **kwargs)


def linear_warmup_decay(warmup: int, total: int):
    """lr multiplier: linear 0->1 over `warmup` steps, then linear 1->0 at `total` (BERT/ELECTRA schedule; every
    training's LambdaLR: supernet, IOT, pre-training and fine-tuning)."""

    def factor(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    return factor


def check_compile_backend(backend: str) -> None:
    import torch._dynamo

    known = torch._dynamo.list_backends(exclude_tags=())
    if backend not in known:
        raise UserError(f"--compile {backend}: not a torch.compile backend; choose one of {', '.join(known)}")


def build_trainer(run_dir: Path, opts, callbacks=()):
    """NNI's traced Lightning Trainer with our conventions for a training's options (`TrainOptions`: hardware,
    schedule, display); returns (trainer, precision). Our callbacks come first, then `callbacks`, then the atomic
    checkpoint (last: it saves the others' states)."""
    import torch
    from nni.nas.evaluator.pytorch import Trainer
    from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger

    from .callbacks import AtomicLastCheckpoint, NoFlopsSummary, progress_bar
    from .train_options import parse_devices

    quiet_lightning()
    devices, n_devices = parse_devices(opts.hardware.devices, opts.resolved("batch_size"))
    val_every, val_batches = opts.resolved("val_every"), opts.resolved("val_batches")
    precision = opts.hardware.precision or ("bf16-mixed" if torch.cuda.is_available() else "32-true")
    trainer = Trainer(
        max_steps=opts.resolved("max_steps"), accelerator=opts.hardware.accelerator, devices=devices,
        num_nodes=opts.hardware.num_nodes, precision=precision,
        strategy=opts.hardware.ddp_strategy or ("ddp_find_unused_parameters_true"
                                                if n_devices * opts.hardware.num_nodes > 1 else "auto"),
        val_check_interval=val_every, check_val_every_n_epoch=None, limit_val_batches=val_batches,
        num_sanity_val_steps=0,
        logger=[CSVLogger(run_dir / "logs", name="", version=_free_name(run_dir / "logs", "csv")),
                TensorBoardLogger(run_dir / "logs", name="", version="tensorboard")],
        callbacks=[*([progress_bar()] if opts.progress else []), *([NoFlopsSummary()] if opts.model_summary else []),
                   *callbacks, AtomicLastCheckpoint(run_dir, opts.resolved("ckpt_every"),
                                                    val_every if val_batches else None)],
        enable_checkpointing=False,
        enable_progress_bar=opts.progress, enable_model_summary=False,  # ours, NoFlopsSummary, when model_summary
        log_every_n_steps=10,
        use_distributed_sampler=False,  # MLMDataModule shards each global batch over ranks itself
    )
    return trainer, precision


LITLOGGER_TIP = ("💡 Tip: For seamless cloud logging and experiment tracking, try installing "
                 "[litlogger](https://pypi.org/project/litlogger/) to enable LitLogger, which logs metrics and "
                 "artifacts automatically to the Lightning Experiments platform.")
_DROP_LITLOGGER_TIP = DropMessage(LITLOGGER_TIP)


def quiet_lightning() -> None:
    """Two lines Lightning 2.6 prints at every training start that say nothing about the run: its advertisement for
    LitLogger (logged when no LitLogger is among the loggers; only that message is dropped), and torch's
    FutureWarning that `LeafSpec` is deprecated, raised because Lightning's utilities/_pytree.py still builds one
    (torch 2.13 with Lightning 2.6.6; drop the filter once a Lightning pin no longer does)."""
    import logging
    import warnings

    logging.getLogger("pytorch_lightning.utilities.rank_zero").addFilter(_DROP_LITLOGGER_TIP)  # added once
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                            category=FutureWarning)


def _free_name(parent: Path, base: str) -> str:
    """csv, then csv-1, csv-2... for resumed sessions: Lightning's CSVLogger would delete an existing metrics.csv."""
    name, i = base, 0
    while (parent / name / "metrics.csv").exists():
        i += 1
        name = f"{base}-{i}"
    return name


def state_digest(model) -> str:
    import hashlib

    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
