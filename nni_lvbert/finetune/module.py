"""Tokenized splits with dynamic padding, and the Lightning module of one fine-tuning run.

Training batches come from `StepBatchSampler` (rows of global batch b are a function of (seed, b)), so a run
resumed from checkpoints/last.ckpt sees exactly the batches an uninterrupted one would. Each batch is padded to its
own longest sequence (no work on padding beyond it).
"""
from __future__ import annotations

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from ..data.masking import pad_sequences
from ..data.resumable import KeyedRows, StepBatchSampler, StepDataLoader
from ..errors import UserError
from . import metrics as M
from .recipe import optimizer_and_schedule


def encode(tokenizer, split, task, max_length: int, train: bool) -> list[dict]:
    """Token ids per example; MRPC/STS-B training sets are doubled with the sentence order swapped."""
    a, b, labels = list(split.text_a), split.text_b, list(split.labels)
    if train and task.swap_double and b is not None:
        a, b, labels = a + list(b), list(b) + a, labels + labels
    enc = tokenizer(a, list(b) if b is not None else None, truncation=True, max_length=max_length)
    if task.kind == "regression":
        ys = [float(y) / task.label_scale for y in labels]
    else:
        index = {n: i for i, n in enumerate(task.label_names)}
        ys = [index[y] for y in labels]
    rows = []
    for i, y in enumerate(ys):
        row = {"input_ids": enc["input_ids"][i], "labels": y}
        if "token_type_ids" in enc:
            row["token_type_ids"] = enc["token_type_ids"][i]
        rows.append(row)
    return rows


def collate(rows: list[dict], pad_id: int, regression: bool) -> dict:
    batch = pad_sequences(rows, {"input_ids": pad_id, "token_type_ids": 0})
    batch["labels"] = torch.tensor([r["labels"] for r in rows], dtype=torch.float if regression else torch.long)
    return batch


class FinetuneData(pl.LightningDataModule):
    def __init__(self, train_rows, dev_rows: dict[str, list], batch_size: int, seed: int, pad_id: int,
                 regression: bool, eval_batch_size: int = 128, num_workers: int = 0):
        super().__init__()
        if len(train_rows) < batch_size:
            raise UserError(f"the training split has {len(train_rows)} examples, fewer than one batch of "
                            f"{batch_size}; lower --batch-size")
        self.train_rows, self.dev_rows, self.batch_size, self.seed = train_rows, dev_rows, batch_size, seed
        self.pad_id, self.regression, self.eval_batch_size, self.num_workers = pad_id, regression, eval_batch_size, num_workers

    @property
    def steps_per_epoch(self) -> int:
        return len(self.train_rows) // self.batch_size

    def _collate(self, rows):
        return collate(rows, self.pad_id, self.regression)

    def train_dataloader(self):
        """Global batch b is a function of (seed, b); under DDP each rank takes its share of it (the Trainer runs
        with use_distributed_sampler=False, so the dev loaders stay whole: every rank scores the whole dev set)."""
        t = self.trainer
        done, rank, world = (t.global_step, t.global_rank, t.world_size) if t is not None else (0, 0, 1)
        sampler = StepBatchSampler(len(self.train_rows), self.batch_size, self.seed, start_batch=done, rank=rank,
                                   world=world)
        return StepDataLoader(KeyedRows(self.train_rows), batch_sampler=sampler, collate_fn=self._collate,
                              num_workers=self.num_workers)

    def val_dataloader(self):
        return [DataLoader(rows, batch_size=self.eval_batch_size, shuffle=False, collate_fn=self._collate)
                for rows in self.dev_rows.values()]


STEP_STREAM = 5  # batch_seed stream of the per-step dropout seeds (pre-training uses 0-4)


