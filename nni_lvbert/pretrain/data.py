"""Pre-training batches: ELECTRA masking and ALBERT sentence-order swaps, resumable like the MLM batches.

Every random choice of a training batch is a function of (seed, global batch number) (`batch_seed`), so a resumed
run sees the very batches of an uninterrupted one and DDP ranks agree:

    SOP swap        stream (seed, batch, SOP_STREAM), one draw per row of the global batch, before masking
    MLM masking     `SeededMasking` (seed, batch): the supernet's batches exactly (15 %, 80/10/10)
    ELECTRA masking (seed, batch): `electra_mask` with noise drawn for the whole global batch

The SOP and ELECTRA draws are made for the global batch and each rank takes its rows' share, so a row is swapped
and masked alike whatever the number of devices.

Validation rows are fixed per row: the stored 80/10/10-masked split (`lvbert data prepare`, seeded by --data-seed)
for MLM; for ELECTRA the stored masks are undone and `electra_mask` draws from (data seed, row index); the SOP swap
of row i from (data seed, i, SOP_STREAM). Every run over the same prepared data scores the same rows.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ..data.datamodule import MLMDataModule
from ..data.masking import IGNORE_INDEX, PadCollator, host_counts, mlm_collator, pad_positions
from ..data.resumable import SeededMasking, batch_seed

MASK_PROBABILITY = 0.15  # ELECTRA mask_prob
MASK_TOKEN_PROBABILITY = 0.85  # of the chosen positions, replaced by [MASK]; the rest keep their token
SOP_STREAM = 1  # random streams of one batch besides its masking (see batch_seed)


def max_predictions(max_length: int) -> int:
    """ELECTRA's max_predictions_per_seq: int((mask_prob + 0.005) * max_seq_length), 19 for 128 tokens."""
    return int((MASK_PROBABILITY + 0.005) * max_length)


