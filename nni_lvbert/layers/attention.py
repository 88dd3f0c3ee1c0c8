"""SA: post-LN multi-head self-attention block, exactly BERT's attention sublayer."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from .dropout import Dropout, dropout, fast_path
from .rows import TokenRows, to_rows, to_seq, tracing


def sdpa_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """(batch, seq) bool, True = real token  ->  (batch, 1, 1, seq) keys mask for SDPA, or None if nothing is padded."""
    if mask is None:
        return None
    if not tracing() and bool(mask.all()):  # a host sync (and a graph break when compiled)
        return None  # lets SDPA pick its fast kernels
    return mask[:, None, None, :]


def attention_with_dropout(q, k, v, mask: torch.Tensor | None, p: float) -> torch.Tensor:
    """What SDPA computes on CPU when it has dropout (its math path: there is no fused CPU kernel with dropout),
    with the cheaper masks of `dropout` on the attention weights. mask: SDPA's bool keys mask, True = attend."""
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return dropout(scores.softmax(-1), p) @ v


class SelfAttention(nn.Module):
    """Norm(Dropout(Out(softmax(QK^T/sqrt(d)) V)) + x); padded keys get zero weight."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h = cfg.hidden_size
        self.num_heads = cfg.num_heads
        self.query = nn.Linear(h, h)
        self.key = nn.Linear(h, h)
        self.value = nn.Linear(h, h)
        self.out = nn.Linear(h, h)
        self.attention_dropout = cfg.attention_dropout
        self.dropout = Dropout(cfg.dropout)
        self.norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                rows: TokenRows | None = None) -> torch.Tensor:
        """x: (batch, seq, hidden), or the packed real tokens (n_real, hidden) with `rows` (see rows.py): the
        projections then run on real tokens only, and only the attention itself on (batch, seq)."""
        q, k, v = (to_seq(f(x), rows) for f in (self.query, self.key, self.value))
        b, n, h = q.shape
        heads = lambda t: t.view(b, n, self.num_heads, h // self.num_heads).transpose(1, 2)
        mask = sdpa_mask(mask) if rows is None else rows.mask[:, None, None, :]  # packed: padding exists
        if fast_path(q, self.attention_dropout, self.training):
            y = attention_with_dropout(heads(q), heads(k), heads(v), mask, self.attention_dropout)
        else:
            y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), attn_mask=mask,
                                               dropout_p=self.attention_dropout if self.training else 0.0)
        y = to_rows(y.transpose(1, 2).reshape(b, n, h), rows)
        return self.norm(x + self.dropout(self.out(y)))
