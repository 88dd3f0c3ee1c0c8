"""MLM masking: random per batch for training, fixed once for validation.

Both go through `transformers.DataCollatorForLanguageModeling` (15 % of non-special tokens; of those 80 % -> [MASK],
10 % -> a random token, 10 % unchanged; labels -100 elsewhere). Validation is masked once at prepare time with a
seeded generator and the masked `input_ids` plus `labels` are stored in the cached split, so every candidate
architecture in every run is scored on exactly the same masked tokens and their MLM accuracies are comparable.
"""
from __future__ import annotations

MLM_PROBABILITY = 0.15
IGNORE_INDEX = -100
VAL_MASK_BATCH = 512  # fixed: masking consumes the generator batch by batch, so this is part of the result


def mlm_collator(tokenizer, mlm_probability: float = MLM_PROBABILITY, seed: int | None = None):
    from transformers import DataCollatorForLanguageModeling

    return DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability, seed=seed)


def mask_validation(val, tokenizer, mlm_probability: float, seed: int, cache_file: str | None = None):
    """The validation split with masked input_ids and labels columns, deterministic in `seed`."""
    import datasets

    collator = mlm_collator(tokenizer, mlm_probability, seed=seed)

    def mask(batch):
        rows = [{"input_ids": i, "token_type_ids": t} for i, t in zip(batch["input_ids"], batch["token_type_ids"])]
        out = collator(rows)
        lengths = [len(i) for i in batch["input_ids"]]
        return {
            "input_ids": [out["input_ids"][k, :n].tolist() for k, n in enumerate(lengths)],
            "token_type_ids": batch["token_type_ids"],
            "labels": [out["labels"][k, :n].tolist() for k, n in enumerate(lengths)],
        }

    features = datasets.Features({"input_ids": datasets.List(datasets.Value("int32")),
                                  "token_type_ids": datasets.List(datasets.Value("int8")),
                                  "labels": datasets.List(datasets.Value("int32"))})
    # One process, fixed batch size, in order: the generator is consumed identically on every run.
    return val.map(mask, batched=True, batch_size=VAL_MASK_BATCH, num_proc=None, features=features,
                   cache_file_name=cache_file,
                   new_fingerprint=f"masked-{val._fingerprint}-{seed}-{mlm_probability}", desc="masking validation")


def pad_sequences(rows: list[dict], fill: dict[str, int]) -> dict:
    """The one dynamic padding: each per-token field in `fill` as a LongTensor padded with its fill value to the
    longest row (a field a row lacks stays all fill), plus attention_mask."""
    import torch

    n = max(len(r["input_ids"]) for r in rows)
    batch = {k: torch.full((len(rows), n), v, dtype=torch.long) for k, v in fill.items()}
    batch["attention_mask"] = torch.zeros((len(rows), n), dtype=torch.long)
    for i, r in enumerate(rows):
        m = len(r["input_ids"])
        for k in fill:
            if k in r:
                batch[k][i, :m] = torch.as_tensor(r[k], dtype=torch.long)
        batch["attention_mask"][i, :m] = 1
    return batch


def host_counts(batch: dict) -> dict:
    """`batch` with what the model would otherwise ask its device for, counted here on the host (a host sync per
    question on a GPU, and a graph break under torch.compile): `mlm_positions`, the flat (batch x seq) indices of the
    MLM targets (labels != -100) in ascending order, and `real_tokens`, the number of real tokens (an int). Every
    MLM collator ends with it; `model_mask` and `MaskedLMMixin.mlm` use them."""
    from ..modeling import masked_positions

    batch = dict(batch)
    if "labels" in batch:
        batch["mlm_positions"] = masked_positions(batch["labels"])
    batch["real_tokens"] = int(batch["attention_mask"].sum())
    return batch


def pad_positions(batch: dict, multiple: int) -> dict:
    """`batch` with `mlm_positions` padded to a multiple of `multiple` by repeating a position whose label is -100
    (the first one): the padded rows are ignored like any unmasked token (loss, count, accuracy; ELECTRA writes
    the original token back there), and the number of masked rows takes few values (CUDA graphs are recorded per
    input shape). Unchanged when nothing needs padding or every label is a target."""
    import torch

    positions = batch.get("mlm_positions")
    pad = -positions.shape[0] % multiple if positions is not None else 0
    free = (batch["labels"].reshape(-1) == IGNORE_INDEX).nonzero() if pad else None
    if not pad or not len(free):
        return batch
    return {**batch, "mlm_positions": torch.cat([positions, free[0].expand(pad)])}


def model_mask(batch: dict):
    """The attention mask the model needs: `attention_mask`, or None when the host counted no padding (the model
    then skips its own check, one host sync per step on a GPU); the same results either way."""
    mask = batch["attention_mask"]
    return None if batch.get("real_tokens") == mask.numel() else mask


class PadCollator:
    """Collate already-masked rows (pad_sequences with token labels): the validation DataLoader and the search
    scorer's validation batches (`load_val_batches`)."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, rows: list[dict]) -> dict:
        return host_counts(pad_sequences(rows, {"input_ids": self.pad_token_id, "token_type_ids": 0,
                                                "labels": IGNORE_INDEX}))


FULL_ROUNDS = 7  # ceil(1 / MLM_PROBABILITY): each round masks about 1/7 (14 %) of the tokens, close to training's 15 %


def full_split_rounds(rows: list[dict], tokenizer, rounds: int = FULL_ROUNDS, seed: int = 0) -> list[list[dict]]:
    """Every non-special token of the validation rows masked exactly once over `rounds` disjoint masking rounds.

    `rows` are validation rows as prepared (input_ids with the fixed masking applied, labels at the masked
    positions): the original tokens are restored first. Each sequence's non-special positions are shuffled with
    a generator seeded by `seed` (the data seed) and dealt round-robin to the rounds; in each round the chosen
    positions get BERT's replacement (80 % [MASK], 10 % a random token, 10 % unchanged) and labels, the rest -100.
    Returns one list of rows per round, each row keeping the index of its sequence (`seq`).
    """
    import numpy as np

    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    rng = np.random.default_rng([seed, rounds])
    special = set(tokenizer.all_special_ids)
    mask_id, vocab = tokenizer.mask_token_id, len(tokenizer)
    out: list[list[dict]] = [[] for _ in range(rounds)]
    for seq, row in enumerate(rows):
        original = [lab if lab != IGNORE_INDEX else tok for tok, lab in zip(row["input_ids"], row["labels"])]
        eligible = np.array([i for i, t in enumerate(original) if t not in special], dtype=np.int64)
        order = eligible[rng.permutation(len(eligible))]
        draw = rng.random(len(order))  # replacement kind per position (its round does not matter)
        random_tokens = rng.integers(0, vocab, len(order))
        for r in range(rounds):
            ids, labels = list(original), [IGNORE_INDEX] * len(original)
            for k in range(r, len(order), rounds):
                pos = int(order[k])
                labels[pos] = original[pos]
                if draw[k] < 0.8:
                    ids[pos] = mask_id
                elif draw[k] < 0.9:
                    ids[pos] = int(random_tokens[k])
            out[r].append({"input_ids": ids, "token_type_ids": row["token_type_ids"], "labels": labels, "seq": seq})
    return out
