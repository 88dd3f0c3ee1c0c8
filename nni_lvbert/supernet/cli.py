"""`lvbert supernet train`: SPOS pre-training of the supernet on MLM."""
from __future__ import annotations


def register(sub) -> None:
    from ..cliargs import add_actions, add_command
    from .fewshot import NOT_FEWSHOT, FewShotOptions
    from .train import SupernetOptions

    actions = add_actions(sub, "supernet", "pre-train the weight-sharing supernet (SPOS, MLM)")
    add_command(actions, "train", "train a supernet into a run directory", SupernetOptions, run_train)
    add_command(actions, "few-shot", "few-shot NAS: split a trained supernet on one slot's layer type into "
                                     "sub-supernets, each warm-started from it and trained on its sub-space",
                FewShotOptions, run_fewshot, skip=NOT_FEWSHOT)


def run_train(args) -> dict:
    from ..cliargs import run_training
    from .train import SupernetOptions, train_supernet

    return run_training(args, SupernetOptions, train_supernet, summary)


def run_fewshot(args) -> dict:
    from ..cliargs import options_from_args
    from .fewshot import FewShotOptions, train_fewshot

    result = train_fewshot(options_from_args(FewShotOptions, args))
    return {k: result[k] for k in ("out", "split", "owners", "total_steps", "final_val_mlm_acc")} | {
        "core_minutes": round(result["core_minutes"], 2)}


def summary(meta: dict) -> dict:
    acc = meta.get("final_val_mlm_acc")
    return {"run_dir": meta["run_dir"], "steps": meta["steps"],
            "final_val_mlm_acc": round(acc, 4) if acc is not None else None,
            "train_seconds": round(meta["train_seconds"], 1)}
