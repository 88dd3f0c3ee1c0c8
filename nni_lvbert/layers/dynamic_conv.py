"""DC: dynamic convolution block (LV-BERT appendix; DynamicConv of Wu et al. 2019 with ConvBERT's GLU input).

V = GLU(x); S = SepConv(V); D = softmax_k(S W_dyn + b_dyn) per position and head;
y_i = sum_j D[i, j] * V[i + j - k//2] within each head; out = Norm(Dropout(y W_o + b_o) + x).
Padded positions are zeroed in V, so they never reach real tokens (the official TF code lets them leak).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from .dropout import Dropout
from .rows import TokenRows, to_rows, to_seq


def lightweight_conv(v: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """y[b, i, head] = sum_j kernels[b, i, head, j] * v[b, i + j - k//2, head], zeros outside the sequence.

    v: (batch, seq, channels); kernels: (batch, seq, heads, k), channels split evenly over heads.
    The per-position kernels are laid out as a banded (seq x seq) matrix per head with the pad-and-skew trick
    (row i of the padded kernels, read with stride seq+k-1, lands on columns i..i+k-1), so the whole
    convolution is one batched matmul: no loop over positions, and 2-3x faster on CPU than k shifted adds.
    """
    b, n, c = v.shape
    heads, k = kernels.shape[-2:]
    rows = F.pad(kernels.permute(0, 2, 1, 3), (0, n)).flatten(2)  # (b, heads, n * (n + k))
    band = rows[..., : n * (n + k - 1)].view(b, heads, n, n + k - 1)[..., k // 2 : k // 2 + n]
    y = band @ v.view(b, n, heads, c // heads).transpose(1, 2)  # (b, heads, n, c/heads)
    return y.transpose(1, 2).reshape(b, n, c)


def lightweight_conv_unfold(v: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """`lightweight_conv` from the k shifted windows of v (a (batch, seq, channels, k) view): k multiply-adds per
    output instead of seq, one fused kernel under torch.compile. For timing on GPUs (bench_gpu.py)."""
    b, n, c = v.shape
    heads, k = kernels.shape[-2:]
    windows = F.pad(v, (0, 0, k // 2, k // 2)).unfold(1, k, 1).view(b, n, heads, c // heads, k)
    return (windows * kernels.unsqueeze(3)).sum(-1).view(b, n, c)


def depthwise_conv(v: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Depthwise 'same' convolution along the sequence: v (batch, seq, channels), weight (channels, 1, k)."""
    return F.conv1d(v.transpose(1, 2), weight, padding=weight.shape[-1] // 2, groups=v.shape[-1]).transpose(1, 2)


def depthwise_conv_shifted(v: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`depthwise_conv` as k shifted multiply-adds on (batch, seq, channels): no layout change, and one fused
    kernel under torch.compile (cuDNN's depthwise backward can be slow). For timing on GPUs (bench_gpu.py)."""
    n, k = v.shape[1], weight.shape[-1]
    padded = F.pad(v, (0, 0, k // 2, k // 2))
    taps = weight[:, 0, :].t()  # (k, channels)
    y = padded[:, :n] * taps[0]
    for j in range(1, k):
        y = y + padded[:, j : j + n] * taps[j]
    return y


# implementations of the two convolutions (the same function, other kernels): `DynamicConv.impl` picks one of each
DEPTHWISE = {"conv1d": depthwise_conv, "shifted": depthwise_conv_shifted}
LIGHTWEIGHT = {"band": lightweight_conv, "unfold": lightweight_conv_unfold}
# the fastest pair measured, fwd+bwd at `small` (H256, batch 128 x 128): CPU (2 cores): the banded matmul;
# H200 bf16 (docs/benchmarks/h200/bench_gpu.json, layers): eager 3.27 ms (conv1d+unfold) vs 3.76 (conv1d+band),
# under torch.compile 2.84 ms (shifted+unfold) vs 3.24 (conv1d+band), SA 2.50 / 2.46 ms
FASTEST = {("cpu", False): ("conv1d", "band"), ("cpu", True): ("conv1d", "band"),
           ("gpu", False): ("conv1d", "unfold"), ("gpu", True): ("shifted", "unfold")}


def fastest_impl(device: torch.device) -> tuple[str, str]:
    """The (DEPTHWISE, LIGHTWEIGHT) pair `DynamicConv` uses on `device`, eager or being compiled (`FASTEST`)."""
    return FASTEST["cpu" if device.type == "cpu" else "gpu", torch.compiler.is_compiling()]


class DynamicConv(nn.Module):
    impl: tuple[str, str] | None = None  # (DEPTHWISE, LIGHTWEIGHT) keys; None: `fastest_impl`. Same results.

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        c, k = cfg.hidden_size, cfg.conv_kernel
        self.heads, self.k = cfg.conv_heads, k
        self.value = nn.Linear(c, c)  # GLU: (x Wl + bl) * sigmoid(x Wg + bg)
        self.gate = nn.Linear(c, c)
        self.depthwise = nn.Conv1d(c, c, k, padding=k // 2, groups=c, bias=False)
        self.pointwise = nn.Linear(c, c)  # 1x1 convolution
        self.kernel = nn.Linear(c, self.heads * k)  # W_dyn
        self.out = nn.Linear(c, c)
        self.dropout = Dropout(cfg.dropout)
        self.norm = nn.LayerNorm(c, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                rows: TokenRows | None = None) -> torch.Tensor:
        """x: (batch, seq, hidden), or the packed real tokens (n_real, hidden) with `rows` (see rows.py): the
        per-token maps then run on real tokens only, and only the two convolutions on (batch, seq)."""
        v = to_seq(self.value(x) * torch.sigmoid(self.gate(x)), rows)  # (batch, seq, c), zeros at padding if packed
        if mask is not None and rows is None:
            v = v * mask.unsqueeze(-1).to(v.dtype)
        b, n, _ = v.shape
        impl = self.impl or fastest_impl(v.device)
        depthwise, lightweight = DEPTHWISE[impl[0]], LIGHTWEIGHT[impl[1]]
        s = self.pointwise(to_rows(depthwise(v, self.depthwise.weight), rows))
        kernels = self.kernel(s).unflatten(-1, (self.heads, self.k)).softmax(dim=-1)
        y = lightweight(v, to_seq(kernels, rows).view(b, n, self.heads, self.k))
        return self.norm(x + self.dropout(self.out(to_rows(y, rows))))
