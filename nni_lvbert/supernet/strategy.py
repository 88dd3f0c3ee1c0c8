"""SPOS's strategy: NNI's RandomOneShot with the sampled path a function of (seed, global step).

NNI 3.0's RandomOneShot draws paths from an unseeded RandomState: runs are not reproducible, a resumed run
continues with different paths, and DDP ranks train different paths in the same step (each rank's gradient then
belongs to another architecture). Here every rank derives the same path from (seed, step), so a resumed run replays
exactly the path sequence of an uninterrupted one. tests/test_nni_compat.py checks that NNI's own sampling is still
unseeded (when it is not, revisit this class).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nni.nas.oneshot.pytorch.sampling import RandomSamplingLightningModule
from nni.nas.strategy import RandomOneShot

# NNI 3.0's RandomOneShot samples through PathSamplingLayer.resample -> Categorical.random(), which draws from a fresh
# unseeded numpy RandomState: runs are not reproducible, a resumed run draws other paths, and DDP ranks train
# different paths in one step. SeededRandomOneShot (bottom) takes the path from (seed, global step) and forwards
# on_validation_epoch_start/end, which BaseOneShotLightningModule does not. It uses RandomSamplingLightningModule's
# `filter`, `_sampling_patience`, `_sampling_attempt` and `supernet_modules()`.
# Drop when: RandomOneShot's path is a function of (seed, step) and the two hooks are forwarded.
VAL_STREAM = 1  # validation paths come from another stream than training paths
FAIR_STREAM = 2  # FairNAS permutations
SAMPLINGS = ("spos", "fair")


def sample_path(choices: dict[str, list], seed: int, step: int, stream: int = 0, attempt: int = 0) -> dict[str, Any]:
    """Uniform choice per label, fully determined by (seed, stream, step, attempt)."""
    import numpy as np

    rng = np.random.default_rng([seed, stream, step, attempt])
    return {label: values[int(rng.integers(len(values)))] for label, values in choices.items()}


def fair_paths(choices: dict[str, list], seed: int, step: int) -> list[dict[str, Any]]:
    """FairNAS strict fairness (Chu et al., ICCV 2021): m paths (m = the choices per slot) where each slot's m
    choices are a random permutation of its candidates, so every choice of every slot is in exactly one path.
    Determined by (seed, step), like `sample_path`."""
    import numpy as np

    sizes = {len(values) for values in choices.values()}
    if len(sizes) != 1:
        raise ValueError(f"fair sampling needs the same number of choices in every slot, got {sorted(sizes)}")
    rng = np.random.default_rng([seed, FAIR_STREAM, step])
    perms = {label: rng.permutation(len(values)) for label, values in choices.items()}
    return [{label: values[int(perms[label][k])] for label, values in choices.items()} for k in range(sizes.pop())]


class SeededSamplingModule(RandomSamplingLightningModule):
    """sampling: `spos` trains one uniform path per step; `fair` accumulates the gradients of the m paths of
    `fair_paths` on the same batch, then takes one optimiser step (FairNAS)."""

    def __init__(self, training_module, seed: int = 0, filter: Callable | None = None,
                 record_paths: bool = False, sampling: str = "spos", fixed: dict[str, Any] | None = None):
        super().__init__(training_module, filter)
        if sampling not in SAMPLINGS:
            raise ValueError(f"unknown sampling {sampling!r}")
        if sampling == "fair" and (filter is not None or fixed):
            raise ValueError("fair sampling trains every choice each step: it takes no path filter or fixed slot")
        self.seed, self._choices, self.sampling = seed, None, sampling
        self.fixed = dict(fixed or {})  # few-shot sub-supernets: these slots always take these choices
        self.path_log: list[tuple[int, dict]] | None = [] if record_paths else None  # (step, path) per path

    def choices(self) -> dict[str, list]:
        if self._choices is None:  # the space does not change during training
            self._choices = {label: list(m.values) for label, m in self.model.simplify().items()}
        return self._choices

    def sample(self, step: int, stream: int) -> dict[str, Any]:
        choices = self.choices()
        for attempt in range(self._sampling_patience):
            path = {**sample_path(choices, self.seed, step, stream, attempt), **self.fixed}
            if self.filter is None or self.filter(path):
                self._sampling_attempt = attempt + 1
                return path
        raise RuntimeError(f"no path satisfying the filter after {self._sampling_patience} draws")

    def activate(self, path: dict[str, Any]) -> dict[str, Any]:
        result = dict(path)
        for module in self.supernet_modules():
            result.update(module.resample(memo=result))
        return result

    def training_step(self, batch, batch_idx):
        step = self.trainer.global_step
        paths = (fair_paths(self.choices(), self.seed, step) if self.sampling == "fair"
                 else [self.sample(step, stream=0)])
        outputs = []
        for path in paths:  # fair: m graphs, one backward (the sum of their losses), one optimiser step
            path = self.activate(path)
            if self.path_log is not None:
                self.path_log.append((step, path))
            outputs.append(self.training_module(batch))
        return self.training_module.training_loss(outputs, batch)

    def validation_step(self, batch, batch_idx):
        # the same path for validation batch i in every validation run: curves are comparable over time
        self.activate(self.sample(batch_idx, stream=VAL_STREAM))
        return self.training_module.validation_step(batch, batch_idx)

    def on_validation_epoch_start(self):
        return self.training_module.on_validation_epoch_start()

    def on_validation_epoch_end(self):
        return self.training_module.on_validation_epoch_end()

class SeededRandomOneShot(RandomOneShot):
    """`RandomOneShot(seed=...)`: SPOS with reproducible, rank-consistent path sampling."""

    def __init__(self, seed: int = 0, filter=None, record_paths: bool = False, sampling: str = "spos",
                 fixed: dict | None = None, **kwargs) -> None:
        super().__init__(filter=filter, **kwargs)
        self.seed, self.record_paths, self.sampling, self.fixed = seed, record_paths, sampling, fixed

    def configure_oneshot_module(self, training_module) -> SeededSamplingModule:
        return SeededSamplingModule(training_module, seed=self.seed, filter=self.filter,
                                    record_paths=self.record_paths, sampling=self.sampling, fixed=self.fixed)
