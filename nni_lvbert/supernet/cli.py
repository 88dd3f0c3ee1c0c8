"""`lvbert supernet train`: SPOS pre-training of the supernet on MLM."""
from __future__ import annotations

from ..cliargs import add_data_args, add_out_arg, add_training_args


def register(sub) -> None:
    from .train import SupernetOptions

    d = SupernetOptions()
    p = sub.add_parser("supernet", help="pre-train the weight-sharing supernet (SPOS, MLM)")
    ssub = p.add_subparsers(dest="supernet_command", metavar="ACTION")
    t = ssub.add_parser("train", help="train a supernet into a run directory")
    add_out_arg(t, d.out, "run directory")
    t.add_argument("--space", default=d.space, help=f"search-space name or YAML (default {d.space})")
    t.add_argument("--size", default=None, help="tiny | small | medium | base (default: the space's size)")
    add_data_args(t)
    t.add_argument("--seed", type=int, default=d.seed, help="seed of the paths, batches and initialisation")
    add_training_args(t, "optimisation (defaults: LV-BERT Table 5; tiny preset for --size tiny)")
    t.add_argument("--sharing", choices=["none", "type"], default=None, help="cross-layer sharing (ALBERT)")
    t.add_argument("--sampling", choices=["spos", "fair"], default=d.sampling,
                   help="spos: one uniform path per step (default); fair: FairNAS strict fairness, the gradients of "
                        "4 paths that train every layer type of every slot once, then one step (4x the compute)")
    t.add_argument("--record-paths", action="store_true", help="write every sampled path per rank (debug/tests)")
    t.set_defaults(func=run_train)
    p.set_defaults(func=lambda args: p.print_help() or 2)


def run_train(args) -> dict:
    from ..cliargs import run_training
    from .train import SupernetOptions, train_supernet

    return run_training(args, SupernetOptions, train_supernet, summary)


def summary(meta: dict) -> dict:
    acc = meta.get("final_val_mlm_acc")
    return {"run_dir": meta["run_dir"], "steps": meta["steps"],
            "final_val_mlm_acc": round(acc, 4) if acc is not None else None,
            "train_seconds": round(meta["train_seconds"], 1)}
