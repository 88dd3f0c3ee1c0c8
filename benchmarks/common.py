"""What the benchmarks share: round-robin timing and a seeded masked-LM batch."""
from __future__ import annotations


def interleaved_medians(fns: dict, repeats: int, warmup: int = 1, sync=None) -> dict:
    """Median seconds per call of each callable, their calls alternating round-robin (load changes on a shared
    machine hit every side alike) after `warmup` rounds; `sync()` (e.g. torch.cuda.synchronize) around each call.
    The package's own timer (`lvbert search latency-table` uses it), in seconds."""
    from nni_lvbert.search.latency import median_ms

    return {name: ms / 1e3 for name, ms in median_ms(fns, repeats, warmup, sync).items()}


def masked_batch(vocab: int, batch: int, seq: int, gen=None, min_len: int | None = None, device=None):
    """(ids, attention mask, labels): random tokens, 15 % of the real ones replaced by [MASK] (id 4) and made MLM
    targets; with `min_len`, lengths uniform in [min_len, seq] (padding on the right). Seeded by `gen` (default:
    a generator seeded 0)."""
    import torch

    gen = gen or torch.Generator().manual_seed(0)
    if min_len is None:
        mask = torch.ones(batch, seq, dtype=torch.long)
    else:
        lengths = torch.randint(min_len, seq + 1, (batch,), generator=gen)
        mask = (torch.arange(seq)[None] < lengths[:, None]).long()
    ids = torch.randint(5, vocab, (batch, seq), generator=gen) * mask
    labels = torch.full_like(ids, -100)
    where = (torch.rand(batch, seq, generator=gen) < 0.15) & mask.bool()
    labels[where] = ids[where]
    return ids.masked_fill(where, 4).to(device), mask.to(device), labels.to(device)
