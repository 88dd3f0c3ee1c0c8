"""Lightning DataModule over a prepared cache entry: shuffled, freshly masked (resumable) train batches; fixed
validation batches.

Batches are dicts of LongTensors: input_ids, token_type_ids, attention_mask, labels (-100 where not masked).
"""
from __future__ import annotations

import pytorch_lightning as pl
from torch.utils.data import DataLoader

from .masking import PadCollator, mlm_collator
from .pipeline import PreparedData
from .resumable import KeyedRows, SeededMasking, StepBatchSampler, StepDataLoader


class MLMDataModule(pl.LightningDataModule):
    """Lightning DataModule of prepared data (`PreparedData` or its directory): seeded, resumable masked-LM
    training batches of `batch_size` sequences (each DDP rank its share: Trainer(use_distributed_sampler=False)),
    fixed validation batches."""

    def __init__(self, prepared: PreparedData | str, batch_size: int = 32, val_batch_size: int | None = None,
                 num_workers: int = 0, seed: int = 0, mlm_probability: float | None = None):
        super().__init__()
        self.prepared = prepared if isinstance(prepared, PreparedData) else PreparedData.load(prepared)
        self.batch_size = batch_size
        self.val_batch_size = val_batch_size or batch_size
        self.num_workers = num_workers
        self.seed = seed
        self.mlm_probability = mlm_probability or self.prepared.settings["mlm_probability"]
        self.train = self.val = self.tokenizer = None

    def setup(self, stage: str | None = None) -> None:
        if self.tokenizer is None:
            self.tokenizer = self.prepared.tokenizer()
            self.train = self.prepared.train_dataset()
            self.val = self.prepared.val_dataset()

    def train_dataloader(self) -> DataLoader:
        """Batches and masks are a function of (seed, global batch number): a resumed run (the trainer's
        restored global_step) continues with exactly the batches an uninterrupted run would see, and each DDP
        rank takes its share of the same global batch. Needs Trainer(use_distributed_sampler=False) under DDP."""
        self.setup()
        trainer = self.trainer  # None when used without a Trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer else (0, 1)
        done = trainer.global_step * trainer.accumulate_grad_batches if trainer else 0
        sampler = StepBatchSampler(len(self.train), self.batch_size * world, self.seed, start_batch=done,
                                   rank=rank, world=world)
        return StepDataLoader(
            KeyedRows(self.train), batch_sampler=sampler, collate_fn=self.train_collate(sampler),
            num_workers=self.num_workers, persistent_workers=self.num_workers > 0,
        )

    def train_collate(self, sampler: StepBatchSampler):
        """Rows of one global batch -> a training batch (MLM masking keyed by the batch); subclasses change the
        objective here (e.g. pre-training's ELECTRA masking and SOP swaps)."""
        return SeededMasking(mlm_collator(self.tokenizer, self.mlm_probability), self.seed)

    def val_dataloader(self) -> DataLoader:
        self.setup()
        return DataLoader(self.val, batch_size=self.val_batch_size, shuffle=False,
                          collate_fn=PadCollator(self.tokenizer.pad_token_id), num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0)
