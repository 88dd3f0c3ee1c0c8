"""`lvbert run`: the whole pipeline in one command — data -> supernet (SPOS) -> search -> best_arch.json + plot.

    OUT/supernet/   supernet run directory (lvbert supernet train)
    OUT/search/     best_arch.json, history.jsonl, search_curve.png (lvbert search run)

`--resume` continues whichever stage was interrupted; finished stages are kept.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from .errors import UserError


def register(sub) -> None:
    from .supernet.cli import add_data_args

    p = sub.add_parser("run", help="whole pipeline: data -> supernet -> search -> best_arch.json + plot")
    p.add_argument("--out", default="runs/quickstart", help="output directory (default runs/quickstart)")
    p.add_argument("--space", default="lvbert", help="search-space name or YAML (default lvbert)")
    p.add_argument("--size", default="tiny", help="supernet size (default tiny: minutes on 2 CPU cores)")
    add_data_args(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--supernet-steps", type=int, default=None, help="supernet training steps (default: size preset)")
    p.add_argument("--strategy", nargs="+", default=["evolution"],
                   help="search strategies: evolution, regularized-evolution, random (several = one plot)")
    p.add_argument("--devices", default="1", help="devices for supernet training (DDP when > 1)")
    p.add_argument("--accelerator", default="auto")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true", help="continue an interrupted run")
    g.add_argument("--overwrite", action="store_true", help="replace a non-empty output directory")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    from .search.run import SearchOptions, run_search
    from .supernet.train import SupernetOptions, train_supernet

    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not (args.resume or args.overwrite):
        raise UserError(f"output directory {out} is not empty; pass --resume to continue it or --overwrite to replace it")
    if args.overwrite and out.exists():
        shutil.rmtree(out)
    supernet_dir, search_dir = out / "supernet", out / "search"
    start = time.time()

    if (supernet_dir / "meta.json").is_file():
        print(f"[1/2] supernet: done already in {supernet_dir}", flush=True)
    else:
        resume = args.resume and (supernet_dir / "checkpoints" / "last.ckpt").is_file()
        print(f"[1/2] supernet: {'resuming' if resume else 'training'} ({args.space}, size {args.size}) -> {supernet_dir}",
              flush=True)
        train_supernet(SupernetOptions(
            run_dir=str(supernet_dir), space=args.space, size=args.size, corpus=args.corpus, tokenizer=args.tokenizer,
            cache_dir=args.cache_dir, max_docs=args.max_docs, val_fraction=args.val_fraction, seed=args.seed,
            max_steps=args.supernet_steps, devices=args.devices, accelerator=args.accelerator,
            resume=resume, overwrite=not resume, progress=not args.no_progress,
        ))
        if not (supernet_dir / "meta.json").is_file():
            return 0  # a non-zero DDP rank: rank 0 carries on with the search
    supernet_meta = json.loads((supernet_dir / "meta.json").read_text())

    if (search_dir / "best_arch.json").is_file():
        print(f"[2/2] search: done already in {search_dir}", flush=True)
    else:
        resume = args.resume and search_dir.is_dir() and any(search_dir.iterdir())
        print(f"[2/2] search: {', '.join(args.strategy)} over the supernet -> {search_dir}", flush=True)
        run_search(SearchOptions(supernet=str(supernet_dir), strategies=list(args.strategy), seed=args.seed,
                                 out=str(search_dir), resume=resume, overwrite=not resume,
                                 progress=not args.no_progress))
    best = json.loads((search_dir / "best_arch.json").read_text())
    print(json.dumps({
        "best_arch": str(search_dir / "best_arch.json"),
        "arch": best.get("compact") or best.get("arch_compact"),
        "score": best.get("score"),
        "supernet_val_mlm_acc": supernet_meta.get("final_val_mlm_acc"),
        "plot": str(search_dir / "search_curve.png"),
        "minutes": round((time.time() - start) / 60, 1),
    }, indent=2))
    return 0
