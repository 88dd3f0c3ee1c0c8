"""Train the supernet: NasExperiment(space, Lightning evaluator, SeededRandomOneShot).

Every step samples one layer type per slot (SPOS, LV-BERT §3.2) from (seed, global step), so the run is
reproducible, resumable with the same future paths, and DDP ranks agree on the path.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .. import layout
from ..trainer import state_digest
from ..presets import presets
from ..training import TrainOptions, Training

WEIGHTS = "supernet.safetensors"


@dataclass
class SupernetOptions(TrainOptions):
    PRESETS: ClassVar[dict[str, dict]] = presets("supernet")  # LV-BERT Table 5; tiny: ~10 min on 2 CPU cores

    out: str = layout.SUPERNET
    space: str = "lvbert"
    sharing: str | None = None
    record_paths: bool = False  # write ranks/rank<r>.json with every sampled path and a weight digest


# options an nnictl tuner may set in a supernet trial (values kept as sent)
TUNABLE = dict.fromkeys(("lr", "warmup_steps", "max_steps", "batch_size", "dropout", "weight_decay", "seed"))


def train_supernet(opts: SupernetOptions) -> dict:
    from ..config import load_size, load_space
    from ..data import MLMDataModule
    from ..space import LVBertSpace
    from .lightning_module import MLMModule
    from .strategy import SeededRandomOneShot

    t = Training.begin(opts, "supernet", tunable=TUNABLE)
    opts = t.opts
    spec = load_space(opts.space)
    opts.size = opts.size or spec.size
    cfg = load_size(opts.size, dropout=opts.resolved("dropout"), attention_dropout=opts.resolved("dropout"),
                    sharing=opts.sharing)
    micro_batch = t.check()
    data = t.data(cfg)
    cfg.vocab_size = data.vocab_size  # a given tokenizer decides the vocabulary
    run = t.open(spec, cfg, data)
    dm = MLMDataModule(data, batch_size=micro_batch, seed=opts.seed, num_workers=opts.num_workers)
    space = LVBertSpace(spec, cfg)
    result = t.fit(MLMModule(**t.schedule()), dm, space=space,
                   strategy=SeededRandomOneShot(seed=opts.seed, record_paths=opts.record_paths))
    trainer = result.trainer
    if opts.record_paths:
        _record_rank(run, trainer, space, trainer.lightning_module.path_log)
    if not trainer.is_global_zero:
        return {}
    run.save_weights(space, WEIGHTS)
    final = t.history[-1]["val_mlm_acc"] if t.history else result.previous.get("final_val_mlm_acc")
    return t.finish(result, data, {"space": spec.to_dict(), "final_val_mlm_acc": final}, final=final)


def _record_rank(run, trainer, space, path_log) -> None:
    from ..arch import to_compact

    run.write_json(f"ranks/rank{trainer.global_rank}.json", {
        "rank": trainer.global_rank,
        "paths": [[step, to_compact([path[k] for k in sorted(path)])] for step, path in path_log],
        "weights_sha256": state_digest(space),
    })
