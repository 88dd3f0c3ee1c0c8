"""The metrics of a stored stand-alone model on validation tokens, kept beside it (`Validation`): each model scored
once per validation set, whichever study, search or process asks.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from ..arch import parse_arch
from ..atomic import write_json
from ..cost import scoring_minutes
from ..rundir import META, RunDir
from ..safeio import read_json
from .store import log, one_process_each

ALL_TOKENS = 10**9  # --val-tokens default: the whole validation split


def mlm_model(run_path: Path):
    """The MLM model of a finished pre-training run (ELECTRA: its generator), weights loaded, eval mode."""
    from ..pretrain.objectives import build_objective
    from ..pretrain.train import WEIGHTS

    run = RunDir(run_path, "pretrain")
    run.require([WEIGHTS, "model_config.json", "arch.json", META])
    meta = run.meta
    gen = meta.get("generator_config")
    fraction = gen["hidden_size"] / run.cfg.hidden_size if gen else 0.25
    model = build_objective(meta["objective"], run.cfg, parse_arch(run.read_json("arch.json")["compact"]),
                            sop=bool(meta.get("sop")), generator_fraction=fraction)
    run.load_weights(model, WEIGHTS, "its model_config.json")
    model.eval()
    return model.mlm if meta["objective"] == "mlm" else model.generator


def standalone_accuracy(run_path: Path, batches) -> float:
    """MLM accuracy of a stand-alone model on the given fixed-masked validation batches (data.validation's)."""
    from ..data.validation import model_accuracy

    return model_accuracy(mlm_model(run_path).to(batches[0].input_ids.device), batches)


def standalone_metrics(run_path: Path, batches) -> dict:
    """MLM accuracy and loss with standard errors of a stand-alone model (`data.validation.model_metrics`)."""
    from ..data.validation import model_metrics

    return model_metrics(mlm_model(run_path).to(batches[0].input_ids.device), batches)


SCORES = "scores"  # a stored model's metrics, one file per validation set: scores/<Validation.key()>.json


@dataclass
class Validation:
    """Validation batches and what identifies them (data, masking, data seed, token counts: a scorer's val_stats).
    A finished model's metrics on them are kept in its run directory (scores/<key>.json), so every study and
    process sharing the store scores a model once per validation set; a model re-trained from scratch loses its
    directory, scores included."""

    batches: list
    identity: dict

    @classmethod
    def of(cls, batches: list, stats: dict, data_seed: int) -> Validation:
        """Batches loaded by `validation_batches` (or a scorer: its `val_stats`) with the masking's data seed."""
        return cls(batches, {**stats, "data_seed": data_seed})

    @classmethod
    def load(cls, data_path: str, cfg, val_tokens: int, masking: str, data_seed: int) -> Validation:
        """The validation set of `validation_batches`."""
        batches, stats = validation_batches(data_path, cfg, val_tokens, masking=masking, data_seed=data_seed)
        return cls.of(batches, stats, data_seed)

    def key(self) -> str:
        blob = json.dumps({**self.identity, "data": str(Path(self.identity["data"]).resolve())}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]

    def _file(self, run_path: Path) -> Path:
        return run_path / SCORES / f"{self.key()}.json"

    def metrics(self, run_path: Path) -> dict:
        """`standalone_metrics` of a finished model, computed once (kept in its directory)."""
        path = self._file(run_path)
        if path.is_file():
            return read_json(path)["metrics"]
        start = time.perf_counter()
        m = standalone_metrics(run_path, self.batches)
        write_json(path, {"validation": self.identity, "metrics": m,
                          "core_minutes": scoring_minutes(time.perf_counter() - start)})
        return m

    def core_minutes(self, paths: list[Path]) -> float:
        """What scoring these models cost, whoever scored them (kept with their metrics)."""
        return sum(read_json(self._file(p)).get("core_minutes", 0.0) for p in paths)

    def metrics_all(self, paths: list[Path], what: str = "") -> list[dict]:
        """`metrics` of every model, split with any other process scoring the same models (`one_process_each`)."""
        def work(item):
            i, path = item
            if not self._file(path).is_file():
                log(f"[{i + 1}/{len(paths)}] scoring {what}{path.name} on {len(self.batches)} validation batches")
                self.metrics(path)

        one_process_each(list(enumerate(paths)), lambda item: item[1].parent / f".{item[1].name}.score.lock", work,
                         skip=lambda item: self._file(item[1]).is_file())
        return [self.metrics(p) for p in paths]


def validation_batches(data_path: str, cfg, val_tokens: int, masking: str = "fixed", data_seed: int = 0):
    """The validation batches every compared model is scored on (the first `val_tokens` tokens; `masking` as
    `data.validation.load_val_batches`)."""
    from ..data.validation import load_val_batches

    return load_val_batches(data_path, val_tokens, 64, cfg.pad_token_id, cfg.vocab_size, cfg.max_position,
                            masking=masking, data_seed=data_seed)
