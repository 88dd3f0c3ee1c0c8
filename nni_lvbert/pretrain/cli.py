"""`lvbert pretrain`: pre-train a fixed architecture (MLM or ELECTRA, optional SOP) into a run directory and
Hugging Face model directories (RUN/hf, RUN/hf-generator)."""
from __future__ import annotations

from ..cliargs import add_data_args, add_out_arg, add_training_args


def register(sub) -> None:
    from .train import PretrainOptions

    d = PretrainOptions()
    p = sub.add_parser("pretrain", help="pre-train one architecture (MLM or ELECTRA, optional SOP) -> run directory "
                                        "+ Hugging Face model")
    add_out_arg(p, d.out, "run directory")
    p.add_argument("--arch", default=None, help="best_arch.json, a name (bert, dynamicconv, sandwich, lvbert-small), "
                                                "letters (ccsf...: c=dc s=sa f=ff g=glu) or digits (0=dc 1=sa 2=ff)")
    p.add_argument("--size", default=None, help="tiny | small | medium | base (default small; tiny: a CPU preset)")
    p.add_argument("--model-config", default=None, metavar="FILE",
                   help="a model_config.json (e.g. SUPERNET/model_config.json) giving the shape instead of --size; "
                        "--size still picks the training preset")
    p.add_argument("--objective", default=d.objective, help=f"mlm | electra (default {d.objective})")
    p.add_argument("--sop", action="store_true", help="add ALBERT sentence-order prediction")
    add_data_args(p)
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the batches, masks, samples and initialisation")
    add_training_args(p, "optimisation (defaults: LV-BERT Table 5 / ELECTRA per size; tiny preset for --size tiny)")
    p.set_defaults(weight_decay=d.weight_decay)
    g = p.add_argument_group("objective")
    g.add_argument("--clip-grad", type=float, default=d.clip_grad, help=f"global gradient-norm clipping (default "
                                                                        f"{d.clip_grad}; 0 = off)")
    g.add_argument("--generator-fraction", type=float, default=None,
                   help="ELECTRA generator hidden size / discriminator's (default 1/4 for tiny and small, 1/3 for "
                        "medium and base)")
    g.add_argument("--disc-weight", type=float, default=d.disc_weight,
                   help=f"ELECTRA discriminator loss weight (default {d.disc_weight:g})")
    g.add_argument("--sharing", default=None, help="none | type: cross-layer sharing per layer type (ALBERT)")
    p.set_defaults(func=run_pretrain)


def run_pretrain(args) -> dict:
    from ..cliargs import run_training
    from .train import PretrainOptions, train_pretrain

    return run_training(args, PretrainOptions, train_pretrain, summary)


def summary(meta: dict) -> dict:
    final = {k: round(v, 4) for k, v in meta["final"].items() if k != "step" and isinstance(v, float)}
    return {"run_dir": meta["run_dir"], "arch": meta["arch"], "objective": meta["objective"], "steps": meta["steps"],
            "final": final, **meta["hf"], "train_seconds": round(meta["train_seconds"], 1)}
