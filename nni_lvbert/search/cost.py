"""Analytic cost of an architecture: backbone parameters and FLOPs, and constraint checks on them.

FLOPs are those of the matrix products of one forward pass of one `max_length`-token sequence through the
backbone (a multiply-add counts 2); norms, activations, softmax and the embeddings/MLM head are not counted.
Per token and slot, with H hidden, F ff width, G = GLU width, n = max_length, k = conv kernel, h = conv heads:

    sa   4 H^2 (Q, K, V, out) + 2 n H (scores and weighted sum)
    ff   2 H F
    glu  3 H G
    dc   4 H^2 (value, gate, pointwise, out) + H k (depthwise) + H h k (kernel) + H k (lightweight conv)
"""
from __future__ import annotations

from collections import Counter

from ..arch import Arch
from ..config import ModelConfig, SpaceSpec
from ..errors import UserError


def layer_macs_per_token(layer_type: str, cfg: ModelConfig, length: int | None = None) -> int:
    h, n, k = cfg.hidden_size, length or cfg.max_length, cfg.conv_kernel
    if layer_type == "sa":
        return 4 * h * h + 2 * n * h
    if layer_type == "ff":
        return 2 * h * cfg.ff_size
    if layer_type == "glu":
        return 3 * h * cfg.glu_width
    if layer_type == "dc":
        return 4 * h * h + h * k + h * cfg.conv_heads * k + h * k
    raise ValueError(f"unknown layer type {layer_type!r}")


class CostModel:
    """Backbone parameters (as `lvbert info`) and FLOPs of architectures (Arch, or lists of layer types) of one space
    at one size."""

    def __init__(self, cfg: ModelConfig, spec: SpaceSpec):
        from ..info import param_counts

        self.cfg, self.spec = cfg, spec
        self.layer_params = param_counts(cfg, list(spec.candidates))["per_layer"]
        self.layer_flops = {t: 2 * cfg.max_length * layer_macs_per_token(t, cfg) for t in spec.candidates}

    def params(self, arch: Arch) -> int:
        if self.cfg.sharing == "type":
            return sum(self.layer_params[t] for t in set(arch))
        return sum(self.layer_params[t] for t in arch)

    def flops(self, arch: Arch) -> int:
        return sum(self.layer_flops[t] for t in arch)

    def describe(self, arch: Arch) -> dict:
        return {"backbone_params": self.params(arch), "backbone_flops": self.flops(arch),
                "layer_counts": dict(Counter(arch))}

    def min_params(self) -> int:
        smallest = min(self.layer_params.values())
        return smallest if self.cfg.sharing == "type" else smallest * self.spec.slots

    def min_flops(self) -> int:
        return min(self.layer_flops.values()) * self.spec.slots

    def constraint(self, max_params: int | None = None, max_flops: int | None = None):
        """A predicate arch -> bool for the constraints (None when there are none).

        Raises UserError at once when no architecture of the space can satisfy a constraint on its own.
        """
        if max_params is None and max_flops is None:
            return None
        if max_params is not None and max_params < self.min_params():
            raise UserError(f"no architecture of space {self.spec.name!r} satisfies --max-params {max_params}: "
                            f"the smallest backbone has {self.min_params()} parameters")
        if max_flops is not None and max_flops < self.min_flops():
            raise UserError(f"no architecture of space {self.spec.name!r} satisfies --max-flops {max_flops}: "
                            f"the cheapest backbone needs {self.min_flops()} FLOPs per sequence")

        def accept(arch: Arch) -> bool:
            return ((max_params is None or self.params(arch) <= max_params)
                    and (max_flops is None or self.flops(arch) <= max_flops))

        return accept
