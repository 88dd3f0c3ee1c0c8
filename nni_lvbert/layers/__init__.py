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


__all__ = [
    "LAYER_CLASSES", "build_layer", "DynamicConv", "SelfAttention", "FeedForward", "GLUFeedForward",
    "GLU_ACTIVATIONS", "lightweight_conv", "TokenRows",
]