def electra_mask(input_ids: torch.Tensor, attention_mask: torch.Tensor, special_ids, mask_id: int, n_max: int,
                 u_choose: torch.Tensor, u_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ELECTRA masking (pretrain_helpers.mask): per row, n = max(1, min(n_max, round(0.15 * real tokens)))
    positions drawn uniformly without replacement among the real tokens that are not [CLS]/[SEP]/[MASK]/pad; each
    is replaced by [MASK] with probability 0.85, else kept (never a random token). `u_choose`, `u_mask`: uniform
    noise of the ids' shape (the caller's seeded draws). Returns (masked input_ids, labels: original id at chosen
    positions, -100 elsewhere)."""
    real = attention_mask.bool()
    candidates = real & ~torch.isin(input_ids, torch.as_tensor(list(special_ids), dtype=input_ids.dtype))
    n_real = real.sum(-1).to(torch.float32)
    n = torch.round(n_real * MASK_PROBABILITY).long().clamp(min=1, max=n_max)
    n = torch.minimum(n, candidates.sum(-1))
    keys = torch.where(candidates, u_choose, torch.full_like(u_choose, 2.0))
    rank = keys.argsort(dim=-1, stable=True).argsort(dim=-1)  # the n candidates with the smallest keys are chosen
    chosen = rank < n.unsqueeze(-1)
    masked = torch.where(chosen & (u_mask < MASK_TOKEN_PROBABILITY), torch.full_like(input_ids, mask_id), input_ids)
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    return masked, labels


def sop_order(token_type_ids) -> list[int] | None:
    """Positions that turn `[CLS] A [SEP] B [SEP]` into `[CLS] B [SEP] A [SEP]` (None: the row has no B)."""
    types = list(token_type_ids)
    if 1 not in types:
        return None
    n, b = len(types), types.index(1)  # b: first token of B; b-1: the middle [SEP]; n-1: the last [SEP]
    return [0, *range(b, n - 1), b - 1, *range(1, b - 1), n - 1]


def swap_row(row: dict, columns=("input_ids", "labels")) -> dict:
    """A row with its two segments swapped (per-position `columns` permuted alike, token_type_ids rebuilt)."""
    order = sop_order(row["token_type_ids"])
    if order is None:
        return row
    n, b = len(order), list(row["token_type_ids"]).index(1)
    out = dict(row)
    for c in columns:
        if c in row:
            out[c] = [row[c][i] for i in order]
    out["token_type_ids"] = [0] * (n - b + 1) + [1] * (b - 1)
    return out


def sop_rows(rows: list[dict], draws) -> tuple[list[dict], list[int]]:
    """Swap row i when draws[i] < 0.5 (ALBERT SOP); labels 1 = swapped, 0 = original order."""
    labels = [int(u < 0.5 and sop_order(r["token_type_ids"]) is not None) for r, u in zip(rows, draws)]
    return [swap_row(r) if s else r for r, s in zip(rows, labels)], labels


def pad_rows(rows: list[dict], pad_id: int) -> dict:
    """LongTensors input_ids / token_type_ids / attention_mask (/ labels) padded to the longest row."""
    return PadCollator(pad_id)([{"labels": [IGNORE_INDEX] * len(r["input_ids"]), **r} for r in rows])


class TrainCollate:
    """Training batches as a function of (seed, global batch): SOP swap, then MLM or ELECTRA masking."""

    def __init__(self, tokenizer, seed: int, objective: str, sop: bool, max_length: int, mlm_probability: float,
                 global_batch: int | None = None, rank: int = 0, world: int = 1, positions_multiple: int = 1):
        self.seed, self.objective, self.sop, self.max_length = seed, objective, sop, max_length
        self.positions_multiple = positions_multiple  # > 1: masked positions padded (pad_positions; --compile)
        self.global_batch, self.rank, self.world = global_batch, rank, world
        self.pad_id, self.mask_id = tokenizer.pad_token_id, tokenizer.mask_token_id
        self.special = sorted({tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id, self.mask_id})
        self.n_max = max_predictions(max_length)
        self.mlm = SeededMasking(mlm_collator(tokenizer, mlm_probability), seed) if objective == "mlm" else None

    def __call__(self, rows: list[dict]) -> dict:
        key = rows[0]["_batch"]
        mine = slice(self.rank, None, self.world)  # this rank's rows of the global batch (StepBatchSampler's)
        total = self.global_batch or len(rows) * self.world
        sop = None
        if self.sop:
            draws = np.random.default_rng(batch_seed(self.seed, key, SOP_STREAM)).random(total)[mine]
            rows, sop = sop_rows(rows, draws)
        if self.mlm is not None:
            batch = dict(self.mlm(rows))
        else:
            batch = pad_rows([{k: v for k, v in r.items() if k != "_batch"} for r in rows], self.pad_id)
            g = torch.Generator().manual_seed(batch_seed(self.seed, key))
            n = batch["input_ids"].shape[1]
            u = torch.rand((2, total, self.max_length), generator=g)[:, mine, :n][:, :len(rows)]
            batch["input_ids"], batch["labels"] = electra_mask(batch["input_ids"], batch["attention_mask"],
                                                               self.special, self.mask_id, self.n_max, u[0], u[1])
            batch = host_counts(batch)  # ELECTRA's own labels (pad_rows and SeededMasking count the MLM ones)
        if sop is not None:
            batch["sop_labels"] = torch.tensor(sop, dtype=torch.long)
        return pad_positions(batch, self.positions_multiple)


class IndexedRows(Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        return {**self.rows[i], "_index": i}


class ValCollate:
    """Validation batches, fixed per row (see the module docstring)."""

    def __init__(self, tokenizer, data_seed: int, objective: str, sop: bool, max_length: int):
        self.data_seed, self.objective, self.sop, self.max_length = data_seed, objective, sop, max_length
        self.pad_id, self.mask_id = tokenizer.pad_token_id, tokenizer.mask_token_id
        self.special = sorted({tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id, self.mask_id})
        self.n_max = max_predictions(max_length)

    def __call__(self, rows: list[dict]) -> dict:
        index = [r["_index"] for r in rows]
        rows = [{k: v for k, v in r.items() if k != "_index"} for r in rows]
        if self.objective == "electra":  # undo the stored 80/10/10 masks: ELECTRA masks the original tokens
            rows = [{**r, "input_ids": [t if y < 0 else y for t, y in zip(r["input_ids"], r["labels"])],
                     "labels": [IGNORE_INDEX] * len(r["labels"])} for r in rows]
        sop = None
        if self.sop:
            draws = [np.random.default_rng(batch_seed(self.data_seed, i, SOP_STREAM)).random() for i in index]
            rows, sop = sop_rows(rows, draws)
        batch = pad_rows(rows, self.pad_id)
        if self.objective == "electra":
            n = batch["input_ids"].shape[1]
            u = torch.stack([torch.rand((2, self.max_length), generator=torch.Generator().manual_seed(
                batch_seed(self.data_seed, i)))[:, :n] for i in index], dim=1)
            batch["input_ids"], batch["labels"] = electra_mask(batch["input_ids"], batch["attention_mask"],
                                                               self.special, self.mask_id, self.n_max, u[0], u[1])
            batch = host_counts(batch)  # ELECTRA's own labels (pad_rows and SeededMasking count the MLM ones)
        if sop is not None:
            batch["sop_labels"] = torch.tensor(sop, dtype=torch.long)
        return batch


class PretrainDataModule(MLMDataModule):
    """MLMDataModule (same resumable sampler: batch b is a function of (seed, b)) with the pre-training collates."""

    def __init__(self, prepared, *, objective: str, sop: bool, data_seed: int, positions_multiple: int = 1,
                 **kwargs):
        super().__init__(prepared, **kwargs)
        self.objective, self.sop, self.data_seed = objective, sop, data_seed
        self.positions_multiple = positions_multiple  # training batches only (TrainCollate)
        self.max_length = int(self.prepared.settings["max_length"])

    def train_collate(self, sampler) -> TrainCollate:
        return TrainCollate(self.tokenizer, self.seed, self.objective, self.sop, self.max_length,
                            self.mlm_probability, sampler.global_batch, sampler.rank, sampler.world,
                            self.positions_multiple)

    def val_dataloader(self) -> DataLoader:
        self.setup()
        return DataLoader(IndexedRows(self.val), batch_size=self.val_batch_size, shuffle=False,
                          collate_fn=ValCollate(self.tokenizer, self.data_seed, self.objective, self.sop,
                                                self.max_length),
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0)
