"""`lvbert iot train|eval`: instance-wise layer order (IOT) over M candidate orders sharing supernet weights."""
from __future__ import annotations


def register(sub) -> None:
    from ..cliargs import add_data_args, add_json_arg, add_out_arg, add_training_args
    from ..layout import IOT, SEARCH
    from .defaults import C1, C2, CLAMP, TAU, TAU_DECAY, TAU_EVERY, TAU_MIN

    p = sub.add_parser("iot", help="instance-wise layer order: route each sequence to one of M candidate orders")
    isub = p.add_subparsers(dest="iot_command", metavar="ACTION")

    t = isub.add_parser("train", help="train shared weights + order predictor (NNI one-shot strategy)")
    add_out_arg(t, IOT, "run directory")
    start = t.add_argument_group("start (one of)")
    start.add_argument("--supernet", default=None, metavar="RUN_DIR", help="start from a trained supernet run")
    start.add_argument("--space", default=None, help="train from scratch on this search space (name or YAML)")
    start.add_argument("--size", default=None, help="from scratch: tiny | small | medium | base (default: the space's)")
    add_data_args(t.add_argument_group("data (default: the supernet's prepared data)"), scratch="from scratch: ")
    o = t.add_argument_group(f"candidate orders (one source; default: top-M of {SEARCH})")
    o.add_argument("--orders-from", default=None, metavar="SEARCH_DIR",
                   help="top-M distinct architectures of a search's history.jsonl")
    o.add_argument("--orders", nargs="+", default=None, metavar="ARCH",
                   help="explicit orders: compact strings (c=dc s=sa f=ff g=glu), names or JSON files")
    o.add_argument("--block", default=None, metavar="TYPES",
                   help="IOT-style: M distinct permutations of a block (e.g. sa,ff,dc or sfc) repeated over the slots")
    o.add_argument("--m", "--orders-from-block", dest="m", type=int, default=None,
                   help="number of orders M (default 4; with --orders: their number)")
    i = t.add_argument_group("IOT (defaults: official IOT code)")
    i.add_argument("--tau", type=float, default=TAU, help=f"Gumbel-softmax temperature (start) (default {TAU})")
    i.add_argument("--tau-min", type=float, default=TAU_MIN, help=f"temperature floor (default {TAU_MIN})")
    i.add_argument("--tau-decay", type=float, default=TAU_DECAY,
                   help=f"r in tau = max(tau * exp(-r * step), tau_min), step floored to --tau-every "
                        f"(default {TAU_DECAY})")
    i.add_argument("--tau-every", type=int, default=TAU_EVERY, help=f"temperature update period (default {TAU_EVERY})")
    i.add_argument("--c1", type=float, default=C1, help=f"weight of L_D = KL(uniform || mean p) (default {C1})")
    i.add_argument("--c2", type=float, default=C2, help=f"weight of L_S = -mean KL(uniform || p_x) (default {C2})")
    i.add_argument("--clamp", type=float, default=CLAMP, help=f"probability clamp before Gumbel (default {CLAMP})")
    i.add_argument("--no-gumbel", dest="gumbel", action="store_false", help="no Gumbel noise (deterministic weights)")
    t.add_argument("--seed", type=int, default=0, help="seed of the batches, Gumbel noise and initialisation")
    add_training_args(t, "optimisation (defaults: tiny preset for tiny models, else continued pre-training)",
                      dropout_help="from scratch only")
    t.set_defaults(func=run_train)

    e = isub.add_parser("eval", help="order usage and validation MLM accuracy per order vs routed (JSON)")
    add_out_arg(e, IOT, "a finished `lvbert iot train` directory (eval.json is written there)")
    e.add_argument("--data", default=None, metavar="DIR", help="prepared data directory (default: the run's)")
    e.add_argument("--batch-size", type=int, default=64, help="validation sequences per batch (default 64)")
    e.add_argument("--val-batches", type=int, default=None, help="only the first N validation batches")
    e.add_argument("--no-save", action="store_true", help="do not write RUN_DIR/eval.json")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_json_arg(e)
    e.set_defaults(func=run_eval)
    p.set_defaults(func=lambda args: p.print_help() or 2)


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

    from ..errors import UserError
    from ..rundir import RunDir
    from .evaluate import evaluate_iot
    from .rundir import load_iot

    if args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.val_batches is not None and args.val_batches < 1:
        raise UserError(f"--val-batches must be at least 1, got {args.val_batches}")
    model = load_iot(args.out)
    from ..data import MLMDataModule, PreparedData

    path = args.data or (model.meta.get("data") or {}).get("path")
    if not path or not Path(path).is_dir():
        raise UserError(f"prepared data {path} not found; pass --data PREPARED_DIR")
    data = PreparedData.load(path)
    if data.vocab_size != model.config.vocab_size:
        raise UserError(f"data {data.path} has a {data.vocab_size}-token vocabulary, the model "
                        f"{model.config.vocab_size}")
    RunDir(args.out, "IOT").check_data_tokenizer(data.path)
    loader = MLMDataModule(data, batch_size=args.batch_size).val_dataloader()
    stats = evaluate_iot(model, loader, max_batches=args.val_batches, progress=not args.no_progress)
    stats = {"run_dir": str(args.out), "data": str(data.path), **stats}
    if not args.no_save:
        RunDir(args.out, "IOT").write_json("eval.json", stats)
    return stats
