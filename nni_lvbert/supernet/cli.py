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
    t.add_argument("--warm-start", default=None, metavar="RUN",
                   help="start from this supernet run's weights (same space and shape)")
    t.add_argument("--fix", nargs="+", default=None, metavar="LABEL=TYPE",
                   help="slots every sampled path takes as given, e.g. layer00=sa (a sub-space: few-shot NAS)")
    t.add_argument("--record-paths", action="store_true", help="write every sampled path per rank (debug/tests)")
    t.set_defaults(func=run_train)

    from .fewshot import FewShotOptions

    f = ssub.add_parser("few-shot", help="few-shot NAS: split a trained supernet on one slot's layer type into "
                                         "sub-supernets, each warm-started from it and trained on its sub-space")
    add_out_arg(f, FewShotOptions.out, "few-shot directory (fewshot.json + one supernet run per sub-space)")
    f.add_argument("--warm-start", default=None, metavar="RUN", help="the trained one-shot supernet to split")
    f.add_argument("--split", default=FewShotOptions.split, metavar="slot:I",
                   help="the decision to split on: slot:I = slot I's layer type, one sub-supernet per type "
                        f"(default {FewShotOptions.split})")
    add_data_args(f)
    f.add_argument("--seed", type=int, default=d.seed, help="seed of the paths and batches")
    add_training_args(f, "optimisation of each sub-supernet (defaults: the size's preset; --max-steps per "
                         "sub-supernet)")
    f.add_argument("--record-paths", action="store_true", help="write every sampled path per rank (debug/tests)")
    f.set_defaults(func=run_fewshot)
    p.set_defaults(func=lambda args: p.print_help() or 2)


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
