"""Benchmark (not a test): IOT inference cost of grouped argmax routing vs one fixed order vs all M orders.

Prints one JSON object. The M orders are distinct permutations of one block (default sa,ff,dc) repeated over the
slots, so every order has the same layer multiset and the same single-order cost. By default the batch is split
evenly over the M orders (the worst case for grouping; the predictor still runs and is timed). Target: routed /
single <= 1.1. Timings are medians of round-robin repeats (fair on a shared machine).
    python benchmarks/bench_iot.py [--size tiny] [--slots 24] [--batch 64] [--m 4] [--repeats 7] [--threads 1]
                                   [--split even|predictor]
"""
from __future__ import annotations

import argparse
import json
import warnings

import torch

from common import interleaved_medians, masked_batch  # this folder is on sys.path when run as a script

warnings.filterwarnings("ignore", message=".*is found to be not a nn.Module.*")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--slots", type=int, default=24)
    ap.add_argument("--block", default="sa,ff,dc")
    ap.add_argument("--m", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=None, help="default: the size's max_length")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--split", choices=["even", "predictor"], default="even",
                    help="even: instance i goes to order i mod M (balanced groups, the worst case for grouping; the "
                         "predictor still runs); predictor: a random large-scale predictor decides")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from nni_lvbert.arch import to_compact
    from nni_lvbert.config import SpaceSpec, load_size
    from nni_lvbert.iot.orders import block_orders, parse_block
    from nni_lvbert.iot.routing import IOTModel, OrderPredictor, routed_forward
    from nni_lvbert.space import LVBertSpace
    from nni_lvbert.supernet.strategy import SeededRandomOneShot

    torch.manual_seed(0)
    cfg = load_size(args.size, dropout=0.0, attention_dropout=0.0)
    spec = SpaceSpec(name="bench", slots=args.slots, size=args.size)
    space = LVBertSpace(spec, cfg)
    SeededRandomOneShot().mutate_model(space)
    orders = block_orders(parse_block(args.block, spec), args.m, spec)
    predictor = OrderPredictor(cfg.embedding_size, args.m)
    torch.nn.init.normal_(predictor.proj.weight, std=50.0)
    model = IOTModel(space, predictor, orders, spec, cfg).eval()
    seq = args.seq or cfg.max_length
    ids, mask, labels = masked_batch(cfg.vocab_size, args.batch, seq, torch.Generator().manual_seed(0), seq // 2)

    with torch.no_grad():
        choice = model.route(ids, mask) if args.split == "predictor" else torch.arange(args.batch) % args.m
        usage = torch.bincount(choice, minlength=args.m).tolist()

        def routed_call(trim):
            return routed_forward(space, predictor, model.order_dicts, ids, mask, None, labels, trim=trim,
                                  return_hidden=False, choice=choice)

        fns = {f"single{k}": (lambda k=k: model.forward_order(k, ids, mask, None, labels)) for k in range(args.m)}
        fns["routed"] = lambda: routed_call(True)
        fns["routed_untrimmed"] = lambda: routed_call(False)
        fns["predictor"] = lambda: model.route(ids, mask)
        fns["all_orders"] = lambda: [model.forward_order(k, ids, mask, None, labels) for k in range(args.m)]
        t = interleaved_medians(fns, args.repeats)
    single = [t[f"single{k}"] for k in range(args.m)]
    routed, routed_untrimmed, predictor_only, all_orders = (t[k] for k in ("routed", "routed_untrimmed",
                                                                          "predictor", "all_orders"))
    ref = sum(single) / len(single)
    print(json.dumps({
        "size": args.size, "slots": args.slots, "batch": args.batch, "seq": seq, "m": args.m,
        "threads": args.threads, "split": args.split, "orders": [to_compact(o) for o in orders],
        "usage": usage,
        "ms": {"single_order_mean": round(ref * 1e3, 2), "single_order_each": [round(s * 1e3, 2) for s in single],
               "routed_grouped": round(routed * 1e3, 2), "routed_grouped_untrimmed": round(routed_untrimmed * 1e3, 2),
               "predictor_only": round(predictor_only * 1e3, 3), "all_orders": round(all_orders * 1e3, 2)},
        "ratio_routed_vs_single": round(routed / ref, 3),
        "ratio_routed_untrimmed_vs_single": round(routed_untrimmed / ref, 3),
        "ratio_all_orders_vs_single": round(all_orders / ref, 3),
        "target_routed_vs_single": 1.1,
        "meets_target": routed / ref <= 1.1,
    }, indent=2))


if __name__ == "__main__":
    main()
