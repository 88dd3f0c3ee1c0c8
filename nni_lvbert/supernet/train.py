"""Train the supernet: NasExperiment(space, Lightning evaluator, SeededRandomOneShot).

Every step samples one layer type per slot (SPOS, LV-BERT §3.2) from (seed, global step), so the run is
reproducible, resumable with the same future paths, and DDP ranks agree on the path.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

from ..errors import UserError
from ..training import (TrainOptions, TrialReporter, apply_tuner_parameters, build_trainer, check_positive,
                        in_nni_trial, launcher_is_rank_zero, parse_devices, run_nas_experiment, state_digest)

@dataclass
class SupernetOptions(TrainOptions):
    # LV-BERT Table 5 for the paper sizes; `tiny` is sized for ~10 minutes on 2 CPU cores.
    PRESETS: ClassVar[dict[str, dict]] = {
        "paper": dict(lr=2e-4, warmup_steps=10_000, max_steps=2_000_000, batch_size=128, dropout=0.1,
                      val_every=10_000, val_batches=100, ckpt_every=5_000),
        "tiny": dict(lr=2e-3, warmup_steps=100, max_steps=1_500, batch_size=32, dropout=0.0,
                     val_every=250, val_batches=20, ckpt_every=100),
    }

    run_dir: str = "runs/supernet"
    space: str = "lvbert"
    sharing: str | None = None
    record_paths: bool = False  # write ranks/rank<r>.json with every sampled path and a weight digest


# options an nnictl tuner may set in a supernet trial (values kept as sent)
TUNABLE = dict.fromkeys(("lr", "warmup_steps", "max_steps", "batch_size", "dropout", "weight_decay", "seed"))


def validation_callback(history: list, reporter: TrialReporter | None):
    import pytorch_lightning as pl

    class ValidationReport(pl.Callback):
        """Keeps the validation curve for meta.json and reports it to nnictl when running as a trial."""

        def on_validation_end(self, trainer, pl_module):
            if trainer.sanity_checking or "val_mlm_acc" not in trainer.callback_metrics:
                return
            acc = float(trainer.callback_metrics["val_mlm_acc"])
            history.append({"step": trainer.global_step, "val_mlm_acc": acc,
                            "val_loss": float(trainer.callback_metrics["val_loss"])})
            if trainer.is_global_zero and reporter is not None:
                reporter.intermediate(acc)

    return ValidationReport()


def train_supernet(opts: SupernetOptions) -> dict:
    import pytorch_lightning as pl
    from nni.nas.evaluator.pytorch import Lightning

    from ..config import load_size, load_space
    from ..data import MLMDataModule, prepare
    from ..space import LVBertSpace
    from . import rundir
    from .lightning_module import MLMModule
    from .strategy import SeededRandomOneShot

    reporter = None
    if in_nni_trial():
        apply_tuner_parameters(opts, TUNABLE, "supernet")
        reporter = TrialReporter()  # before NasExperiment swaps NNI's trial channel
    run_dir = Path(opts.run_dir)
    spec = load_space(opts.space)
    opts.size = opts.size or spec.size
    cfg = load_size(opts.size, dropout=opts.resolved("dropout"), attention_dropout=opts.resolved("dropout"),
                    sharing=opts.sharing)
    max_steps, batch_size = opts.resolved("max_steps"), opts.resolved("batch_size")
    check_positive(max_steps=max_steps, batch_size=batch_size, val_every=opts.resolved("val_every"),
                   val_batches=opts.resolved("val_batches"), ckpt_every=opts.resolved("ckpt_every"))
    devices, n_dev = parse_devices(opts.devices, batch_size)

    if launcher_is_rank_zero():
        rundir.prepare_run_dir(run_dir, opts.resume, opts.overwrite)
    pl.seed_everything(opts.seed, workers=True, verbose=False)

    data = prepare(corpus=opts.corpus, size=opts.size, vocab_size=None if opts.tokenizer else cfg.vocab_size,
                   max_length=cfg.max_length, tokenizer=opts.tokenizer, val_fraction=opts.val_fraction,
                   seed=opts.seed, cache_dir=opts.cache_dir, max_docs=opts.max_docs)
    cfg.vocab_size = data.vocab_size  # a given tokenizer decides the vocabulary
    if launcher_is_rank_zero():
        rundir.save_static(run_dir, spec, cfg, data.tokenizer_dir)
    dm = MLMDataModule(data, batch_size=batch_size // n_dev, seed=opts.seed, num_workers=opts.num_workers)

    space = LVBertSpace(spec, cfg)
    module = MLMModule(lr=opts.resolved("lr"), warmup_steps=opts.resolved("warmup_steps"), max_steps=max_steps,
                       weight_decay=opts.weight_decay)
    history: list[dict] = []
    trainer, precision = build_trainer(
        run_dir, max_steps=max_steps, devices=devices, n_devices=n_dev, accelerator=opts.accelerator,
        strategy=opts.strategy, precision=opts.precision, val_every=opts.resolved("val_every"),
        val_batches=opts.resolved("val_batches"), ckpt_every=opts.resolved("ckpt_every"),
        callbacks=[validation_callback(history, reporter)], progress=opts.progress)
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    evaluator = Lightning(module, trainer, datamodule=dm,
                          fit_kwargs={"ckpt_path": str(ckpt)} if opts.resume else None)
    oneshot = SeededRandomOneShot(seed=opts.seed, record_paths=opts.record_paths)

    previous = json.loads((run_dir / "meta.json").read_text()) if opts.resume and (run_dir / "meta.json").is_file() else {}
    start = time.time()
    run_nas_experiment(space, evaluator, oneshot, run_dir)

    if opts.record_paths:
        _record_rank(run_dir, trainer, space, trainer.lightning_module.path_log)
    if not trainer.is_global_zero:
        return {}
    rundir.save_weights(run_dir, space)
    meta = {
        "run_dir": str(run_dir),
        "space": spec.to_dict(),
        "size": opts.size,
        "seed": opts.seed,
        "steps": trainer.global_step,
        "train_seconds": previous.get("train_seconds", 0.0) + (time.time() - start),
        "validation": previous.get("validation", []) + history,
        "final_val_mlm_acc": history[-1]["val_mlm_acc"] if history else previous.get("final_val_mlm_acc"),
        "data": {"path": str(data.path), "settings": data.settings, "stats": data.stats},
        "tokenizer": "tokenizer",
        "options": asdict(opts),
        "world_size": trainer.world_size,
        "precision": precision,
    }
    rundir.write_json_atomic(run_dir / "meta.json", meta)
    if reporter is not None and meta["final_val_mlm_acc"] is not None:
        reporter.final(meta["final_val_mlm_acc"])
    return meta


def _record_rank(run_dir: Path, trainer, space, path_log) -> None:
    from ..arch import to_compact
    from .rundir import write_json_atomic

    write_json_atomic(run_dir / "ranks" / f"rank{trainer.global_rank}.json", {
        "rank": trainer.global_rank,
        "paths": [[step, to_compact([path[k] for k in sorted(path)])] for step, path in path_log],
        "weights_sha256": state_digest(space),
    })
