"""The Lightning Trainer every training command uses, and what goes with it: atomic last.ckpt, CSV + TensorBoard logs,
DDP defaults, the progress bar, the module summary, quiet start-up, torch.compile, the optimizer and the schedule,
and the one validation-history callback. `training.fit` drives it; nothing here knows about run directories beyond
the path it writes logs and checkpoints to.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from . import interrupt
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


def validation_history(history: list, record=None, reporter=None, report=None):
    """The one validation-history callback. After every validation (sanity checks aside) it appends
    {"step": global step, **record(trainer, pl_module)} to `history` (for meta.json and the curves; `record`
    defaults to every val_* metric Lightning holds; a record of None is skipped) and, as an nnictl trial, sends
    `report(record, pl_module)` (default: its val_mlm_acc) to NNI through `reporter` as an intermediate result.

    It keeps the history and the training seconds so far in every checkpoint (Lightning saves a callback's
    `state_dict`), so a run resumed after kill -9 still has the validations and the time of the sessions before:
    `restored` is then True and `seconds_before` the time up to the checkpoint."""
    import time

    import pytorch_lightning as pl

    def val_metrics(trainer, pl_module) -> dict | None:
        rec = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val_")}
        return rec or None

    class ValidationHistory(pl.Callback):
        restored = False
        seconds_before = 0.0

        def __init__(self):
            self.start = time.time()

        @property
        def state_key(self) -> str:
            return "ValidationHistory"

        def state_dict(self) -> dict:
            return {"history": list(history), "train_seconds": self.seconds_before + time.time() - self.start}

        def load_state_dict(self, state: dict) -> None:
            history[:] = state.get("history", [])
            self.seconds_before, self.start, self.restored = state.get("train_seconds", 0.0), time.time(), True

        def on_validation_end(self, trainer, pl_module):
            if trainer.sanity_checking:
                return
            rec = (record or val_metrics)(trainer, pl_module)
            if rec is None:
                return
            history.append({"step": trainer.global_step, **rec})
            if trainer.is_global_zero and reporter is not None:
                reporter.intermediate(report(rec, pl_module) if report else rec["val_mlm_acc"])

    return ValidationHistory()


def check_compile_backend(backend: str) -> None:
    import torch._dynamo

    known = torch._dynamo.list_backends(exclude_tags=())
    if backend not in known:
        raise UserError(f"--compile {backend}: not a torch.compile backend; choose one of {', '.join(known)}")


def compile_layers(module, backend: str = "inductor") -> int:
    """torch.compile every layer block (DC/SA/FF/GLU) of `module` in place (`nn.Module.compile`: parameter names,
    checkpoints and exports stay as they are). One compiled graph per block fuses its projections' epilogues,
    dropout, residual and LayerNorm; a supernet's path sampling stays eager between the blocks, so a new path
    needs no recompilation. Returns the number of blocks compiled."""
    from .layers import LAYER_CLASSES

    names = {cls.__name__ for cls in LAYER_CLASSES.values()}  # by name: a trust_remote_code copy has its own classes
    blocks = [m for m in module.modules() if type(m).__name__ in names]
    for m in blocks:
        m.compile(backend=backend)
    return len(blocks)


def compile_callback(backend: str):
    """At fit start, the module Lightning trains compiles itself (`compile_for_training(backend)`, which returns
    what it compiled: pre-training compiles its whole objective), or else its layer blocks are compiled: for a
    supernet that module is NNI's one-shot module, whose path-sampling layers hold the very candidate blocks
    (compiling before NNI builds it could miss blocks it copies)."""
    import pytorch_lightning as pl

    class Compile(pl.Callback):
        def on_fit_start(self, trainer, pl_module):
            own = getattr(pl_module, "compile_for_training", None)
            what = own(backend) if own else f"{compile_layers(pl_module, backend)} layer blocks compiled"
            if trainer.is_global_zero:
                print(f"--compile {backend}: {what}", file=sys.stderr, flush=True)

    return Compile()


def atomic_checkpoint_callback(run_dir: Path, every: int, val_every: int | None = None):
    import pytorch_lightning as pl

    class AtomicLastCheckpoint(pl.Callback):
        """checkpoints/last.ckpt every N steps, written to a temp file then renamed: a kill -9 never leaves a
        truncated checkpoint behind. At a step that also validates it is written after the validation (as
        Lightning's ModelCheckpoint does), so the checkpoint holds that validation's record (`validation_history`);
        it runs after the other callbacks (last in the list), whose states it saves. After a Ctrl-C it writes the
        step just finished and stops the run (`interrupt.Interrupted`)."""

        def _save(self, trainer):
            final = run_dir / "checkpoints" / "last.ckpt"
            tmp = final.with_suffix(".ckpt.tmp")
            trainer.save_checkpoint(tmp, weights_only=False)  # collective: every rank calls, rank 0 writes
            if trainer.is_global_zero:
                os.replace(tmp, final)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            interrupt.note(f"step {trainer.global_step}")
            if interrupt.stop_requested(trainer):  # Ctrl-C: keep this step, then stop (interrupt.py)
                self._save(trainer)
                raise interrupt.Interrupted(f"step {trainer.global_step}")
            validates = bool(val_every) and trainer.global_step % val_every == 0
            if trainer.global_step % every == 0 and not validates:
                self._save(trainer)

        def on_validation_end(self, trainer, pl_module):
            if trainer.state.fn == "fit" and not trainer.sanity_checking and trainer.global_step % every == 0:
                self._save(trainer)

        def on_train_end(self, trainer, pl_module):
            self._save(trainer)

    return AtomicLastCheckpoint()


def build_trainer(run_dir: Path, *, max_steps: int, devices, n_devices: int, accelerator: str, strategy: str | None,
                  precision: str | None, val_every: int, val_batches: int, ckpt_every: int, callbacks: list,
                  progress: bool, num_nodes: int = 1, model_summary: bool = True):
    """NNI's traced Lightning Trainer with our conventions; returns (trainer, precision)."""
    import torch
    from nni.nas.evaluator.pytorch import Trainer
    from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger

    quiet_lightning()
    precision = precision or ("bf16-mixed" if torch.cuda.is_available() else "32-true")
    trainer = Trainer(
        max_steps=max_steps, accelerator=accelerator, devices=devices, num_nodes=num_nodes, precision=precision,
        strategy=strategy or ("ddp_find_unused_parameters_true" if n_devices * num_nodes > 1 else "auto"),
        val_check_interval=val_every, check_val_every_n_epoch=None, limit_val_batches=val_batches,
        num_sanity_val_steps=0,
        logger=[CSVLogger(run_dir / "logs", name="", version=_free_name(run_dir / "logs", "csv")),
                TensorBoardLogger(run_dir / "logs", name="", version="tensorboard")],
        callbacks=[*([progress_bar()] if progress else []), *([module_summary()] if model_summary else []), *callbacks,
                   atomic_checkpoint_callback(run_dir, ckpt_every, val_every if val_batches else None)],
        enable_checkpointing=False,
        enable_progress_bar=progress, enable_model_summary=False,  # ours, module_summary(), when model_summary
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


def progress_bar():
    """Lightning's own bar (rich when rich is installed, else tqdm: Lightning's choice) for our step-based runs,
    without two misleading items: 'v_num', the logger's version (here the fixed 'tensorboard' folder, which the
    bar cuts to 'oard'), and the rich bar's epoch total: Lightning 2.6 prints max_epochs - 1 after the epoch, i.e.
    'Epoch 0/-2' when max_steps ends the run (max_epochs=-1; Lightning issue #21925, fixed upstream by PR #21924:
    drop `_get_train_description` below once a pinned Lightning has that fix)."""
    import importlib.util

    from pytorch_lightning.callbacks import RichProgressBar, TQDMProgressBar

    class NoVersion:
        def get_metrics(self, trainer, pl_module):
            items = super().get_metrics(trainer, pl_module)
            items.pop("v_num", None)
            return items

    class StepTQDM(NoVersion, TQDMProgressBar):
        pass

    class StepRich(NoVersion, RichProgressBar):
        def _get_train_description(self, current_epoch: int) -> str:
            if (self.trainer.max_epochs or 0) >= 0:
                return super()._get_train_description(current_epoch)
            return f"{f'Epoch {current_epoch}':{len(self.validation_description)}}"  # padded as Lightning pads

    return StepRich() if importlib.util.find_spec("rich") else StepTQDM()


def module_summary():
    """Lightning's table of modules without its FLOPs column and "Total Flops" line: Lightning counts FLOPs only by
    running the module's `example_input_array`, which none of ours has (a supernet's forward depends on the sampled
    path), so both would say 0. Lightning's plain table otherwise (its own formatter), logged as Lightning logs it."""
    from pytorch_lightning.callbacks import ModelSummary
    from pytorch_lightning.utilities.model_summary.model_summary import _format_summary_table

    class NoFlopsSummary(ModelSummary):
        def summarize(self, summary_data, total_parameters, trainable_parameters, model_size, total_training_modes,
                      total_flops, **kwargs):
            columns = [c for c in summary_data if c[0] != "FLOPs" or total_flops]
            table = _format_summary_table(total_parameters, trainable_parameters, model_size, total_training_modes,
                                          total_flops, *columns)
            if not total_flops:
                table = table.rsplit("\n", 1)[0]  # the "0 Total Flops" line
            import logging

            logging.getLogger("pytorch_lightning.callbacks.model_summary").info("\n" + table)

    return NoFlopsSummary()


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
