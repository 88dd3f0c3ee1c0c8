"""`LVBertEvolutionTuner`: LV-BERT Algorithm 1 as an NNI tuner, for `nnictl create --config experiments/search.yml`.

The same `algorithm.Algorithm1` as the in-process strategy; this class only adapts it to the tuner protocol:

- `update_search_space` receives the nnictl search space (one `choice` per slot, `lvbert search space-json`);
- `generate_parameters` hands out the next candidate. Between generations Algorithm 1 must wait until every
  candidate of the current generation is scored; requests arriving then are remembered and answered through the
  dispatcher's send-trial callback as soon as the next generation exists (several trials can run concurrently);
- `receive_trial_result` / `trial_end` feed scores (a failed trial counts as evaluated, without a score);
- `import_data` (e.g. `nnictl experiment import`) supplies known scores: those candidates are never run again.

classArgs: population, iterations, topk, crossover, mutation, mutation_prob, seed, and optionally max_params /
max_flops with `supernet` (a run directory; only its space.yaml and model_config.json are read).
"""
from __future__ import annotations

import logging
from collections import deque

import nni
from nni.tuner import Tuner
from nni.utils import extract_scalar_reward

from .algorithm import Algorithm1, EvolutionConfig

_logger = logging.getLogger(__name__)


def _constraint(supernet, max_params, max_flops):
    if max_params is None and max_flops is None:
        return None
    import json
    from pathlib import Path

    import yaml

    from ..config import ModelConfig, SpaceSpec
    from ..errors import UserError
    from .cost import CostModel

    if not supernet:
        raise UserError("max_params / max_flops need the `supernet` class argument (a run directory)")
    run = Path(supernet)
    spec = SpaceSpec(**yaml.safe_load((run / "space.yaml").read_text()))
    cfg = ModelConfig.from_dict(json.loads((run / "model_config.json").read_text()))
    accept = CostModel(cfg, spec).constraint(max_params, max_flops)
    labels = [f"layer{i:02d}" for i in range(spec.slots)]
    return lambda arch: accept([arch[label] for label in labels])


class LVBertEvolutionTuner(Tuner):
    def __init__(self, population: int = 50, iterations: int = 20, topk: int = 10, crossover: int = 25,
                 mutation: int = 25, mutation_prob: float = 0.1, seed: int = 0, optimize_mode: str = "maximize",
                 max_params: int | None = None, max_flops: int | None = None, supernet: str | None = None):
        if optimize_mode != "maximize":
            raise ValueError("LVBertEvolutionTuner maximises the MLM accuracy; optimize_mode must be 'maximize'")
        self.config = EvolutionConfig(population=population, iterations=iterations, topk=topk, crossover=crossover,
                                      mutation=mutation, mutation_prob=mutation_prob)
        self.config.validate()
        self.seed = seed
        self.accept = _constraint(supernet, max_params, max_flops)
        self.algorithm: Algorithm1 | None = None
        self.running: dict[int, dict] = {}  # parameter id -> arch
        self.owed: deque[int] = deque()  # parameter ids requested while the algorithm had nothing to hand out
        self.known: dict[tuple, float | None] = {}  # imported scores
        self.send_trial_callback = None

    # -- search space
    def update_search_space(self, search_space: dict) -> None:
        choices = {}
        for label, spec in sorted(search_space.items()):
            if not isinstance(spec, dict) or spec.get("_type") != "choice":
                raise ValueError(f"LVBertEvolutionTuner supports only `choice` parameters; {label!r} is {spec!r}")
            choices[label] = list(spec["_value"])
        if self.algorithm is not None and self.algorithm.labels == list(choices) and \
                self.algorithm.values == list(choices.values()):
            return  # the same space again (e.g. after a resume): keep the search going
        self.algorithm = Algorithm1(choices, self.config, seed=self.seed, accept=self.accept)

    # -- parameters
    def _next(self) -> dict | None:
        """Next candidate to run; known (imported) candidates are told at once instead of being run again."""
        algo = self.algorithm
        while True:
            arch = algo.ask()
            if arch is None:
                return None
            key = algo.key(arch)
            if key in self.known:
                algo.tell(key, self.known[key])
                continue
            return arch

    def generate_parameters(self, parameter_id: int, **kwargs) -> dict:
        if self.algorithm is None:
            raise RuntimeError("the search space was not set")
        if self.owed:  # keep request order: earlier waiting requests are served first
            self.owed.append(parameter_id)
            raise nni.NoMoreTrialError("waiting for the current generation to be scored")
        arch = self._next()
        if arch is None:
            if not self.algorithm.finished:
                self.owed.append(parameter_id)
            raise nni.NoMoreTrialError("waiting for the current generation to be scored"
                                       if not self.algorithm.finished else "Algorithm 1 budget exhausted")
        self.running[parameter_id] = arch
        return arch

    def generate_multiple_parameters(self, parameter_id_list, **kwargs):
        if "st_callback" in kwargs:
            self.send_trial_callback = kwargs["st_callback"]
        result = []
        for i, parameter_id in enumerate(parameter_id_list):
            try:
                result.append(self.generate_parameters(parameter_id, **kwargs))
            except nni.NoMoreTrialError:
                # the dispatcher pairs results with ids by position: everything after a miss is owed too
                for later in parameter_id_list[i + 1:]:
                    if not self.algorithm.finished:
                        self.owed.append(later)
                break
        return result

    def _pay_debts(self) -> None:
        while self.owed and self.send_trial_callback is not None:
            arch = self._next()
            if arch is None:
                if self.algorithm.finished:
                    self.owed.clear()
                return
            parameter_id = self.owed.popleft()
            self.running[parameter_id] = arch
            self.send_trial_callback(parameter_id, arch)

    # -- results
    def receive_trial_result(self, parameter_id: int, parameters: dict, value, **kwargs) -> None:
        arch = self.running.pop(parameter_id, None)
        if arch is None:
            _logger.warning("result for unknown parameter id %s ignored", parameter_id)
            return
        self.algorithm.tell(arch, extract_scalar_reward(value))
        self._pay_debts()

    def trial_end(self, parameter_id: int, success: bool, **kwargs) -> None:
        arch = self.running.pop(parameter_id, None)
        if arch is not None:  # ended without a final result: evaluated, but no score
            self.algorithm.tell(arch, None)
        self._pay_debts()

    def import_data(self, data) -> None:
        for record in data or []:
            params, value = record.get("parameter"), record.get("value")
            if not isinstance(params, dict) or value is None:
                continue
            labels = self.algorithm.labels if self.algorithm else sorted(params)
            try:
                key = tuple(params[label] for label in labels)
            except KeyError:
                continue
            self.known[key] = extract_scalar_reward(value)

    def best(self):
        return self.algorithm.best() if self.algorithm else None
