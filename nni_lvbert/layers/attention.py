"""SA: post-LN multi-head self-attention block, exactly BERT's attention sublayer."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from .rows import TokenRows, to_rows, to_seq


def sdpa_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """(batch, seq) bool, True = real token  ->  (batch, 1, 1, seq) keys mask for SDPA, or None if nothing is padded."""
    if mask is None:
        return None
    if not torch.compiler.is_compiling() and bool(mask.all()):  # a host sync (and a graph break when compiled)
        return None  # lets SDPA pick its fast kernels
    return mask[:, None, None, :]


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
        self.dropout = nn.Dropout(cfg.dropout)
        self.norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                rows: TokenRows | None = None) -> torch.Tensor:
        """x: (batch, seq, hidden), or the packed real tokens (n_real, hidden) with `rows` (see rows.py): the
        projections then run on real tokens only, and only the attention itself on (batch, seq)."""
        q, k, v = (to_seq(f(x), rows) for f in (self.query, self.key, self.value))
        b, n, h = q.shape
        heads = lambda t: t.view(b, n, self.num_heads, h // self.num_heads).transpose(1, 2)  # noqa: E731
        y = F.scaled_dot_product_attention(
            heads(q),
            heads(k),
            heads(v),
            attn_mask=sdpa_mask(mask) if rows is None else rows.mask[:, None, None, :],  # packed: padding exists
            dropout_p=self.attention_dropout if self.training else 0.0,
        )
        y = to_rows(y.transpose(1, 2).reshape(b, n, h), rows)
        return self.norm(x + self.dropout(self.out(y)))
