"""Benchmark (not a test): what `--rerank K --rerank-steps N` adds to a finished search, and whether it changes the pick.

Runs stage 2 of the two-stage search (`search.rerank.rerank`: the K best distinct orders of SEARCH's history, each
pre-trained N stand-alone steps and scored on every validation token) into a temp directory, with the threads a
plain `lvbert search run` uses, and prints one JSON object: its wall time, its core-minutes (as best_arch.json
records them), its pick and where that pick stood in stage 1. docs/results.md quotes it for the quickstart:
    python benchmarks/bench_rerank.py --search runs/quickstart/search [--k 5] [--steps 300]
Run it on an idle machine: a second process on the same cores slows it several times over.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--search", default="runs/quickstart/search", help="a finished `lvbert search run` directory")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()

    import torch

    from nni_lvbert.search.rerank import rerank
    from nni_lvbert.search.scorer import SupernetScorer

    search = Path(args.search)
    best = json.loads((search / "best_arch.json").read_text())
    opts = json.loads((search / "options.json").read_text())  # the search's own supernet and validation tokens
    records = [json.loads(line) for line in (search / "history.jsonl").read_text().splitlines()]
    start = time.perf_counter()
    scorer = SupernetScorer(opts["supernet"], val_tokens=opts["val_tokens"], data=opts.get("data"))
    with tempfile.TemporaryDirectory() as out:
        result = rerank(records, args.k, args.steps, scorer, Path(out), seed=0, progress=False, log=lambda _: None)
    wall = time.perf_counter() - start
    print(json.dumps({"k": args.k, "steps": args.steps, "threads": torch.get_num_threads(),
                      "wall_minutes": round(wall / 60, 2), "core_minutes": round(result["core_minutes"], 2),
                      "stage1_pick": best.get("stage1", {}).get("arch", best["compact"]), "pick": result["pick"],
                      "pick_inherited_rank": result["pick_inherited_rank"],
                      "candidates": [c["arch"] for c in result["candidates"]]}, indent=1))


if __name__ == "__main__":
    main()
