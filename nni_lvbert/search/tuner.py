"""`LVBertEvolutionTuner`: LV-BERT Algorithm 1 as an NNI tuner, for `nnictl create --config experiments/search.yml`.

The same `algorithm.Algorithm1` as the in-process strategy; this class only adapts it to the tuner protocol:

- `update_search_space` receives the nnictl search space (one `choice` per slot, `lvbert search space-json`);
- `generate_parameters` hands out the next candidate. Between generations Algorithm 1 must wait until every
  candidate of the current generation is scored; requests arriving then are remembered and answered through the
  dispatcher's send-trial callback as soon as the next generation exists (several trials can run concurrently);
- `receive_trial_result` / `trial_end` feed scores (a failed trial counts as evaluated, without a score); a trial
  that fails before any trial reported a score stops the experiment with an error (`nni_compat.TunerGaveUp`):
  status ERROR instead of DONE over a thousand failed trials;
- `import_data` (e.g. `nnictl experiment import`) supplies known scores: those candidates are never run again;
- `nnictl resume`: NNI sends the finished trials' scores through `import_data` and the tuner replays Algorithm 1
  (seeded, so the same candidates come out) without running them again. NNI also re-runs the trials that were
  running when the experiment stopped, but its dispatcher tells the tuner nothing about them until their final
  result (and nothing at all if they fail); `nni_compat.watch_resumed_trials` adds the missing calls (the
  `resumed_trials` / `resumed_trial_end` hooks), so such a candidate is neither handed out a second time nor waited
  for forever.

The dispatcher calls the tuner from two threads (results and trial ends are separate queues): one lock.

classArgs: population, iterations, topk, crossover, mutation, mutation_prob, seed, and optionally max_params /
max_flops / max_latency_ms (with latency_table, latency_device: search/latency.py) with `supernet` (a run directory;
only its space.yaml and model_config.json are read).
"""
from __future__ import annotations

import functools
import logging
import threading
from collections import deque

import nni
from nni.tuner import Tuner
from nni.utils import extract_scalar_reward

from ..arch import Arch
from ..nni_compat import TunerGaveUp, stop_when_tuner_gives_up, watch_resumed_trials
from .algorithm import Algorithm1, EvolutionConfig

_D = EvolutionConfig()  # Algorithm 1's defaults, defined once (algorithm.EvolutionConfig)

_logger = logging.getLogger(__name__)


def _constraint(supernet, max_params, max_flops, max_latency_ms=None, latency_table=None, latency_device="cpu"):
    if max_params is None and max_flops is None and max_latency_ms is None:
        return None
    from ..errors import UserError
    from ..supernet.rundir import supernet_dir
    from .cost import CostModel
    from .latency import LatencySearch, both

    if not supernet:
        raise UserError("max_params / max_flops / max_latency_ms need the `supernet` class argument (a run directory)")
    run = supernet_dir(supernet)
    accept = CostModel(run.cfg, run.spec).constraint(max_params, max_flops)
    latency = LatencySearch.from_options(max_latency_ms, latency_table, False, run.cfg, run.spec, latency_device)
    accept = both(accept, latency and latency.accept)
    return lambda params: accept(Arch.from_dict(params))  # NNI's dict -> Arch


def _locked(method):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self.lock:
            return method(self, *args, **kwargs)
    return wrapper


