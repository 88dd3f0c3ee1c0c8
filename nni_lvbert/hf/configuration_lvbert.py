"""LV-BERT configuration for `transformers`: every `nni_lvbert.config.ModelConfig` field plus the layer order.

This file is copied verbatim into every saved model directory (for `trust_remote_code=True`), so it imports
only `transformers` and the standard library.

`layer_types` is the order, one of "dc" (dynamic convolution), "sa" (self-attention), "ff" (feed-forward), "glu"
(GLU feed-forward) per slot; the depth is its length. There is deliberately no `num_hidden_layers`:
transformers' own `validate_layer_type` would then insist that `layer_types` hold attention kinds of its own
("full_attention", ...). The BERT-style names HF utilities look for (`num_attention_heads`, `intermediate_size`,
`max_position_embeddings`, dropout probabilities) map onto the LV-BERT fields through `attribute_map`.
"""
from __future__ import annotations

import dataclasses

from transformers import PreTrainedConfig

LVBERT_LAYER_TYPES = ("dc", "sa", "ff", "glu")


class LVBertConfig(PreTrainedConfig):
    r"""Configuration of an LV-BERT model (a searched order of dc/sa/ff/glu layers, post-LN, ALBERT embeddings).

    Example (with nni-lvbert installed; a saved directory's own copy of the classes works the same):

    ```python
    >>> from nni_lvbert.hf import LVBertConfig, LVBertForMaskedLM
    >>> config = LVBertConfig(layer_types=["dc", "sa", "ff", "glu"], hidden_size=64, num_heads=2)
    >>> model = LVBertForMaskedLM(config)
    ```
    """

    model_type = "lvbert"
    attribute_map = {
        "num_attention_heads": "num_heads",
        "intermediate_size": "ff_size",
        "max_position_embeddings": "max_position",
        "hidden_dropout_prob": "dropout",
        "attention_probs_dropout_prob": "attention_dropout",
    }
    # The ModelConfig fields, in its order (tests check that this is all of them).
    MODEL_CONFIG_FIELDS = (
        "vocab_size", "hidden_size", "embedding_size", "ff_size", "num_heads", "conv_kernel", "conv_head_size",
        "glu_activation", "glu_bias", "glu_ff_size", "max_length", "max_position", "type_vocab_size", "dropout",
        "attention_dropout", "layer_norm_eps", "initializer_range", "sharing", "pad_token_id",
    )

    layer_types: list[str] | None = None  # the layer order, e.g. ["dc", "sa", "ff", ...]
    vocab_size: int = 30522
    hidden_size: int = 256
    embedding_size: int = 128  # E; a linear E->H projection follows the embeddings when E != H (ALBERT)
    ff_size: int = 1024
    num_heads: int = 4  # self-attention heads
    conv_kernel: int = 9  # dynamic convolution kernel k
    conv_head_size: int = 64  # dynamic convolution uses hidden_size / conv_head_size heads
    glu_activation: str = "gelu"  # sigmoid | identity | relu | gelu | gelu_tanh | silu
    glu_bias: bool = False
    glu_ff_size: int | None = None  # default round(ff_size * 2/3): as many parameters as FF
    max_length: int = 128  # sequence length the model was trained with
    max_position: int = 512
    type_vocab_size: int = 2
    dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    sharing: str = "none"  # none | type (all slots of one layer type share one module, ALBERT-style)
    pad_token_id: int | None = 0
    classifier_dropout: float = 0.1  # on the final [CLS] state (sequence classification) or tokens (tagging)
    tie_word_embeddings: bool = True  # the MLM decoder is the word embedding

    @property
    def conv_heads(self) -> int:
        """Dynamic-convolution heads (as `ModelConfig.conv_heads`; the layers read it)."""
        return max(1, self.hidden_size // self.conv_head_size)

    @property
    def glu_width(self) -> int:
        """Inner width of a GLU layer (as `ModelConfig.glu_width`)."""
        return self.glu_ff_size if self.glu_ff_size is not None else round(self.ff_size * 2 / 3)

    def check_layer_types(self) -> list[str]:
        """The layer order, or a ValueError naming what is wrong with it (models call this before building)."""
        types = list(self.layer_types or [])
        bad = sorted({str(t) for t in types if t not in LVBERT_LAYER_TYPES})
        if not types or bad:
            raise ValueError(f"LVBertConfig.layer_types must be a non-empty list of {', '.join(LVBERT_LAYER_TYPES)}"
                             + (f"; unknown {', '.join(bad)}" if bad else ""))
        return types

    @classmethod
    def from_model_config(cls, model_config, layer_types, **kwargs) -> "LVBertConfig":
        """From a `ModelConfig` (any dataclass with its fields) and the layer order; kwargs add HF fields."""
        values = dataclasses.asdict(model_config)
        fields = {k: values[k] for k in cls.MODEL_CONFIG_FIELDS}
        return cls(layer_types=[str(t) for t in layer_types], **fields, **kwargs)

    def model_config_dict(self) -> dict:
        """The `ModelConfig` fields of this config (`ModelConfig.from_dict` reads it back)."""
        return {k: getattr(self, k) for k in self.MODEL_CONFIG_FIELDS}


__all__ = ["LVBertConfig"]
