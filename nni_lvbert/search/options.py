"""The search's option groups: what `lvbert search run` and `lvbert run` both offer (one field each)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .. import layout
from ..options import opt
from ..threads import HELP as THREADS_HELP
from .algorithm import EvolutionConfig
from .defaults import BATCH_SIZE, VAL_TOKENS


@dataclass(frozen=True)
class ScoringOptions:
    """How candidates are scored on a supernet's validation split (`search run`, `search score`)."""

    GROUP: ClassVar[str] = "scoring"

    supernet: str = opt(layout.SUPERNET, "supernet run directory", group="")
    val_tokens: int = opt(VAL_TOKENS, "validation tokens per candidate")
    batch_size: int = opt(BATCH_SIZE, "validation sequences per batch")
    data: str | None = opt(None, "prepared data directory (default: the one in the supernet's meta.json)")
    # not a search setting: a search may resume elsewhere
    device: str = opt("auto", "auto (GPU if visible) | cpu | cuda[:N] | mps")


@dataclass(frozen=True)
class ScoreOptions(ScoringOptions):
    """`lvbert search score`: one architecture."""

    arch: str | None = opt(None, "compact string, name, NNI dict JSON or best_arch.json (required)", group="")
    val_masking: str = opt("fixed", "fixed: the split's fixed 15 %% masking (default, the search's); full: every "
                                    "token masked once over 7 disjoint rounds (7x the time, about 2.6x smaller "
                                    "standard errors)", choices=["fixed", "full"], group="")
    proxy: str | None = opt(None, "score with a zero-cost proxy of a freshly initialised model at the supernet's "
                                  "shape instead of inherited weights: grad-norm | snip | synflow", metavar="NAME",
                            group="")
    seed: int = opt(0, "initialisation seed of --proxy's model", group="")
    threads: int | None = opt(None, THREADS_HELP, group="")


@dataclass(frozen=True)
class LatencyTableOptions:
    """`lvbert search latency-table`: per-layer-type latency on this device."""

    size: str = opt("small", "model size (sizes.yaml)")
    device: str = opt("cpu", "cpu | cuda[:N] (bf16 on a GPU)")
    batch: int = opt(1, "sequences per forward")
    seq: int = opt(128, "tokens per sequence")
    repeats: int = opt(50, "timed calls per part; the median is kept")
    warmup: int = opt(10, "untimed calls per part first")
    threads: int | None = opt(None, THREADS_HELP)
    out: str | None = opt(None, "add the table to this file (one table per device type and torch version)",
                          metavar="T.json")


@dataclass(frozen=True)
class StrategyOptions:
    """Which strategies search, with Algorithm 1's budget (every strategy gets the same)."""

    strategies: list[str] = opt(
        help="search strategies: evolution (LV-BERT Algorithm 1), regularized-evolution, random (NNI); several run "
             "one after another into one plot", default_factory=lambda: ["evolution"], flag="--search",
        metavar="NAME", group="")
    evolution: EvolutionConfig = field(default_factory=EvolutionConfig)


@dataclass(frozen=True)
class RerankOptions:
    """Two-stage search: the supernet proposes, short stand-alone training decides (`search/rerank.py`)."""

    GROUP: ClassVar[str] = "two-stage search (the supernet proposes, short stand-alone training decides)"

    rerank: int = opt(0, "pre-train the K best distinct orders stand-alone and pick the best by MLM accuracy on the "
                         "whole validation split (default 0: off)", metavar="K")
    rerank_steps: int = opt(300, "stand-alone MLM steps per re-ranked order", metavar="N")


@dataclass(frozen=True)
class LatencyOptions:
    """A latency budget from a measured per-layer table (`search/latency.py`)."""

    GROUP: ClassVar[str] = "latency budget (`lvbert search latency-table`)"

    max_latency_ms: float | None = opt(None, "max predicted latency (ms) from --latency-table: embedding + the sum "
                                             "of the layers", metavar="X")
    latency_table: str | None = opt(None, "`lvbert search latency-table` output for the supernet's size and the "
                                          "search's device", metavar="T.json")
    pareto: bool = opt(False, "with --latency-table: write pareto.json/pareto.png, the front of inherited score vs "
                              "predicted latency over the evaluated candidates")


@dataclass(frozen=True)
class NnictlOptions(LatencyOptions):
    """`lvbert search nnictl [create|resume ID]`: the nnictl experiment (search.yml) and what it overrides."""

    GROUP: ClassVar[str] = "experiment"

    experiment_config: str | None = opt(None, "nnictl experiment config (default: the packaged search.yml)",
                                        metavar="FILE.yml")
    supernet: str = opt(layout.SUPERNET, "supernet run directory")
    port: int = opt(8080, "web UI / REST API port")
    host: str = opt("127.0.0.1", "interface for the web UI / REST API")
    max_trials: int | None = opt(None, "override maxTrialNumber")
    concurrency: int | None = opt(None, "override trialConcurrency")
    out: str | None = opt(None, "experiment working directory (default: the config's)", metavar="DIR")
    seed: int | None = opt(None, "override the tuner's seed")
    val_tokens: int | None = opt(None, f"validation tokens per trial (default {VAL_TOKENS})")
    trial_threads: int | None = opt(None, "torch CPU threads per trial (default: cores / trialConcurrency, or the "
                                          "trial's fair share when one trial runs at a time)")
    trial_gpus: int | None = opt(None, "GPUs per trial (trialGpuNumber); without it NNI hides the GPUs from trials, "
                                       "which then score on the CPU")
    population: int | None = opt(None, "override the config's tuner argument")
    iterations: int | None = opt(None, "override the config's tuner argument")
    topk: int | None = opt(None, "override the config's tuner argument")
    crossover: int | None = opt(None, "override the config's tuner argument")
    mutation: int | None = opt(None, "override the config's tuner argument")
    max_params: int | None = opt(None, "override the config's tuner argument")
    max_flops: int | None = opt(None, "override the config's tuner argument")
    mutation_prob: float | None = opt(None, "override the config's tuner argument")
    resume: str | None = None  # `resume ID`: the experiment to resume (the positional ID; no flag)


@dataclass(frozen=True)
class NnictlExportOptions:
    """`lvbert search export`: the best trial of an nnictl experiment -> best_arch.json."""

    experiment: str | None = opt(None, "experiment ID (nnictl experiment list --all)")
    experiment_dir: str | None = opt(None, "or the experiment's directory (holding db/nni.sqlite)")
    supernet: str | None = opt(None, "supernet run directory (default: from the trial command)")
    out: str = opt(layout.SEARCH_NNICTL, "directory to write best_arch.json into", metavar="DIR")

