"""RandomOneShot whose sampled path is a function of (seed, global step).

NNI's RandomOneShot draws paths from an unseeded RandomState: runs are not reproducible, a resumed run
continues with different paths, and DDP ranks train different paths in the same step (each rank's gradient
then belongs to another architecture). Here every rank derives the same path from (seed, step), so a resumed
run replays exactly the path sequence of an uninterrupted one.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from nni.nas.oneshot.pytorch.sampling import RandomSamplingLightningModule
from nni.nas.strategy import RandomOneShot

VAL_STREAM = 1  # validation paths come from another stream than training paths


def sample_path(choices: dict[str, list], seed: int, step: int, stream: int = 0, attempt: int = 0) -> dict[str, Any]:
    """Uniform choice per label, fully determined by (seed, stream, step, attempt)."""
    rng = np.random.default_rng([seed, stream, step, attempt])
    return {label: values[int(rng.integers(len(values)))] for label, values in choices.items()}


class SeededSamplingModule(RandomSamplingLightningModule):
    def __init__(self, training_module, seed: int = 0, filter: Callable | None = None,  # noqa: A002
                 record_paths: bool = False):
        super().__init__(training_module, filter)
        self.seed = seed
        self.path_log: list[tuple[int, dict]] | None = [] if record_paths else None  # (step, path) per step

    def _choices(self) -> dict[str, list]:
        if getattr(self, "_choices_cache", None) is None:  # the space does not change during training
            self._choices_cache = {label: list(m.values) for label, m in self.model.simplify().items()}
        return self._choices_cache

    def sample(self, step: int, stream: int) -> dict[str, Any]:
        choices = self._choices()
        for attempt in range(self._sampling_patience):
            path = sample_path(choices, self.seed, step, stream, attempt)
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
        path = self.activate(self.sample(self.trainer.global_step, stream=0))
        if self.path_log is not None:
            self.path_log.append((self.trainer.global_step, path))
        return self.training_module.training_step(batch, batch_idx)

    # NNI forwards only some hooks to the training module; these two carry the exact validation accuracy.
    def on_validation_epoch_start(self):
        return self.training_module.on_validation_epoch_start()

    def on_validation_epoch_end(self):
        return self.training_module.on_validation_epoch_end()

    def validation_step(self, batch, batch_idx):
        # the same path for validation batch i in every validation run: curves are comparable over time
        self.activate(self.sample(batch_idx, stream=VAL_STREAM))
        return self.training_module.validation_step(batch, batch_idx)


class SeededRandomOneShot(RandomOneShot):
    """`RandomOneShot(seed=...)`: SPOS with reproducible, rank-consistent path sampling."""

    def __init__(self, seed: int = 0, filter=None, record_paths: bool = False, **kwargs) -> None:  # noqa: A002
        super().__init__(filter=filter, **kwargs)
        self.seed, self.record_paths = seed, record_paths

    def configure_oneshot_module(self, training_module) -> SeededSamplingModule:
        return SeededSamplingModule(training_module, seed=self.seed, filter=self.filter, record_paths=self.record_paths)