class FinetuneModule(pl.LightningModule):
    """Wraps a transformers sequence-classification model; validates every dev set, keeps the curve."""

    def __init__(self, model, task, dev_names: list[str], lr: float, total_steps: int, warmup_fraction: float,
                 weight_decay: float, layer_decay: float, adam_eps: float, steps_per_epoch: int, seed: int = 0):
        super().__init__()
        self.seed = seed
        self.model, self.task, self.dev_names = model, task, dev_names
        self.model.train()  # from_pretrained returns eval mode: dropout must be on while training
        self.hp = {"lr": lr, "total_steps": total_steps, "warmup_fraction": warmup_fraction,
                   "weight_decay": weight_decay, "decay": layer_decay, "eps": adam_eps}
        self.steps_per_epoch = steps_per_epoch
        self.last_record: dict | None = None  # the latest validation, taken by the run's validation history
        self._preds: dict[int, list] = {}
        self._labels: dict[int, list] = {}

    def forward(self, batch):
        return self.model(**batch)

    def on_train_batch_start(self, batch, batch_idx):
        """Dropout is a function of (seed, step, rank): a resumed run continues exactly as an uninterrupted one
        (as pre-training; the batches are already a function of (seed, epoch))."""
        from ..data.resumable import batch_seed

        torch.manual_seed(batch_seed(self.seed, self.trainer.global_step, self.trainer.global_rank, STEP_STREAM))

    def training_step(self, batch, batch_idx):
        loss = self.model(**batch).loss
        self.log("train_loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        labels = batch.pop("labels")
        logits = self.model(**batch).logits
        pred = logits.squeeze(-1) if self.task.kind == "regression" else logits.argmax(-1)
        self._preds.setdefault(dataloader_idx, []).append(pred.float().cpu().numpy())
        self._labels.setdefault(dataloader_idx, []).append(labels.float().cpu().numpy())

    def on_validation_epoch_end(self):
        if self.trainer.sanity_checking:
            self._preds, self._labels = {}, {}
            return
        self._record()
        self.log("dev_score", self.last_record["score"], prog_bar=True, rank_zero_only=True)

    def _record(self):
        dev = {}
        for i, name in enumerate(self.dev_names):
            p, y = np.concatenate(self._preds.get(i, [])), np.concatenate(self._labels.get(i, []))
            dev[name] = M.compute(self.task.metrics, p, y)
        self._preds, self._labels = {}, {}
        self._remember(M.task_score(dev), dev)

    def _remember(self, score: float, dev: dict) -> None:
        """One validation of the dev curve, for the run's validation history (`take_record`)."""
        epoch = round(self.trainer.global_step / self.steps_per_epoch, 3)
        self.last_record = {"epoch": epoch, "score": score, "dev": dev}

    def take_record(self) -> dict | None:
        """The latest validation's record, once (`trainer.validation_history`'s `record`)."""
        record, self.last_record = self.last_record, None
        return record

    def configure_optimizers(self):
        opt, sched = optimizer_and_schedule(self.model, self.hp["lr"], self.hp["total_steps"],
                                            self.hp["warmup_fraction"], self.hp["weight_decay"], self.hp["decay"],
                                            self.hp["eps"])
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class SequenceAdapter:
    """Fine-tuning's task adapter for sequence classification and regression (GLUE and labelled files): what
    `run.run_one` needs beyond the shared loop -- the data module, the model class and the Lightning module.
    `qa_module.QAAdapter` is the one for extractive QA."""

    qa = False  # default learning rate: `recipe.default_lr(config, qa=...)`

    def data(self, opts, tok, task, seed: int):
        """(data module, what the run's meta.json counts, the console's words for it)."""
        import dataclasses

        train = task.train
        if opts.max_train_examples:
            n = opts.max_train_examples
            train = dataclasses.replace(train, text_a=train.text_a[:n], labels=train.labels[:n],
                                        text_b=train.text_b[:n] if train.text_b else None)
        train_rows = encode(tok, train, task, opts.max_length, train=True)
        dev_rows = {n: encode(tok, s, task, opts.max_length, train=False) for n, s in task.dev.items()}
        dm = FinetuneData(train_rows, dev_rows, opts.batch_size, seed, tok.pad_token_id, task.kind == "regression",
                          num_workers=opts.hardware.num_workers)
        return dm, {"train_examples": len(train_rows)}, f"{len(train_rows)} training examples"

    def load_model(self, source: str, task):
        from transformers import AutoModelForSequenceClassification

        kw = {"num_labels": task.num_labels}
        if task.kind == "regression":
            kw["problem_type"] = "regression"
        else:
            kw.update(id2label=dict(enumerate(task.label_names)),
                      label2id={n: i for i, n in enumerate(task.label_names)})
        return AutoModelForSequenceClassification.from_pretrained(source, ignore_mismatched_sizes=True, **kw)

    def module(self, model, task, dm, **hp):
        return FinetuneModule(model, task, list(dm.dev_rows), **hp)

