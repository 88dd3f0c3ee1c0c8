"""Layer library: plain nn.Modules, usable without NNI. Each maps (x, mask[, rows]) -> same shape as x.

x: (batch, seq, hidden); mask: (batch, seq) bool with True at real tokens, or None when nothing is padded.
With `rows` (a `TokenRows` of the mask), x is instead the packed real tokens (n_real, hidden): no work on padding.
"""
from ..config import ModelConfig
from .attention import SelfAttention
from .dynamic_conv import DynamicConv, lightweight_conv
from .feedforward import GLU_ACTIVATIONS, FeedForward, GLUFeedForward
from .rows import TokenRows

LAYER_CLASSES = {"dc": DynamicConv, "sa": SelfAttention, "ff": FeedForward, "glu": GLUFeedForward}


def build_layer(layer_type: str, cfg: ModelConfig):
    return LAYER_CLASSES[layer_type](cfg)


def layer_maker(cfg: ModelConfig):
    """The one slot-stack builder: a function layer type -> module for the slots of a model, a supernet or an HF
    model. With `cfg.sharing == "type"` every call for a type returns the one module of that type (ALBERT-style
    sharing across the slots), built at its first call; otherwise every call builds a new module."""
    shared = {}

    def make(layer_type: str):
        if cfg.sharing != "type":
            return build_layer(layer_type, cfg)
        if layer_type not in shared:
            shared[layer_type] = build_layer(layer_type, cfg)
        return shared[layer_type]

    return make


__all__ = [
    "GLU_ACTIVATIONS",
    "LAYER_CLASSES",
    "DynamicConv",
    "FeedForward",
    "GLUFeedForward",
    "SelfAttention",
    "TokenRows",
    "build_layer",
    "layer_maker",
    "lightweight_conv",
]
