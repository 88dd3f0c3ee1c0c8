"""Deterministic train / validation split by document.

A document goes to validation when a hash of its id (embedded corpus: "source/title") or, lacking one, of its text
falls below `val_fraction`. The split does not depend on the seed, the order of files or the number of processes,
so the search always scores candidates on the same held-out documents; hashing the text also sends exact duplicate
documents to the same side, so a copy of a validation document can never be trained on. Raising `val_fraction` only
adds documents to validation (a document held out at 2 % is still held out at 5 %).
"""
from __future__ import annotations

import hashlib

from ..errors import UserError

DEFAULT_VAL_FRACTION = 0.02  # LV-BERT holds out 2 % of the data for the search


def unit_hash(key: str) -> float:
    """A key's position in [0, 1), uniform over keys."""
    return int(hashlib.sha1(key.encode("utf-8")).hexdigest()[:15], 16) / 16**15


def _hash_and_count(batch: dict) -> dict:
    keys = batch["id"] if "id" in batch else batch["text"]
    return {"_u": [unit_hash(k) for k in keys], "_words": [len(t.split()) for t in batch["text"]]}


def check_val_fraction(val_fraction: float) -> None:
    if not 0.0 < val_fraction < 1.0:
        raise UserError(f"val_fraction must be between 0 and 1 (exclusive), got {val_fraction}")


def split_documents(docs, val_fraction: float, num_proc: int | None = None, cache_file: str | None = None):
    """(train docs, val docs, word counts) from a documents Dataset; both sides non-empty or UserError.

    `cache_file`: where datasets may write the (small) hash column; by default next to the corpus' own files.
    """
    import numpy as np

    check_val_fraction(val_fraction)
    if len(docs) < 2:
        raise UserError(f"the corpus has {len(docs)} document(s); at least 2 are needed for a train/validation split")
    # Only the hashes and word counts are written out, never a copy of the text.
    marks = docs.map(_hash_and_count, batched=True, num_proc=num_proc, remove_columns=docs.column_names,
                     cache_file_name=cache_file, desc="hashing documents")
    u = np.asarray(marks["_u"], dtype=np.float64)
    words = np.asarray(marks["_words"], dtype=np.int64)
    is_val = u < val_fraction
    if not is_val.any():
        is_val[int(np.argmin(u))] = True  # tiny corpora: still hold out the document that hashes lowest
    if is_val.all():
        is_val[int(np.argmax(u))] = False
    texts = docs.select_columns(["text"])
    # Ordered by hash, i.e. shuffled but reproducibly: multiprocess map cuts contiguous shards, and the embedded
    # corpus stores 10,000 short articles before 249 long speeches, which would leave one worker with most of the text.
    order = np.argsort(u, kind="stable")
    train = texts.select(order[~is_val[order]])
    val = texts.select(order[is_val[order]])
    return train, val, {"train": int(words[~is_val].sum()), "val": int(words[is_val].sum())}
