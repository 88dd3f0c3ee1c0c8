"""A study's stand-alone trainings as an NNI experiment: one nnictl trial per model of the model store.

    lvbert study ranking | iot | downstream --nnictl DIR [--trial-concurrency N] [the study's other options]

(`StandaloneStudyOptions`) builds the study's model specs exactly as the study itself does, trains nothing and
writes into DIR:

    standalone.yml          experiments/standalone.yml (trialConcurrency set): GridSearch over the model keys, the
                            local training service (commented: gpuIndices, maxTrialNumberPerGpu, a remote machine).
                            Kept when it exists, so the user's edits of the training service survive a rewrite.
    standalone_space.json   {"model": {"_type": "choice", "_value": [model keys]}}: one trial per key
    models.json             {"store": STORE, "models": {key: {"what": ..., "spec": Standalone fields}}} (absolute
                            paths: trials run in DIR, on any machine that mounts the store and the data there)
    bind_localhost.js       the web UI on 127.0.0.1 only: NODE_OPTIONS="--require $PWD/DIR/bind_localhost.js"

Each trial (`study/trial.py`) trains its key into the store with `store.train_standalone` and reports to NNI. Once
the experiment is done, the same study command without --nnictl finds every model finished and only trains the rest.
The models per study (its plan's `standalone()`, `driver.Plan`: the plan the study's in-process path runs, so both
give the same keys):

    ranking     the ground truth's orders x seeds, then each `short:N` ranker's models; `rerank:K:N` models depend
                on the first stage's scores: the study trains those
    iot         every seed's M orders stand-alone (the baseline); IOT's own runs stay in the study's process
    downstream  every arch x pre-training seed; the fine-tunings stay in the study's process

The study directory (--out) is not written: orders are drawn from --seed as the study draws them (with --resume,
the study directory's stored options and orders are used).
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ..atomic import copy_file, write_json, write_text
from ..errors import UserError
from ..standalone.store import Standalone
from .common import Budget, log

CONFIG = "standalone.yml"  # the shipped template's name (experiments/standalone.yml) and the written config's
SPACE = "standalone_space.json"
MODELS = "models.json"


def write_study_experiment(opts, specs: list[tuple[str, Standalone]]) -> dict:
    """A study's experiment (`StandaloneStudyOptions`: --nnictl DIR, --trial-concurrency) over its model store."""
    return write_experiment(Path(opts.nnictl), specs, opts.store(), opts.trial_concurrency)


def spec_json(spec: Standalone) -> dict:
    """A spec as models.json holds it: the data as an absolute path (the key resolves it anyway: same key)."""
    return {**dataclasses.asdict(spec), "data": str(Path(spec.data).resolve())}


def spec_from_json(values: dict) -> Standalone:
    return Standalone(**{**values, "budget": Budget(**values["budget"])})


def write_experiment(dest: Path, specs: list[tuple[str, Standalone]], store: Path, concurrency: int = 2) -> dict:
    """DIR/standalone.yml (unless there), DIR/standalone_space.json and DIR/models.json (see the module docstring);
    the summary: the config, how many models and how many of them the store has finished."""
    from ..resources import BIND_JS_FILE, EXPERIMENTS_DIR

    if concurrency < 1:
        raise UserError(f"--trial-concurrency must be at least 1, got {concurrency}")
    if dest.exists() and not dest.is_dir():
        raise UserError(f"{dest} exists and is not a directory")
    if not specs:
        raise UserError("no stand-alone trainings to write")
    models = {}
    for what, spec in specs:  # each key once, with its first description (the study trains it once too)
        models.setdefault(spec.dirname(), {"what": what, "spec": spec_json(spec)})
    config = dest / CONFIG
    try:
        write_json(dest / MODELS, {"store": str(store.resolve()), "models": models})
        write_json(dest / SPACE, {"model": {"_type": "choice", "_value": list(models)}})
        copy_file(BIND_JS_FILE, dest / BIND_JS_FILE.name)
        kept = config.is_file()
        if kept:
            log(f"kept {config} (edited or written before); trialConcurrency there is what counts")
        else:
            text = (EXPERIMENTS_DIR / CONFIG).read_text(encoding="utf-8")
            text, n = re.subn(r"(?m)^trialConcurrency: \d+$", f"trialConcurrency: {concurrency}", text)
            if n != 1:
                raise UserError(f"the shipped {CONFIG} has no trialConcurrency line (package damaged?)")
            write_text(config, text)
    except OSError as exc:
        raise UserError(f"cannot write into {dest}: {exc.strerror or exc}") from None
    finished = sum((store / key / "meta.json").is_file() for key in models)
    return {"config": str(config), "models": len(models), "finished": finished, "store": str(store),
            "kept_config": kept}
