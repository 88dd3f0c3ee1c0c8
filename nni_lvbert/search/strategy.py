"""NNI multi-trial strategies over the trained supernet, run in process under `NasExperiment`.

- `LVBertEvolution`: NNI `Strategy` adapter of `algorithm.Algorithm1` (LV-BERT Algorithm 1).
- `regularized-evolution`: NNI's `RegularizedEvolution` (population P, tournaments of k, per-slot mutation p).
- `random`: NNI's `Random` (the paper's "randomly searched" baseline).

All get the same evaluation budget (`EvolutionConfig.budget`, enforced by the engine's max model count) and run on
the sequential execution engine with `SupernetEvaluator`, which scores each frozen sample in process through a
`SupernetScorer` (no model instantiation: `_execute` reads `model.sample`). Constraints: Algorithm 1 filters its own
candidates; the NNI strategies are chained with NNI's `Filter` middleware, so rejected candidates are never scored.

NNI speaks dicts ({"layer00": "dc", ...}); here each is turned into an `Arch` once (`Arch.from_dict`), and the
evaluator's score function and the constraint see only that Arch.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

import nni
from nni.nas.evaluator import Evaluator
from nni.nas.execution import ExecutionEngine
from nni.nas.execution.event import ModelEvent, ModelEventType
from nni.nas.space import ExecutableModelSpace, ModelStatus
from nni.nas.strategy.base import Strategy

from ..arch import Arch
from ..nni_compat import run_nas_experiment, strategy_interrupted
from .algorithm import Algorithm1, EvolutionConfig
from .defaults import STRATEGIES

_logger = logging.getLogger(__name__)



class LVBertEvolution(Strategy):
    """LV-BERT Algorithm 1 as an NNI strategy. `accept(arch) -> bool` is an optional constraint."""

    def __init__(self, config: EvolutionConfig | None = None, seed: int = 0,
                 accept: Callable[[Arch], bool] | None = None):
        super().__init__()
        self.config = config or EvolutionConfig()
        self.config.validate()
        self.seed = seed
        self.accept = accept
        self.algorithm: Algorithm1 | None = None
        self._running: dict[Arch, ExecutableModelSpace] = {}
        self._state: dict | None = None

    def extra_repr(self) -> str:
        c = self.config
        return (f"population={c.population}, iterations={c.iterations}, topk={c.topk}, crossover={c.crossover}, "
                f"mutation={c.mutation}, mutation_prob={c.mutation_prob}, seed={self.seed}")

    def _initialize(self, model_space: ExecutableModelSpace, engine: ExecutionEngine) -> ExecutableModelSpace:
        choices = {label: list(m.values) for label, m in model_space.simplify().items()}
        accept = (lambda sample: self.accept(Arch.from_dict(sample))) if self.accept else None
        self.algorithm = Algorithm1(choices, self.config, seed=self.seed, accept=accept)
        if self._state is not None:
            self.algorithm.load_state_dict(self._state)
        engine.register_model_event_callback(ModelEventType.TrainingEnd, self._training_end)
        return model_space

    def _cleanup(self) -> None:
        self.engine.unregister_model_event_callback(ModelEventType.TrainingEnd, self._training_end)

    @property
    def iteration(self) -> int:
        """Generation of the candidate being evaluated (LV-BERT Figure 3's x axis)."""
        return self.algorithm.generation if self.algorithm else 0

    def _run(self) -> None:
        algo = self.algorithm
        while not algo.finished:
            arch = algo.ask()
            if arch is None:  # a concurrent engine still runs part of the generation
                time.sleep(0.05)
                continue
            if not self.wait_for_resource():
                _logger.info("budget exhausted")
                break
            model = self.model_space.freeze(arch)
            self._running[algo.key(arch)] = model
            self.engine.submit_models(model)
        self.engine.wait_models()

    def _training_end(self, event: ModelEvent) -> None:
        model = event.model
        key = self.algorithm.key(model.sample)
        if self._running.get(key) is not model:
            return
        del self._running[key]
        metric = model.metric if event.status == ModelStatus.Trained else None
        self.algorithm.tell(key, metric)

    def best(self) -> tuple[dict, float] | None:
        return self.algorithm.best() if self.algorithm else None

    def state_dict(self) -> dict:
        return self.algorithm.state_dict() if self.algorithm else (self._state or {})

    def load_state_dict(self, state_dict: dict) -> None:
        if self.algorithm is not None:
            self.algorithm.load_state_dict(state_dict)
        else:
            self._state = state_dict


class SampleEvaluator(Evaluator):
    """Scores each frozen sample in process as `score(sample dict)`; never builds a model."""

    def __init__(self, score: Callable[[dict], float]):
        self.score = score

    def _execute(self, model) -> float:
        value = self.score(dict(model.sample))
        nni.report_final_result(value)
        return value


class SupernetEvaluator(SampleEvaluator):
    """Scores a frozen sample in process with inherited supernet weights as `score(arch)`; never builds a model
    (NNI 3.0's private `Evaluator._execute` is overridden: see nni_compat)."""

    def __init__(self, score: Callable[[Arch], float]):
        super().__init__(lambda sample: score(Arch.from_dict(sample)))


def make_strategy(name: str, config: EvolutionConfig, seed: int, accept: Callable[[Arch], bool] | None = None):
    """A strategy by name, sized to `config.budget` evaluations (the engine enforces the budget); `accept(arch)` is
    an optional constraint (e.g. `CostModel.constraint`)."""
    if name == "evolution":
        return LVBertEvolution(config, seed=seed, accept=accept)
    if name == "regularized-evolution":
        from nni.nas.strategy import RegularizedEvolution

        strategy = RegularizedEvolution(population_size=config.population,
                                        sample_size=max(1, min(config.topk, config.population)),
                                        mutation_prob=config.mutation_prob, crossover=False, dedup=True, seed=seed)
    elif name == "random":
        from nni.nas.strategy import Random

        strategy = Random(dedup=True, seed=seed)
    else:
        raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")
    if accept is None:
        return strategy
    from nni.nas.strategy.middleware import Chain, Filter

    return Chain(strategy, Filter(lambda model: accept(Arch.from_dict(model.sample)),
                                  patience=config.max_rejections, retain_history=False))


def run_strategy(space, strategy, evaluator: SupernetEvaluator, budget: int, workdir):
    """Run `strategy` on the mutated supernet `space` under NasExperiment (sequential engine, raw format); returns
    the stopped experiment."""
    from nni.nas.experiment import NasExperimentConfig

    config = NasExperimentConfig("sequential", "raw")
    config.max_trial_number = budget
    for name in ("nni", "nni.nas", "nni.experiment", "nni.runtime"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    exp = run_nas_experiment(space, evaluator, strategy, workdir, config)  # run() swallows KeyboardInterrupt
    if strategy_interrupted(strategy):
        raise KeyboardInterrupt
    return exp
