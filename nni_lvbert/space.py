"""The LV-BERT search space as an NNI ModelSpace: one labelled LayerChoice per slot.

`LVBertSpace(spec, cfg).freeze({"layer00": "dc", ...})` gives a model whose forward equals
`FixedMLM(cfg, arch)` with the same weights (the frozen ops still alias the supernet's parameters:
copy before training a subnet on its own).
"""
from __future__ import annotations

from nni.nas.nn.pytorch import LayerChoice, ModelSpace
from torch import nn

from .arch import slot_label
from .body import Embeddings, MLMHead, init_weights
from .config import ModelConfig, SpaceSpec
from .layers import layer_maker
from .modeling import MaskedLMMixin


class LVBertSpace(MaskedLMMixin, ModelSpace):
    """NNI ModelSpace of LV-BERT: `spec.slots` labelled LayerChoices (layer00, layer01, ...) over `spec.candidates`
    in a BERT encoder of shape `cfg`, with the masked-LM head (`nni_lvbert.build_space` makes one by name)."""

    def __init__(self, spec: SpaceSpec, cfg: ModelConfig):
        super().__init__()
        self.spec, self.config = spec, cfg
        self.embeddings = Embeddings(cfg)
        make = layer_maker(cfg)  # the slot factory: with sharing='type', one module per candidate type across slots
        self.layers = nn.ModuleList(
            LayerChoice({t: make(t) for t in spec.candidates}, label=slot_label(i)) for i in range(spec.slots)
        )
        self.head = MLMHead(cfg, self.embeddings.word)
        init_weights(self, cfg.initializer_range)

    def search_space_json(self) -> dict:
        """nnictl (HPO-style) search space: one `choice` per slot."""
        return {label: m.as_legacy_dict() for label, m in self.simplify().items()}
