"""`lvbert supernet train`: SPOS pre-training of the supernet on MLM."""
from __future__ import annotations

import json


def add_data_args(p) -> None:
    p.add_argument("--corpus", nargs="+", default=None,
                   help="text/jsonl/parquet files, folder or glob, or hub:NAME[:CONFIG] (default: embedded corpus)")
    p.add_argument("--tokenizer", default=None, help="existing tokenizer directory or vocab.txt (default: train one)")
    p.add_argument("--cache-dir", default=None, help="data cache (default: $LVBERT_CACHE or ~/.cache/nni-lvbert)")
    p.add_argument("--max-docs", type=int, default=None, help="use only the first N documents (quick runs)")
    p.add_argument("--val-fraction", type=float, default=0.02, help="held-out share of documents (default 0.02)")


def add_training_args(t, title: str, dropout_help: str | None = None) -> None:
    """Optimisation, hardware and resume options shared by the one-shot trainings (supernet, IOT)."""
    g = t.add_argument_group(title)
    g.add_argument("--lr", type=float, default=None)
    g.add_argument("--warmup-steps", type=int, default=None)
    g.add_argument("--max-steps", type=int, default=None)
    g.add_argument("--batch-size", type=int, default=None, help="global batch size (split over devices)")
    g.add_argument("--dropout", type=float, default=None, help=dropout_help)
    g.add_argument("--weight-decay", type=float, default=0.0)
    g.add_argument("--val-every", type=int, default=None, help="validate every N steps")
    g.add_argument("--val-batches", type=int, default=None, help="validation batches per check")
    g.add_argument("--ckpt-every", type=int, default=None, help="write checkpoints/last.ckpt every N steps")
    h = t.add_argument_group("hardware (Lightning)")
    h.add_argument("--accelerator", default="auto", help="cpu | gpu | auto")
    h.add_argument("--devices", default="1", help="number of devices (DDP when > 1)")
    h.add_argument("--strategy", default=None,
                   help="Lightning strategy (default ddp_find_unused_parameters_true when devices > 1)")
    h.add_argument("--precision", default=None, help="32-true | bf16-mixed (default bf16-mixed on GPU)")
    h.add_argument("--num-workers", type=int, default=0)
    r = t.add_mutually_exclusive_group()
    r.add_argument("--resume", action="store_true", help="continue from checkpoints/last.ckpt")
    r.add_argument("--overwrite", action="store_true", help="replace a non-empty run directory")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")


def register(sub) -> None:
    p = sub.add_parser("supernet", help="pre-train the weight-sharing supernet (SPOS, MLM)")
    ssub = p.add_subparsers(dest="supernet_command", metavar="ACTION")
    t = ssub.add_parser("train", help="train a supernet into a run directory")
    t.add_argument("--run-dir", default="runs/supernet", help="output directory (default runs/supernet)")
    t.add_argument("--space", default="lvbert", help="search-space name or YAML (default lvbert)")
    t.add_argument("--size", default=None, help="tiny | small | medium | base (default: the space's size)")
    add_data_args(t)
    t.add_argument("--seed", type=int, default=0)
    add_training_args(t, "optimisation (defaults: LV-BERT Table 5; tiny preset for --size tiny)")
    t.add_argument("--sharing", choices=["none", "type"], default=None, help="cross-layer sharing (ALBERT)")
    t.add_argument("--record-paths", action="store_true", help="write every sampled path per rank (debug/tests)")
    t.set_defaults(func=run_train)
    p.set_defaults(func=lambda args: p.print_help() or 2)


def run_train(args) -> int:
    from .train import SupernetOptions, train_supernet

    opts = SupernetOptions(
        run_dir=args.run_dir, space=args.space, size=args.size, corpus=args.corpus, tokenizer=args.tokenizer,
        cache_dir=args.cache_dir, max_docs=args.max_docs, val_fraction=args.val_fraction, seed=args.seed,
        lr=args.lr, warmup_steps=args.warmup_steps, max_steps=args.max_steps, batch_size=args.batch_size,
        dropout=args.dropout, sharing=args.sharing, weight_decay=args.weight_decay, val_every=args.val_every,
        val_batches=args.val_batches, ckpt_every=args.ckpt_every, accelerator=args.accelerator,
        devices=args.devices, strategy=args.strategy, precision=args.precision, num_workers=args.num_workers,
        resume=args.resume, overwrite=args.overwrite, record_paths=args.record_paths, progress=not args.no_progress,
    )
    meta = train_supernet(opts)
    if meta:
        acc = meta.get("final_val_mlm_acc")
        print(json.dumps({"run_dir": meta["run_dir"], "steps": meta["steps"],
                          "final_val_mlm_acc": round(acc, 4) if acc is not None else None,
                          "train_seconds": round(meta["train_seconds"], 1)}))
    return 0
