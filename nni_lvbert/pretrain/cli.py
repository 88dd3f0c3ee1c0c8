"""`lvbert pretrain`: pre-train a fixed architecture (MLM or ELECTRA, optional SOP) into a run directory and
Hugging Face model directories (RUN/hf, RUN/hf-generator)."""
from __future__ import annotations


def register(sub) -> None:
    from ..cliargs import add_command
    from .train import PretrainOptions

    add_command(sub, "pretrain", "pre-train one architecture (MLM or ELECTRA, optional SOP) -> run directory + "
                                 "Hugging Face model", PretrainOptions, run_pretrain)


def run_pretrain(args) -> dict:
    from ..cliargs import run_training
    from .train import PretrainOptions, train_pretrain

    return run_training(args, PretrainOptions, train_pretrain, summary)


def summary(meta: dict) -> dict:
    final = {k: round(v, 4) for k, v in meta["final"].items() if k != "step" and isinstance(v, float)}
    return {"run_dir": meta["run_dir"], "arch": meta["arch"], "objective": meta["objective"], "steps": meta["steps"],
            "final": final, **meta["hf"], "train_seconds": round(meta["train_seconds"], 1)}
