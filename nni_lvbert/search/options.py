"""The search's option groups: what `lvbert search run` and `lvbert run` both offer (one field each)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..options import opt
from .algorithm import EvolutionConfig


@dataclass
class StrategyOptions:
    """Which strategies search, with Algorithm 1's budget (every strategy gets the same)."""

    strategies: list[str] = opt(
        help="search strategies: evolution (LV-BERT Algorithm 1), regularized-evolution, random (NNI); several run "
             "one after another into one plot", default_factory=lambda: ["evolution"], flag="--search",
        old="--strategy", metavar="NAME", group="")
    evolution: EvolutionConfig = field(default_factory=EvolutionConfig)


@dataclass
class RerankOptions:
    """Two-stage search: the supernet proposes, short stand-alone training decides (`search/rerank.py`)."""

    GROUP: ClassVar[str] = "two-stage search (the supernet proposes, short stand-alone training decides)"

    rerank: int = opt(0, "pre-train the K best distinct orders stand-alone and pick the best by MLM accuracy on the "
                         "whole validation split (default 0: off)", metavar="K")
    rerank_steps: int = opt(300, "stand-alone MLM steps per re-ranked order", metavar="N")


@dataclass
class LatencyOptions:
    """A latency budget from a measured per-layer table (`search/latency.py`)."""

    GROUP: ClassVar[str] = "latency budget (`lvbert search latency-table`)"

    max_latency_ms: float | None = opt(None, "max predicted latency (ms) from --latency-table: embedding + the sum "
                                             "of the layers", metavar="X")
    latency_table: str | None = opt(None, "`lvbert search latency-table` output for the supernet's size and the "
                                          "search's device", metavar="T.json")
    pareto: bool = opt(False, "with --latency-table: write pareto.json/pareto.png, the front of inherited score vs "
                              "predicted latency over the evaluated candidates")
