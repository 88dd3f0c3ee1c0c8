"""Training batches as a pure function of (seed, global batch number): exact resume and DDP agreement.

A plain shuffled DataLoader restarts its epoch after a resume (Lightning warns about it) and its masking RNG
starts over, so a resumed run sees other batches than an uninterrupted one. Here global batch b of epoch e is
rows perm_e[b*G:(b+1)*G] with perm_e drawn from (seed, e), rank r takes every world-th row of it, and its MLM
mask is drawn from (seed, e*nb + b). Resuming at step s just starts counting at batch s.
"""
from __future__ import annotations

import os

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from .masking import host_counts


class StepBatchSampler(Sampler):
    def __init__(self, n_rows: int, global_batch: int, seed: int, start_batch: int = 0, rank: int = 0, world: int = 1):
        if n_rows < global_batch:
            from ..errors import UserError

            raise UserError(f"the training split has {n_rows} sequences, fewer than one batch of {global_batch}")
        self.n_rows, self.global_batch, self.seed = n_rows, global_batch, seed
        self.next_batch, self.rank, self.world = start_batch, rank, world

    def __len__(self) -> int:
        return self.n_rows // self.global_batch  # incomplete last batch dropped: every step sees G rows

    def __iter__(self):
        nb = len(self)
        epoch, skip = divmod(self.next_batch, nb)
        self.next_batch = (epoch + 1) * nb  # the next iter() is the next epoch
        perm = np.random.default_rng([self.seed, epoch]).permutation(self.n_rows)
        g = self.global_batch
        for b in range(skip, nb):
            rows = perm[b * g:(b + 1) * g][self.rank::self.world]
            yield [(int(i), epoch * nb + b) for i in rows]


class KeyedRows(Dataset):
    """Dataset view whose items carry their global batch number, so masking can be seeded by it."""

    def __init__(self, rows):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, item):
        index, key = item
        return {**self.rows[index], "_batch": key}


class SeededMasking:
    """DataCollatorForLanguageModeling with its generator re-seeded from (seed, global batch number)."""

    def __init__(self, collator, seed: int):
        self.collator, self.seed = collator, seed

    def __call__(self, rows: list[dict]):
        key = rows[0]["_batch"]
        rows = [{k: v for k, v in r.items() if k != "_batch"} for r in rows]
        self.collator.generator = torch.Generator().manual_seed(int(np.random.SeedSequence([self.seed, key]).generate_state(1)[0]))
        self.collator._generator_pid = os.getpid()  # stop transformers from re-seeding it per worker
        return host_counts(self.collator(rows))


class StepDataLoader(DataLoader):
    """A DataLoader Lightning treats as resumable. Its position needs no saved state: the sampler starts from the
    trainer's restored global step (MLMDataModule.train_dataloader)."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def batch_seed(seed: int, *key: int) -> int:
    """A 32-bit seed drawn from (seed, *key): e.g. (seed, global batch) for a batch's masking (as SeededMasking),
    (seed, global batch, stream) for another random choice of the same batch. Independent streams, no state."""
    return int(np.random.SeedSequence([int(seed), *map(int, key)]).generate_state(1)[0])
