"""Embeddings, MLM head and the fixed-architecture LV-BERT masked-language model (no NNI).

The search space (space.py) reuses `Embeddings`, `MLMHead` and `MaskedLMMixin`, so a frozen space and a fixed
model run the very same code; only the way `self.layers` is filled differs.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig, SpaceSpec
from .layers import layer_maker
from .layers.dropout import Dropout


class Embeddings(nn.Module):
    """Token + position + segment embeddings of size E, LayerNorm, dropout, then E->H when E != H (ALBERT)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        e = cfg.embedding_size
        self.word = nn.Embedding(cfg.vocab_size, e, padding_idx=cfg.pad_token_id)
        self.position = nn.Embedding(cfg.max_position, e)
        self.segment = nn.Embedding(cfg.type_vocab_size, e)
        self.norm = nn.LayerNorm(e, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.dropout)
        self.project = nn.Linear(e, cfg.hidden_size) if e != cfg.hidden_size else nn.Identity()

    def forward(self, input_ids: torch.Tensor | None, token_type_ids: torch.Tensor | None = None,
                inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
        """`inputs_embeds` (batch, seq, E) stands for `self.word(input_ids)` when given (transformers' convention)."""
        words = self.word(input_ids) if inputs_embeds is None else inputs_embeds
        n = words.shape[1]
        if n > self.position.num_embeddings:  # the CLI refuses such data first (data.tokenizer.check_max_length)
            raise ValueError(f"sequence length {n} exceeds the position table ({self.position.num_embeddings})")
        x = words + self.position.weight[:n]
        x = x + (self.segment(token_type_ids) if token_type_ids is not None else self.segment.weight[0])
        return self.project(self.dropout(self.norm(x)))


class MLMHead(nn.Module):
    """BERT/ELECTRA-generator head: Linear H->E, GELU, LayerNorm, then the tied word embedding + bias."""

    def __init__(self, cfg: ModelConfig, word: nn.Embedding):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.embedding_size)
        self.norm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.word = [word]  # a list, so the tied weight is not registered (and counted) twice

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(self.norm(F.gelu(self.dense(h))), self.word[0].weight, self.bias)


@dataclass
class MLMOutput:
    loss: torch.Tensor | None  # mean cross-entropy over masked positions
    logits: torch.Tensor | None  # (batch, seq, vocab), or (len(positions), vocab) when only_masked
    correct: torch.Tensor | None = None  # number of masked tokens predicted right
    count: torch.Tensor | None = None  # number of masked tokens
    hidden: torch.Tensor | None = None


class MaskedLMMixin:
    """Forward shared by the fixed model and the search space; needs `embeddings`, `layers`, `head`."""

    def encode(self, input_ids, attention_mask=None, token_type_ids=None, start: int = 0, hidden=None):
        """Hidden states after all slots; `start`/`hidden` resume from a cached prefix of slots."""
        mask = attention_mask.bool() if attention_mask is not None else None
        if mask is not None and not torch.compiler.is_compiling() and bool(mask.all()):
            mask = None  # nothing padded: one host sync here instead of one per layer (sdpa_mask); same results
        x = self.embeddings(input_ids, token_type_ids) if hidden is None else hidden
        for layer in list(self.layers)[start:]:
            x = layer(x, mask)
        return x

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


def init_weights(module: nn.Module, std: float) -> None:
    """BERT initialisation: N(0, std) for Linear/Embedding weights, zero biases, unit LayerNorm."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Conv1d)):
            nn.init.normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def build_slot_layers(types, cfg: ModelConfig) -> list[nn.Module]:
    """One module per slot (`layers.layer_maker`: with sharing='type' all slots of a type reuse one module)."""
    make = layer_maker(cfg)
    return [make(t) for t in types]


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
        self.layers = nn.ModuleList(build_slot_layers(self.arch, cfg))
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


class DiscriminatorHead(nn.Module):
    """ELECTRA's discriminator predictions: dense H->H, GELU, dense H->1, one replaced-token logit per token (the
    ELECTRA objective's and `hf.LVBertForPreTraining`'s; names as transformers' ELECTRA)."""

    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dense_prediction = nn.Linear(cfg.hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(F.gelu(self.dense(hidden))).squeeze(-1)

