"""The MLM LightningModule NNI's Lightning evaluator trains (the same module trains a fixed arch).

It works under any NNI 3.0 strategy: the project's seeded SPOS, stock one-shot strategies (whose wrapper does not
forward the validation-epoch hooks: the epoch then ends at its last batch) and multi-trial strategies (each trial
reports its last validation MLM accuracy to NNI).
"""
from __future__ import annotations

import time

import nni
import torch
from nni.nas.evaluator.pytorch import LightningModule

from ..data.masking import model_mask
from ..nni_compat import epoch_end_not_forwarded, in_multi_trial
from ..trainer import adamw, linear_warmup_decay


def log_throughput(module, batch) -> None:
    """Log training tokens/s (all ranks) to the progress bar, timed between consecutive training steps.
    `module._tick` holds the last step's time; reset it to None after validation, which is not training time."""
    now = time.perf_counter()
    if module._tick is not None:
        tokens = batch.get("real_tokens")  # counted by the collator: no device sync
        tokens = (int(batch["attention_mask"].sum()) if tokens is None else tokens) * module.trainer.world_size
        module.log("tok/s", tokens / max(now - module._tick, 1e-9), prog_bar=True)
    module._tick = now


@nni.trace
class MLMModule(LightningModule):
    """The LightningModule of NNI's `Lightning` evaluator: masked-LM training of the model NNI sets (a supernet
    path, a sampled or a fixed model) with AdamW and linear warm-up/decay; logs val_loss and val_mlm_acc (the metric
    a multi-trial strategy receives)."""

    def __init__(self, lr: float = 2e-4, warmup_steps: int = 10_000, max_steps: int = 2_000_000,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.0):
        super().__init__()
        self.lr, self.warmup_steps, self.max_steps = lr, warmup_steps, max_steps
        self.betas, self.eps, self.weight_decay = tuple(betas), eps, weight_decay
        self._val = None  # the validation epoch's sums (loss, correct, count)
        self._tick = None
        self.val_mlm_acc: float | None = None  # the last validation's MLM accuracy

    def forward(self, batch):
        return self.model(batch["input_ids"], model_mask(batch), batch.get("token_type_ids"), labels=batch["labels"],
                          positions=batch.get("mlm_positions"))

    def training_step(self, batch, batch_idx):
        return self.training_loss([self(batch)], batch)

    def training_loss(self, outputs, batch):
        """The loss to back-propagate for one batch's forward passes (one per path; FairNAS sums the m paths'
        losses, so their gradients accumulate into one step), logged as the mean loss and the pooled accuracy."""
        loss = outputs[0].loss if len(outputs) == 1 else torch.stack([o.loss for o in outputs]).sum()
        correct, count = sum(o.correct for o in outputs), sum(o.count for o in outputs)
        self.log("train_loss", loss / len(outputs), prog_bar=True)
        self.log("train_mlm_acc", correct.float() / count.clamp(min=1), prog_bar=True)
        log_throughput(self, batch)
        return loss

    def on_validation_epoch_start(self):
        self._val = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss sum, correct, count

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        with torch.no_grad():
            out = self(batch)
        sums = torch.stack([out.loss.double() * out.count, out.correct.double(), out.count.double()])
        self._val = sums if self._val is None else self._val + sums  # None: no epoch-start hook ran (stock NNI)
        if epoch_end_not_forwarded(self) and batch_idx + 1 == self.trainer.num_val_batches[dataloader_idx]:
            self.end_validation()  # stock one-shot strategies never call on_validation_epoch_end

    def on_validation_epoch_end(self):
        if self._val is not None:
            self.end_validation()

    def end_validation(self) -> None:
        """Log the epoch's exact validation loss and MLM accuracy (summed over ranks); inside a multi-trial
        NasExperiment, report the accuracy to NNI's strategy too. Resets the epoch's sums."""
        total = self.trainer.strategy.reduce(self._val, reduce_op="sum")  # exact over all ranks
        count = total[2].clamp(min=1)
        self.log("val_loss", (total[0] / count).float(), prog_bar=True, rank_zero_only=True)
        self.log("val_mlm_acc", (total[1] / count).float(), prog_bar=True, rank_zero_only=True)
        self.val_mlm_acc, self._val = float(total[1] / count), None
        self._tick = None  # validation time is not training throughput
        if in_multi_trial():
            nni.report_intermediate_result(self.val_mlm_acc)

    def on_fit_end(self):
        if in_multi_trial() and self.val_mlm_acc is not None:  # the trial's metric: its last validation's accuracy
            nni.report_final_result(self.val_mlm_acc)

    def configure_optimizers(self):
        decay, no_decay = [], []
        for name, p in self.model.named_parameters():
            (no_decay if p.ndim < 2 else decay).append(p)
        groups = [{"params": decay, "weight_decay": self.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        opt = adamw(groups, lr=self.lr, betas=self.betas, eps=self.eps)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, linear_warmup_decay(self.warmup_steps, self.max_steps))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
