"""`lvbert iot train|eval`: instance-wise layer order (IOT) over M candidate orders sharing supernet weights."""
from __future__ import annotations

from dataclasses import dataclass

from ..layout import IOT
from ..options import opt


@dataclass(frozen=True)
class IOTEvalOptions:
    out: str = opt(IOT, "a finished `lvbert iot train` directory (eval.json is written there)", metavar="DIR")
    data: str | None = opt(None, "prepared data directory (default: the run's)", metavar="DIR")
    batch_size: int = opt(64, "validation sequences per batch")
    val_batches: int | None = opt(None, "only the first N validation batches")
    no_save: bool = opt(False, "do not write RUN_DIR/eval.json")
    progress: bool = opt(True, "no progress bar")


def register(sub) -> None:
    from ..cliargs import add_actions, add_command
    from .train import IOTOptions

    isub = add_actions(sub, "iot", "instance-wise layer order: route each sequence to one of M candidate orders")
    add_command(isub, "train", "train shared weights + order predictor (NNI one-shot strategy)", IOTOptions,
                run_train)

    add_command(isub, "eval", "order usage and validation MLM accuracy per order vs routed (JSON)", IOTEvalOptions,
                run_eval)


def run_train(args) -> dict:
    from ..cliargs import run_training
    from .train import IOTOptions, train_iot

    return run_training(args, IOTOptions, train_iot, summary)


def summary(meta: dict) -> dict:
    f = meta["final"]
    return {"run_dir": meta["run_dir"], "steps": meta["steps"], "orders": meta["orders"],
            "routed_val_mlm_acc": round(f["routed"]["val_mlm_acc"], 4),
            "best_single_val_mlm_acc": round(f["best_single"]["val_mlm_acc"], 4),
            "usage": [round(o["usage"], 3) for o in f["orders"]],
            "scored_on": f"{f['batches']} of {f['of_batches']} validation batches (--val-batches; iot eval: all)",
            "train_seconds": round(meta["train_seconds"], 1)}


def run_eval(args) -> dict:
    from pathlib import Path

    from ..cliargs import options_from_args

    opts = options_from_args(IOTEvalOptions, args)

    from ..errors import UserError
    from ..rundir import RunDir
    from .evaluate import evaluate_iot
    from .rundir import load_iot

    if opts.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {opts.batch_size}")
    if opts.val_batches is not None and opts.val_batches < 1:
        raise UserError(f"--val-batches must be at least 1, got {opts.val_batches}")
    model = load_iot(opts.out)
    from ..data import MLMDataModule, PreparedData

    path = opts.data or (model.meta.get("data") or {}).get("path")
    if not path or not Path(path).is_dir():
        raise UserError(f"prepared data {path} not found; pass --data PREPARED_DIR")
    data = PreparedData.load(path)
    if data.vocab_size != model.config.vocab_size:
        raise UserError(f"data {data.path} has a {data.vocab_size}-token vocabulary, the model "
                        f"{model.config.vocab_size}")
    RunDir(opts.out, "IOT").check_data_tokenizer(data.path)
    loader = MLMDataModule(data, batch_size=opts.batch_size).val_dataloader()
    stats = evaluate_iot(model, loader, max_batches=opts.val_batches, progress=opts.progress)
    stats = {"run_dir": str(opts.out), "data": str(data.path), **stats}
    if not opts.no_save:
        RunDir(opts.out, "IOT").write_json("eval.json", stats)
    return stats
