"""Train the supernet: NasExperiment(space, Lightning evaluator, SeededRandomOneShot).

Every step samples one layer type per slot (SPOS, LV-BERT §3.2) from (seed, global step), so the run is
reproducible, resumable with the same future paths, and DDP ranks agree on the path.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..training import (TrainOptions, TrialReporter, apply_tuner_parameters, begin, check_positive, common_meta,
                        fit, in_nni_trial, open_run, parse_devices, prepare_data, state_digest)

WEIGHTS = "supernet.safetensors"


@dataclass
class SupernetOptions(TrainOptions):
    # LV-BERT Table 5 for the paper sizes; `tiny` is sized for ~10 minutes on 2 CPU cores.
    PRESETS: ClassVar[dict[str, dict]] = {
        "paper": dict(lr=2e-4, warmup_steps=10_000, max_steps=2_000_000, batch_size=128, dropout=0.1,
                      val_every=10_000, val_batches=100, ckpt_every=5_000),
        "tiny": dict(lr=2e-3, warmup_steps=100, max_steps=1_500, batch_size=32, dropout=0.0,
                     val_every=250, val_batches=20, ckpt_every=100),
    }

    out: str = "runs/supernet"
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

    from ..config import load_size, load_space
    from ..data import MLMDataModule
    from ..space import LVBertSpace
    from .lightning_module import MLMModule
    from .strategy import SeededRandomOneShot

    reporter = None
    if in_nni_trial():
        apply_tuner_parameters(opts, TUNABLE, "supernet")
        reporter = TrialReporter()  # before NasExperiment swaps NNI's trial channel
    opts = begin(opts, "supernet")
    spec = load_space(opts.space)
    opts.size = opts.size or spec.size
    cfg = load_size(opts.size, dropout=opts.resolved("dropout"), attention_dropout=opts.resolved("dropout"),
                    sharing=opts.sharing)
    max_steps, batch_size = opts.resolved("max_steps"), opts.resolved("batch_size")
    check_positive(max_steps=max_steps, batch_size=batch_size, val_every=opts.resolved("val_every"),
                   val_batches=opts.resolved("val_batches"), ckpt_every=opts.resolved("ckpt_every"))
    _, n_dev = parse_devices(opts.devices, batch_size)

    run = open_run(opts, "supernet")
    pl.seed_everything(opts.seed, workers=True, verbose=False)
    data = prepare_data(opts, cfg)
    cfg.vocab_size = data.vocab_size  # a given tokenizer decides the vocabulary
    if run.is_rank_zero:
        run.save_static(spec, cfg, data.tokenizer_dir)
    dm = MLMDataModule(data, batch_size=batch_size // n_dev, seed=opts.seed, num_workers=opts.num_workers)

    space = LVBertSpace(spec, cfg)
    module = MLMModule(lr=opts.resolved("lr"), warmup_steps=opts.resolved("warmup_steps"), max_steps=max_steps,
                       weight_decay=opts.weight_decay)
    history: list[dict] = []
    result = fit(run, opts, module, dm, callbacks=[validation_callback(history, reporter)], history=history,
                 space=space, strategy=SeededRandomOneShot(seed=opts.seed, record_paths=opts.record_paths))
    trainer = result.trainer
    if opts.record_paths:
        _record_rank(run, trainer, space, trainer.lightning_module.path_log)
    if not trainer.is_global_zero:
        return {}
    run.save_weights(space, WEIGHTS)
    meta = {**common_meta(run, opts, result, data), "space": spec.to_dict(),
            "final_val_mlm_acc": history[-1]["val_mlm_acc"] if history else result.previous.get("final_val_mlm_acc")}
    run.write_json("meta.json", meta)
    if reporter is not None and meta["final_val_mlm_acc"] is not None:
        reporter.final(meta["final_val_mlm_acc"])
    return meta


def _record_rank(run, trainer, space, path_log) -> None:
    from ..arch import to_compact

    run.write_json(f"ranks/rank{trainer.global_rank}.json", {
        "rank": trainer.global_rank,
        "paths": [[step, to_compact([path[k] for k in sorted(path)])] for step, path in path_log],
        "weights_sha256": state_digest(space),
    })
