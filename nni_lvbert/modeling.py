"""The project's MLM models on the one body (`body.py`): the masked-LM forward, the fixed-architecture model.

The search space (space.py) shares `MaskedLMMixin` with the fixed model and the Hugging Face classes share the
body, so a frozen space, a fixed model and `hf.LVBertForMaskedLM` run the very same code; only the way the slots
are filled differs.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .body import DiscriminatorHead, Embeddings, MLMHead, SlotStack, init_weights
from .config import ModelConfig, SpaceSpec

__all__ = [
    "DiscriminatorHead",
    "Embeddings",
    "Encoder",
    "FixedMLM",
    "MLMHead",
    "MLMOutput",
    "MaskedLMMixin",
    "init_weights",
    "masked_positions",
    "masked_rows",
    "mlm_accuracy",
    "mlm_correct",
]


@dataclass
class MLMOutput:
    loss: torch.Tensor | None  # mean cross-entropy over masked positions
    logits: torch.Tensor | None  # (batch, seq, vocab), or (len(positions), vocab) when only_masked
    correct: torch.Tensor | None = None  # number of masked tokens predicted right
    count: torch.Tensor | None = None  # number of masked tokens
    hidden: torch.Tensor | None = None


class MaskedLMMixin(SlotStack):
    """Forward shared by the fixed model and the search space; needs `embeddings`, the slots, `head`."""

    def encode(self, input_ids, attention_mask=None, token_type_ids=None, start: int = 0, hidden=None):
        """Hidden states after all slots (0 at padding); `start`/`hidden` resume from a cached prefix of slots."""
        x = self.embeddings(input_ids, token_type_ids) if hidden is None else hidden
        return self.run_slots(x, attention_mask, start=start)

    def mlm(self, hidden, labels=None, only_masked: bool = True, positions=None) -> MLMOutput:
        """MLM loss/accuracy. With labels and only_masked, the vocabulary projection runs only at the masked
        positions: `positions`, their flat (batch x seq) indices in ascending order as counted on the host by the
        collators (`data.masking.host_counts`: no device sync), else found here from labels != -100."""
        if labels is None:
            return MLMOutput(loss=None, logits=self.head(hidden), hidden=hidden)
        if only_masked:
            if positions is None:
                positions = masked_positions(labels)
            rows, target = masked_rows(hidden, positions), labels.reshape(-1).index_select(0, positions)
            logits = self.head(rows)  # positions padded by data.masking.pad_positions have target -100: ignored
        else:
            logits = self.head(hidden)
            target = labels
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100)
        valid = target != -100
        correct = mlm_correct(logits.detach(), target).sum()
        return MLMOutput(loss=loss, logits=logits, correct=correct, count=valid.sum(), hidden=hidden)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, only_masked=True,
                positions=None):
        return self.mlm(self.encode(input_ids, attention_mask, token_type_ids), labels, only_masked, positions)


def masked_positions(labels: torch.Tensor) -> torch.Tensor:
    """Flat (batch x seq) indices of the MLM targets (labels != -100), ascending. A data-dependent shape: on a GPU
    a host sync, so the collators count them on the host (`data.masking.host_counts`)."""
    return (labels.reshape(-1) != -100).nonzero().squeeze(-1)


def masked_rows(hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The hidden states (batch, seq, H) at flat `positions` (`masked_positions`): (len(positions), H)."""
    return hidden.reshape(-1, hidden.shape[-1]).index_select(0, positions)


def mlm_correct(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The one definition of a right MLM prediction: `logits.argmax(-1) == target`, exactly (ties go to the first
    maximum, as argmax); targets < 0 (ignored positions) give False. Training, validation, the search scorer, the
    nnictl trial and IOT's per-instance counts all use it. On CPU several times faster than argmax over a
    vocabulary, where amax + gather are not slow: argmax runs only on the rows whose target logit reaches the
    maximum (two host syncs, nothing on a CPU). Elsewhere, and under torch.compile, argmax itself: no sync."""
    safe = target.clamp(min=0)
    if logits.device.type != "cpu" or torch.compiler.is_compiling():
        return (logits.argmax(-1) == safe) & (target >= 0)
    hit = (logits.gather(-1, safe.unsqueeze(-1)).squeeze(-1) == logits.amax(-1)) & (target >= 0)
    if bool(hit.any()):
        rows = hit.clone()
        hit[rows] = logits[rows].argmax(-1) == safe[rows]
    return hit


def mlm_accuracy(pairs) -> float:
    """Right / counted tokens over (logits, target) pairs, by `mlm_correct` (targets < 0 are not counted); 0.0 when
    nothing is counted. Exact: the counts are integers (summed on the logits' device: one host sync at the end),
    divided once at the end."""
    correct = count = 0
    for logits, target in pairs:
        correct = mlm_correct(logits, target).sum() + correct
        count = (target >= 0).sum() + count
    correct, count = int(correct), int(count)
    return correct / count if count else 0.0


class Encoder(MaskedLMMixin, nn.Module):
    """Embeddings + one layer per slot of one fixed architecture, no head: the body of every fixed model
    (`FixedMLM` adds the MLM head; ELECTRA's discriminator is one, with `DiscriminatorHead` beside it). `arch` is
    anything `Arch.parse` accepts (checked against `space` when given); `self.arch` is the Arch. With init=False the
    caller initialises (after adding its head: the same random draws as one model built whole)."""

    def __init__(self, cfg: ModelConfig, arch, space: SpaceSpec | None = None, init: bool = True):
        super().__init__()
        from .arch import Arch

        self.config = cfg
        self.arch = Arch.parse(arch, space)
        self.embeddings = Embeddings(cfg)
        self.build_slots(cfg, self.arch)
        if init:
            init_weights(self, cfg.initializer_range)


class FixedMLM(Encoder):
    """The project's MLM model of one fixed architecture (what pre-training trains; its Hugging Face counterpart,
    saved and loaded with save_pretrained/from_pretrained, is `hf.LVBertForMaskedLM`): an `Encoder` and the MLM
    head."""

    def __init__(self, cfg: ModelConfig, arch, space: SpaceSpec | None = None):
        super().__init__(cfg, arch, space, init=False)
        self.head = MLMHead(cfg, self.embeddings.word)
        init_weights(self, cfg.initializer_range)
