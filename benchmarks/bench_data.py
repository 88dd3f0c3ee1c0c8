"""Benchmark (not a test): prepare the embedded corpus from scratch at each size, then time reuse and batching.

Prints one JSON object (the data numbers of docs/benchmarks.md come from it). Each size gets a fresh cache, so the time
includes tokenizer training.
    python benchmarks/bench_data.py [--sizes tiny small] [--batch 128] [--batches 50]
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import tempfile
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # as under `lvbert`: datasets workers do the parallelism


def bench(size: str, batch: int, batches: int) -> dict:
    from nni_lvbert.data import MLMDataModule, prepare

    with tempfile.TemporaryDirectory() as cache:
        t = time.perf_counter()
        p = prepare(None, size, cache_dir=cache)
        build_s = time.perf_counter() - t
        t = time.perf_counter()
        again = prepare(None, size, cache_dir=cache)
        reuse_s = time.perf_counter() - t
        assert again.reused
        dm = MLMDataModule(p, batch_size=batch)
        t = time.perf_counter()
        n = sum(1 for _ in itertools.islice(dm.train_dataloader(), batches))
        batch_s = (time.perf_counter() - t) / n
        s = p.stats
        return {
            "size": size, "vocab_size": p.vocab_size, "max_length": p.max_length,
            "prepare_s": round(build_s, 1), "reuse_s": round(reuse_s, 2), "cache_mb": round(s["bytes"] / 1e6, 1),
            "train": s["train"], "val": s["val"],
            "fill": round(s["train"]["tokens"] / (s["train"]["sequences"] * p.max_length), 3),
            f"train_batch_{batch}_ms": round(1000 * batch_s, 1),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["tiny", "small"])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--batches", type=int, default=50)
    args = ap.parse_args()
    print(json.dumps({"cpus": os.cpu_count(), "results": [bench(s, args.batch, args.batches) for s in args.sizes]},
                     indent=2))


if __name__ == "__main__":
    main()
