"""The real tokens of a padded batch as packed rows, so that no layer spends work on padding.

A fine-tuning batch is padded to its longest sequence (`PadCollator`); on GLUE-like data a third or more of its
positions are padding. `TokenRows` lists the real positions once per batch; between layers the hidden states are then
(n_real_tokens, hidden) instead of (batch, seq, hidden). Every per-token step (linear maps, GELU/GLU, dropout,
residual, LayerNorm) runs on those rows only; the sequence-mixing steps (attention scores, convolutions) scatter them
back to (batch, seq, ...) with zeros at padding, which is also what keeps padding from reaching real tokens.

With no padding in a batch (pre-training packs its sequences full) `TokenRows.of` returns None and the layers run on
(batch, seq, hidden) as before: `to_seq` / `to_rows` are then the identity.

Packing needs the number of real tokens, a data-dependent shape, and `of` asks the device whether anything is padded.
Neither can be traced: while torch.export (and so torch.onnx's dynamo exporter), torch.compile or a jit trace runs
the forward (`tracing()`), `of` returns None and padded batches run on (batch, seq, hidden) with their mask; the model
then zeroes the padded positions after each layer, which is what unpacking leaves there (hf.LVBertModel).
"""
from __future__ import annotations

import torch


def tracing() -> bool:
    """True while torch.export / torch.onnx (dynamo), torch.compile or torch.jit trace the forward: no host syncs and
    no data-dependent shapes then (the eager fast paths that need them are skipped)."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing()


class TokenRows:
    """Flat indices of the real tokens of a (batch, seq) mask, True at real tokens."""

    def __init__(self, mask: torch.Tensor):
        self.mask = mask
        self.batch, self.seq = mask.shape
        self.index = mask.reshape(-1).nonzero().squeeze(-1)

    @staticmethod
    def of(mask: torch.Tensor | None) -> TokenRows | None:
        """The rows of `mask`, or None when nothing is padded (no packing needed) or the forward is being traced."""
        if mask is None or tracing() or bool(mask.all()):
            return None
        return TokenRows(mask)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq, ...) -> (n_real, ...)."""
        return x.reshape(self.batch * self.seq, *x.shape[2:]).index_select(0, self.index)

    def unpack(self, rows: torch.Tensor) -> torch.Tensor:
        """(n_real, ...) -> (batch, seq, ...), zeros at padding."""
        full = rows.new_zeros(self.batch * self.seq, *rows.shape[1:]).index_copy(0, self.index, rows)
        return full.view(self.batch, self.seq, *rows.shape[1:])


def to_seq(x: torch.Tensor, rows: TokenRows | None) -> torch.Tensor:
    """Packed rows -> (batch, seq, ...) (zeros at padding); the identity when `rows` is None."""
    return x if rows is None else rows.unpack(x)


def to_rows(x: torch.Tensor, rows: TokenRows | None) -> torch.Tensor:
    """(batch, seq, ...) -> packed rows; the identity when `rows` is None."""
    return x if rows is None else rows.pack(x)
