"""LV-BERT configuration for `transformers`: every model-shape field (`nni_lvbert.shape.ModelShape`, the one source
of the fields and defaults `config.ModelConfig` also has) plus the layer order.

Every saved model directory carries this file (for `trust_remote_code=True`) with ModelShape pasted in place of its
import (hf/bundle.py), so there it imports only `transformers` and the standard library.

`layer_types` is the order, one of "dc" (dynamic convolution), "sa" (self-attention), "ff" (feed-forward), "glu"
(GLU feed-forward) per slot; the depth is its length. There is deliberately no `num_hidden_layers`:
transformers' own `validate_layer_type` would then insist that `layer_types` hold attention kinds of its own
("full_attention", ...). The BERT-style names HF utilities look for (`num_attention_heads`, `intermediate_size`,
`max_position_embeddings`, dropout probabilities) map onto the LV-BERT fields through `attribute_map`.
"""
from __future__ import annotations

import dataclasses

from transformers import PreTrainedConfig

from ..shape import SHAPE_FIELDS, ModelShape

LVBERT_LAYER_TYPES = ("dc", "sa", "ff", "glu")


class LVBertConfig(ModelShape, PreTrainedConfig):
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
    MODEL_CONFIG_FIELDS = SHAPE_FIELDS  # the ModelConfig fields, in its order

    layer_types: list[str] | None = None  # the layer order, e.g. ["dc", "sa", "ff", ...]
    # ... every ModelShape field (vocab_size, hidden_size, ...: shape.py), then:
    classifier_dropout: float = 0.1  # on the final [CLS] state (sequence classification) or tokens (tagging)
    tie_word_embeddings: bool = True  # the MLM decoder is the word embedding

    def check_layer_types(self) -> list[str]:
        """The layer order, or a ValueError naming what is wrong with it (models call this before building)."""
        types = list(self.layer_types or [])
        bad = sorted({str(t) for t in types if t not in LVBERT_LAYER_TYPES})
        if not types or bad:
            raise ValueError(f"LVBertConfig.layer_types must be a non-empty list of {', '.join(LVBERT_LAYER_TYPES)}"
                             + (f"; unknown {', '.join(bad)}" if bad else ""))
        return types

    @classmethod
    def from_model_config(cls, model_config, layer_types, **kwargs) -> LVBertConfig:
        """From a `ModelConfig` (any dataclass with its fields) and the layer order; kwargs add HF fields."""
        values = dataclasses.asdict(model_config)
        fields = {k: values[k] for k in cls.MODEL_CONFIG_FIELDS}
        return cls(layer_types=[str(t) for t in layer_types], **fields, **kwargs)

    def model_config_dict(self) -> dict:
        """The `ModelConfig` fields of this config (`ModelConfig.from_dict` reads it back)."""
        return {k: getattr(self, k) for k in self.MODEL_CONFIG_FIELDS}


__all__ = ["LVBertConfig"]
