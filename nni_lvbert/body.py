"""The one LV-BERT body: embeddings, the slot stack, its forward loop, the heads' building blocks, initialisation.

Every model runs this code: the fixed model (`modeling.FixedMLM`, `Encoder`), the NNI search space
(`space.LVBertSpace`, whose slots are LayerChoices) and the Hugging Face classes (`hf.LVBertModel` and its heads,
which hold a body under transformers' `base_model_prefix`, `lvbert.`). One parameter naming follows from it:

    embeddings.*               Embeddings
    layers.<i>.*               the module of slot i (sharing "none"; a LayerChoice in the search space)
    shared.<type>.*            with sharing "type": the one module of each layer type, stored once
    head.*                     the MLM head (a model with one)

Files written before this naming held a shared fixed model's slots as `layers.<i>.*`, repeated per slot; a body
loads them (`SlotStack._load_old_slot_names`). Initialisation (`init_module`) is BERT's, and the order in which it
draws random numbers (the modules' registration order) is what makes a seed's weights reproducible: embeddings,
then the slots in order, then the heads.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .layers import layer_maker
from .layers.dropout import Dropout
from .layers.rows import TokenRows, tracing


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


class DiscriminatorHead(nn.Module):
    """ELECTRA's discriminator predictions: dense H->H, GELU, dense H->1, one replaced-token logit per token (the
    ELECTRA objective's and `hf.LVBertForPreTraining`'s; names as transformers' ELECTRA)."""

    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dense_prediction = nn.Linear(cfg.hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(F.gelu(self.dense(hidden))).squeeze(-1)


@torch.no_grad()
def init_module(m: nn.Module, std: float, init=nn.init, tied: torch.Tensor | None = None) -> None:
    """BERT initialisation of one module: N(0, std) for Linear/Conv1d/Embedding weights (an embedding's padding
    row zero), zero biases, unit LayerNorm, zero MLM output bias. `init`: the functions (`torch.nn.init`, or
    transformers' `initialization`, which skips tensors already loaded); `tied`: a weight left alone (the HF MLM
    decoder, which is the word embedding)."""
    if isinstance(m, (nn.Linear, nn.Conv1d)):
        if tied is not None and m.weight is tied:
            return
        init.normal_(m.weight, mean=0.0, std=std)
        if m.bias is not None:
            init.zeros_(m.bias)
    elif isinstance(m, nn.Embedding):
        init.normal_(m.weight, mean=0.0, std=std)
        if m.padding_idx is not None and not getattr(m.weight, "_is_hf_initialized", False):
            init.zeros_(m.weight[m.padding_idx])
    elif isinstance(m, nn.LayerNorm):
        init.ones_(m.weight)
        init.zeros_(m.bias)
    elif isinstance(m, MLMHead):
        init.zeros_(m.bias)


def init_weights(module: nn.Module, std: float) -> None:
    """`init_module` on every module of `module`, in registration order (the order of the random draws)."""
    for m in module.modules():
        init_module(m, std)


def slot_inputs(mask: torch.Tensor | None, pack: bool) -> tuple[torch.Tensor | None, TokenRows | None]:
    """(mask, rows) the slots run with: (None, None) when nothing is padded (one host sync here, none per layer);
    while traced, or without `pack`, the mask without rows; else the mask and its packed rows."""
    if mask is None:
        return None, None
    mask = mask.bool()
    if tracing():
        return mask, None
    if bool(mask.all()):
        return None, None
    return mask, TokenRows(mask) if pack else None


class SlotStack:
    """The body of every model: `embeddings`, one module per slot (`slots()`), and the one forward loop over them.

    A mixin for an nn.Module (a plain one, NNI's ModelSpace, transformers' PreTrainedModel); `build_slots`
    registers the slots of a fixed order (the search space registers its LayerChoices as `layers` itself)."""

    slot_types: list[str] | None = None  # the fixed order (build_slots); the search space has LayerChoices
    # Padded batches run packed (`layers.rows`) or in place: the same hidden states (0 at padding), the same
    # outputs; the gradients differ in their last bits (a sum over other rows). The HF classes pack (fine-tuning's
    # padded batches); the project's models do not, so that a seed's training stays bit for bit what it was.
    pack_padding: bool = False

    def build_slots(self, cfg, types) -> None:
        """One module per slot from `layers.layer_maker`: `layers.<i>`, or with sharing "type" `shared.<type>`
        (and `layers` the list of the slots' modules, not registered: each is stored once)."""
        make = layer_maker(cfg)
        self.slot_types = list(types)
        if cfg.sharing == "type":
            self.shared = nn.ModuleDict({t: make(t) for t in dict.fromkeys(self.slot_types)})
            self.layers = [self.shared[t] for t in self.slot_types]
        else:
            self.layers = nn.ModuleList(make(t) for t in self.slot_types)
        self._register_load_state_dict_pre_hook(self._load_old_slot_names)

    def slots(self) -> list[nn.Module]:
        """The module each slot runs, in order."""
        return list(self.layers)

    def run_slots(self, x, mask=None, *, start: int = 0, states: list | None = None, checkpoint=None):
        """Hidden states after the slots from `start` on (batch, seq, H), from their input `x`. mask: (batch, seq),
        1 at real tokens. A padded batch runs packed with `pack_padding` (`layers.rows`: the layers skip padding,
        whose states are 0); else, or traced, padding stays in place and is zeroed after each slot, as unpacking
        leaves it. `states`: a list to which each slot's output is appended; `checkpoint`: a
        function(layer.__call__, *args) (activation checkpointing)."""
        mask, rows = slot_inputs(mask, self.pack_padding)
        padding = ~mask.unsqueeze(-1) if mask is not None and rows is None else None
        if rows is not None:
            x = rows.pack(x)
        args = (mask,) if rows is None else (mask, rows)
        for layer in self.slots()[start:]:
            x = layer(x, *args) if checkpoint is None else checkpoint(layer.__call__, x, *args)
            if padding is not None:
                x = x.masked_fill(padding, 0.0)
            if states is not None:
                states.append(x if rows is None else rows.unpack(x))
        if rows is None:
            return x
        return states[-1] if states else rows.unpack(x)

    def _load_old_slot_names(self, state, prefix, *args) -> None:
        """load_state_dict's pre-hook: files written before `shared.<type>` load (`old_slot_names`)."""
        if "shared" in self._modules:
            old_slot_names(state, prefix, self.slot_types)


def old_slot_names(state: dict, prefix: str, types: list[str]) -> None:
    """A shared body's slots as written before the one naming (`layers.<i>.*`, repeated per slot), renamed in place
    to `shared.<type>.*`; ValueError when two slots of a type hold different weights."""
    old = f"{prefix}layers."
    for key in [k for k in state if k.startswith(old)]:
        index, _, rest = key[len(old):].partition(".")
        if not index.isdigit() or int(index) >= len(types):
            continue  # left for load_state_dict to report as unexpected
        new = f"{prefix}shared.{types[int(index)]}.{rest}"
        value = state.pop(key)
        if new in state and not torch.equal(state[new], value):
            raise ValueError(f"weights of the shared {types[int(index)]} layer differ between slots ({key})")
        state[new] = value