class LVBertEvolutionTuner(Tuner):
    def __init__(self, population: int = _D.population, iterations: int = _D.iterations, topk: int = _D.topk,
                 crossover: int | None = None, mutation: int | None = None, mutation_prob: float = _D.mutation_prob,
                 seed: int = 0, optimize_mode: str = "maximize",
                 max_params: int | None = None, max_flops: int | None = None, supernet: str | None = None,
                 max_latency_ms: float | None = None, latency_table: str | None = None, latency_device: str = "cpu"):
        if optimize_mode != "maximize":
            raise ValueError("LVBertEvolutionTuner maximises the MLM accuracy; optimize_mode must be 'maximize'")
        self.config = EvolutionConfig(population=population, iterations=iterations, topk=topk, crossover=crossover,
                                      mutation=mutation, mutation_prob=mutation_prob)
        self.config.validate()
        self.seed = seed
        self.accept = _constraint(supernet, max_params, max_flops, max_latency_ms, latency_table, latency_device)
        self.algorithm: Algorithm1 | None = None
        self.running: dict[int, dict] = {}  # parameter id -> arch
        self.owed: deque[int] = deque()  # parameter ids requested while the algorithm had nothing to hand out
        self.known: dict[Arch, float | None] = {}  # imported scores
        self.resumed: dict[Arch, dict | None] = {}  # re-run by NNI after a resume -> arch once Algorithm 1 asks
        self.send_trial_callback = None
        self.lock = threading.RLock()
        self.results = 0  # final results received (a failure before the first one stops the experiment)
        watch_resumed_trials()  # NNI 3.0's dispatcher does not tell a tuner about re-run trials
        stop_when_tuner_gives_up()  # NNI 3.0 has no way for a tuner to end an experiment with an error

    # -- search space
    @_locked
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
        """Next candidate to run; known (imported) candidates are told at once instead of being run again, and
        candidates NNI is re-running after a resume wait for their result."""
        algo = self.algorithm
        while True:
            arch = algo.ask()
            if arch is None:
                return None
            key = algo.key(arch)
            if key in self.known:
                algo.tell(key, self.known[key])
                continue
            if key in self.resumed:
                self.resumed[key] = arch
                continue
            return arch

    @_locked
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

    @_locked
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
    @_locked
    def receive_trial_result(self, parameter_id: int, parameters: dict, value, **kwargs) -> None:
        self.results += 1
        arch = self.running.pop(parameter_id, None)
        if arch is None:
            _logger.warning("result for unknown parameter id %s ignored", parameter_id)
            return
        self.algorithm.tell(arch, extract_scalar_reward(value))
        self._pay_debts()

    @_locked
    def trial_end(self, parameter_id: int, success: bool, **kwargs) -> None:
        # Results and trial ends reach the tuner from two dispatcher threads, so a trial's end can arrive before its
        # result: a trial that succeeded keeps waiting for its result (the trial command always reports one).
        if success:
            return
        if not self.results and not self.known:  # e.g. no supernet: every trial would fail the same way
            raise TunerGaveUp("a trial failed before any trial reported a score, so the search stops")
        arch = self.running.pop(parameter_id, None)
        if arch is not None:  # failed without a final result: evaluated, but no score
            self.algorithm.tell(arch, None)
        self._pay_debts()

    def _key(self, params) -> Arch | None:
        """The Arch of NNI's parameters (None when they are not an architecture of the search space)."""
        if not isinstance(params, dict):
            return None
        labels = self.algorithm.labels if self.algorithm else sorted(params)
        try:
            return Arch(params[label] for label in labels)
        except KeyError:
            return None

    @_locked
    def import_data(self, data) -> None:
        for record in data or []:
            key, value = self._key(record.get("parameter")), record.get("value")
            if key is None or value is None:
                continue
            score = extract_scalar_reward(value)
            arch = self.resumed.pop(key, None)
            if arch is not None:  # a trial NNI re-ran after a resume, which Algorithm 1 is waiting for
                self.algorithm.tell(arch, score)
            else:
                self.known[key] = score
        self._pay_debts()

    @_locked
    def resumed_trials(self, parameters: list[dict]) -> None:
        """NNI re-runs these (they were running when the experiment stopped): never hand them out again."""
        for params in parameters:
            key = self._key(params)
            if key is not None and key not in self.known:
                self.resumed.setdefault(key, None)

    @_locked
    def resumed_trial_end(self, parameters: dict, success: bool) -> None:
        key = self._key(parameters)
        if success or key not in self.resumed:
            return  # its result arrives (or arrived) through import_data
        arch = self.resumed.pop(key)
        if arch is not None:  # failed without a result: evaluated, but no score
            self.algorithm.tell(arch, None)
        else:
            self.known[key] = None
        self._pay_debts()

    def best(self):
        return self.algorithm.best() if self.algorithm else None
