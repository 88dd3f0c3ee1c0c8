"""FF and GLU-FF: the position-wise blocks (post-LN, BERT-style)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from .dropout import Dropout

# GLU variants (Shazeer 2020): name of the gate activation -> function.
GLU_ACTIVATIONS = {
    "sigmoid": torch.sigmoid,  # GLU
    "identity": lambda t: t,  # Bilinear
    "relu": F.relu,  # ReGLU
    "gelu": F.gelu,  # GEGLU (exact erf GELU)
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),  # GEGLU as in T5 v1.1 ("gelu_new")
    "silu": F.silu,  # SwiGLU
}


class FeedForward(nn.Module):
    """Norm(Dropout(GELU(x W1 + b1) W2 + b2) + x), W1: H x FF."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.ff_size)
        self.fc2 = nn.Linear(cfg.ff_size, cfg.hidden_size)
        self.dropout = Dropout(cfg.dropout)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, rows=None) -> torch.Tensor:
        """Per token: x may be (batch, seq, hidden) or packed real tokens (n_real, hidden) (`rows`, see rows.py)."""
        return self.norm(x + self.dropout(self.fc2(F.gelu(self.fc1(x)))))


class GLUFeedForward(nn.Module):
    """Norm(Dropout((act(x W) * (x V)) W2) + x); width FF*2/3 so it has FF's parameter count."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.act = GLU_ACTIVATIONS[cfg.glu_activation]
        d = cfg.glu_width
        self.gate = nn.Linear(cfg.hidden_size, d, bias=cfg.glu_bias)  # W
        self.up = nn.Linear(cfg.hidden_size, d, bias=cfg.glu_bias)  # V
        self.down = nn.Linear(d, cfg.hidden_size, bias=cfg.glu_bias)  # W2
        self.dropout = Dropout(cfg.dropout)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, rows=None) -> torch.Tensor:
        """Per token: x may be (batch, seq, hidden) or packed real tokens (n_real, hidden) (`rows`, see rows.py)."""
        return self.norm(x + self.dropout(self.down(self.act(self.gate(x)) * self.up(x))))
