"""The Lightning callbacks every training shares (`trainer.build_trainer` and `training.fit` add them): the
validation history, the atomic last checkpoint (and Ctrl-C), torch.compile at fit start, the progress bar and the
module summary. Imported only when a training runs (it imports Lightning).
"""
from __future__ import annotations

import importlib.util
import logging
import os
import sys
import time
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelSummary, RichProgressBar, TQDMProgressBar

from . import interrupt
from .layers import LAYER_CLASSES


def _val_metrics(trainer, pl_module) -> dict | None:
    rec = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val_")}
    return rec or None


def compile_layers(module, backend: str = "inductor") -> int:
    """torch.compile every layer block (DC/SA/FF/GLU) of `module` in place (`nn.Module.compile`: parameter names,
    checkpoints and exports stay as they are). One compiled graph per block fuses its projections' epilogues,
    dropout, residual and LayerNorm; a supernet's path sampling stays eager between the blocks, so a new path
    needs no recompilation. Returns the number of blocks compiled."""
    names = {cls.__name__ for cls in LAYER_CLASSES.values()}  # by name: a trust_remote_code copy has its own classes
    blocks = [m for m in module.modules() if type(m).__name__ in names]
    for m in blocks:
        m.compile(backend=backend)
    return len(blocks)


class ValidationHistory(pl.Callback):
    """The one validation-history callback. After every validation (sanity checks aside) it appends
    {"step": global step, **record(trainer, pl_module)} to `history` (for meta.json and the curves; `record`
    defaults to every val_* metric Lightning holds; a record of None is skipped) and, as an nnictl trial, sends
    `report(record, pl_module)` (default: its val_mlm_acc) to NNI through `reporter` as an intermediate result.

    It keeps the history and the training seconds so far in every checkpoint (Lightning saves a callback's
    `state_dict`), so a run resumed after kill -9 still has the validations and the time of the sessions before:
    `restored` is then True and `seconds_before` the time up to the checkpoint."""

    def __init__(self, history: list, record=None, reporter=None, report=None):
        self.history, self.record, self.reporter, self.report = history, record or _val_metrics, reporter, report
        self.start, self.seconds_before, self.restored = time.time(), 0.0, False

    @property
    def state_key(self) -> str:
        return "ValidationHistory"

    def state_dict(self) -> dict:
        return {"history": list(self.history), "train_seconds": self.seconds_before + time.time() - self.start}

    def load_state_dict(self, state: dict) -> None:
        self.history[:] = state.get("history", [])
        self.seconds_before, self.start, self.restored = state.get("train_seconds", 0.0), time.time(), True

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        rec = self.record(trainer, pl_module)
        if rec is None:
            return
        self.history.append({"step": trainer.global_step, **rec})
        if trainer.is_global_zero and self.reporter is not None:
            self.reporter.intermediate(self.report(rec, pl_module) if self.report else rec["val_mlm_acc"])


class AtomicLastCheckpoint(pl.Callback):
    """checkpoints/last.ckpt every N steps, written to a temp file then renamed: a kill -9 never leaves a truncated
    checkpoint behind. At a step that also validates it is written after the validation (as Lightning's
    ModelCheckpoint does), so the checkpoint holds that validation's record (`ValidationHistory`); it runs after the
    other callbacks (last in the list), whose states it saves. After a Ctrl-C it writes the step just finished and
    stops the run (`interrupt.Interrupted`)."""

    def __init__(self, run_dir: Path, every: int, val_every: int | None = None):
        self.final = Path(run_dir) / "checkpoints" / "last.ckpt"
        self.every, self.val_every = every, val_every

    def _save(self, trainer):
        tmp = self.final.with_suffix(".ckpt.tmp")
        trainer.save_checkpoint(tmp, weights_only=False)  # collective: every rank calls, rank 0 writes
        if trainer.is_global_zero:
            os.replace(tmp, self.final)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        interrupt.note(f"step {trainer.global_step}")
        if interrupt.stop_requested(trainer):  # Ctrl-C: keep this step, then stop (interrupt.py)
            self._save(trainer)
            raise interrupt.Interrupted(f"step {trainer.global_step}")
        validates = bool(self.val_every) and trainer.global_step % self.val_every == 0
        if trainer.global_step % self.every == 0 and not validates:
            self._save(trainer)

    def on_validation_end(self, trainer, pl_module):
        if trainer.state.fn == "fit" and not trainer.sanity_checking and trainer.global_step % self.every == 0:
            self._save(trainer)

    def on_train_end(self, trainer, pl_module):
        self._save(trainer)


class Compile(pl.Callback):
    """At fit start, the module Lightning trains compiles itself (`compile_for_training(backend)`, which returns
    what it compiled: pre-training compiles its whole objective), or else its layer blocks are compiled: for a
    supernet that module is NNI's one-shot module, whose path-sampling layers hold the very candidate blocks
    (compiling before NNI builds it could miss blocks it copies)."""

    def __init__(self, backend: str):
        self.backend = backend

    def on_fit_start(self, trainer, pl_module):
        own = getattr(pl_module, "compile_for_training", None)
        what = own(self.backend) if own else f"{compile_layers(pl_module, self.backend)} layer blocks compiled"
        if trainer.is_global_zero:
            print(f"--compile {self.backend}: {what}", file=sys.stderr, flush=True)


class _NoVersion:
    def get_metrics(self, trainer, pl_module):
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items


class StepTQDM(_NoVersion, TQDMProgressBar):
    pass


class StepRich(_NoVersion, RichProgressBar):
    def _get_train_description(self, current_epoch: int) -> str:
        if (self.trainer.max_epochs or 0) >= 0:
            return super()._get_train_description(current_epoch)
        return f"{f'Epoch {current_epoch}':{len(self.validation_description)}}"  # padded as Lightning pads


def progress_bar():
    """Lightning's own bar (rich when rich is installed, else tqdm: Lightning's choice) for our step-based runs,
    without two misleading items: 'v_num', the logger's version (here the fixed 'tensorboard' folder, which the
    bar cuts to 'oard'), and the rich bar's epoch total: Lightning 2.6 prints max_epochs - 1 after the epoch, i.e.
    'Epoch 0/-2' when max_steps ends the run (max_epochs=-1; Lightning issue #21925, fixed upstream by PR #21924:
    drop `StepRich._get_train_description` once a pinned Lightning has that fix)."""
    return StepRich() if importlib.util.find_spec("rich") else StepTQDM()


class NoFlopsSummary(ModelSummary):
    """Lightning's table of modules without its FLOPs column and "Total Flops" line: Lightning counts FLOPs only by
    running the module's `example_input_array`, which none of ours has (a supernet's forward depends on the sampled
    path), so both would say 0. Lightning's plain table otherwise (its own formatter), logged as Lightning logs it."""

    def summarize(self, summary_data, total_parameters, trainable_parameters, model_size, total_training_modes,
                  total_flops, **kwargs):
        from pytorch_lightning.utilities.model_summary.model_summary import _format_summary_table

        columns = [c for c in summary_data if c[0] != "FLOPs" or total_flops]
        table = _format_summary_table(total_parameters, trainable_parameters, model_size, total_training_modes,
                                      total_flops, *columns)
        if not total_flops:
            table = table.rsplit("\n", 1)[0]  # the "0 Total Flops" line
        logging.getLogger("pytorch_lightning.callbacks.model_summary").info("\n" + table)
