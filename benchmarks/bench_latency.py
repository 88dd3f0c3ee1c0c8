"""Benchmark (not a test): the latency table's predictor (embedding + sum of layers) against whole models.

For each of `--orders` random orders of the space, the whole `LVBertModel` (inference mode, an all-ones attention
mask, as a deployed model gets) and the table's parts (`lvbert search latency-table`'s calls) are timed side by side,
their calls alternating, so a change of load on the shared machine hits both alike; the order's latency is predicted
from those parts. A table measured alone at the start (what the CLI writes) predicts them too. Prints one JSON
object: per order predicted and measured ms and the relative errors; median and max errors.
    taskset -c 1 env OMP_NUM_THREADS=1 python benchmarks/bench_latency.py [--size small] [--batch 1] [--seq 128]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import warnings

import torch

warnings.filterwarnings("ignore", message=".*is found to be not a nn.Module.*")


def main() -> None:
    from nni_lvbert.config import LETTER_OF, load_size, load_space
    from nni_lvbert.hf import LVBertModel
    from nni_lvbert.hf.convert import hf_config
    from nni_lvbert.search.latency import CHAIN, LatencyModel, measure, median_ms, part_calls

    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="small")
    ap.add_argument("--space", default="lvbert")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--orders", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg, spec = load_size(args.size), load_space(args.space)
    alone = LatencyModel(measure(cfg, args.size, "cpu", args.batch, args.seq, repeats=50, warmup=10))
    layers, _ = part_calls(cfg, torch.device("cpu"), torch.float32, args.batch, args.seq, spec.candidates)
    rng = random.Random(args.seed)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, cfg.vocab_size, (args.batch, args.seq), generator=gen)
    mask = torch.ones_like(ids)
    rows = []
    for _ in range(args.orders):
        order = [rng.choice(spec.candidates) for _ in range(spec.slots)]
        model = LVBertModel(hf_config(cfg, order)).eval()
        with torch.inference_mode():
            ms = median_ms({"model": lambda m=model: m(input_ids=ids, attention_mask=mask), **layers}, args.repeats, 3)
        parts = {k: v / (CHAIN if k in spec.candidates else 1) for k, v in ms.items()}
        predicted = LatencyModel({"ms": parts}).predict(order)
        rows.append({"order": "".join(LETTER_OF[t] for t in order),
                     "predicted_ms": round(predicted, 3), "measured_ms": round(ms["model"], 3),
                     "error": round((predicted - ms["model"]) / ms["model"], 4),
                     "error_table_alone": round((alone.predict(order) - ms["model"]) / ms["model"], 4)})
    errors = [abs(r["error"]) for r in rows]
    alone_errors = [abs(r["error_table_alone"]) for r in rows]
    print(json.dumps({
        "note": "CPU pinned with taskset, shared with other jobs; one torch thread",
        "size": args.size, "batch": args.batch, "seq": args.seq, "threads": torch.get_num_threads(),
        "torch": torch.__version__, "table_alone_ms": alone.ms,
        "median_abs_error": round(statistics.median(errors), 4), "max_abs_error": round(max(errors), 4),
        "mean_signed_error": round(statistics.mean(r["error"] for r in rows), 4),
        "table_alone_median_abs_error": round(statistics.median(alone_errors), 4),
        "table_alone_max_abs_error": round(max(alone_errors), 4), "orders": rows,
    }, indent=2))


if __name__ == "__main__":
    main()
