"""Dropout whose CPU masks cost a quarter of torch's random draws; elsewhere exactly `F.dropout`.

On CPU, `F.dropout` draws one 64-bit random number per element (`bernoulli_`, serial), which was 23 % of an ELECTRA
step at `small` (benchmarks/bench_pretrain.py). Here each 64-bit draw is cut into four 16-bit numbers and an element
is kept when its number is at or above the threshold: the drop probability is p rounded to a multiple of 1/65536
(0.1 -> 0.1000061), and kept elements are scaled by 1 / (1 - that probability), so the expectation is still x. The
mask comes from torch's global generator, as `F.dropout`'s, so a run is still a function of its seeds. On other
devices (fused dropout kernels), while torch.compile traces (Inductor generates its own) and when p is 0 or the
module is in eval mode, this is `F.dropout`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_INT16 = 1 << 16


def drop_probability(p: float) -> float:
    """The drop probability `keep_mask` realises for p: p rounded to a multiple of 1/65536."""
    return round(p * _INT16) / _INT16


def keep_mask(shape, p: float, device=None) -> torch.Tensor:
    """bool tensor of `shape`, each element True with probability 1 - drop_probability(p)."""
    n = 1
    for size in shape:
        n *= size
    draws = torch.randint(-(1 << 63), (1 << 63) - 1, ((n + 3) // 4,), dtype=torch.int64, device=device)
    threshold = round(drop_probability(p) * _INT16) - _INT16 // 2  # int16 values below it are dropped
    return draws.view(torch.int16)[:n].view(shape) >= threshold


def fast_path(x: torch.Tensor, p: float, training: bool) -> bool:
    """Whether `dropout` draws its own mask (CPU, training, p > 0, not being compiled)."""
    return training and p > 0 and x.device.type == "cpu" and not torch.compiler.is_compiling()


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """`F.dropout(x, p, training)`, with the cheap CPU mask of `keep_mask` (the gradient is the same mask)."""
    if not fast_path(x, p, training):
        return F.dropout(x, p, training)
    q = drop_probability(p)
    if q >= 1:
        return x * 0
    return x * keep_mask(x.shape, p, x.device).to(x.dtype).mul_(1.0 / (1.0 - q))


class Dropout(nn.Dropout):
    """`nn.Dropout` (same `p`, checks and train/eval behaviour) drawing its CPU masks with `dropout` above."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)
