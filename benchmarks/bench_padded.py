"""Benchmark (not a test): does the eager packed path (layers/rows.py: real tokens only) still matter, now that traced
forwards (torch.export, ONNX) run padded batches dense and masked? Times `LVBertModel` in inference on a padded batch
both ways, side by side, and checks they agree. Prints one JSON object.
    taskset -c 1 env OMP_NUM_THREADS=1 python benchmarks/bench_padded.py [--batch 32] [--seq 128] [--min-len 32]
"""
from __future__ import annotations

import argparse
import json
from unittest import mock

import torch


def main() -> None:
    from nni_lvbert.arch import Arch
    from nni_lvbert.config import load_size, load_space
    from nni_lvbert.hf import LVBertModel
    from nni_lvbert.hf.convert import hf_config
    from nni_lvbert.search.latency import median_ms

    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="fccfgfcccgsssfsggcsgfcgc")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--min-len", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = load_size("small")
    model = LVBertModel(hf_config(cfg, list(Arch.parse(args.arch, load_space("lvbert"))))).eval()
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(args.min_len, args.seq + 1, (args.batch,), generator=gen)
    mask = (torch.arange(args.seq)[None] < lengths[:, None]).long()
    ids = torch.randint(5, cfg.vocab_size, (args.batch, args.seq), generator=gen) * mask
    traced = [mock.patch(f"{m}.tracing", lambda: True) for m in
              ("nni_lvbert.layers.rows", "nni_lvbert.layers.attention", "nni_lvbert.hf.modeling_lvbert")]

    def packed():
        return model(input_ids=ids, attention_mask=mask).last_hidden_state

    def dense():  # what torch.export / ONNX run: padding in place, masked, zeroed after each layer
        for p in traced:
            p.start()
        try:
            return packed()
        finally:
            for p in traced:
                p.stop()

    with torch.inference_mode():
        diff = float((packed() - dense()).abs().max())
        ms = median_ms({"packed": packed, "dense": dense}, args.repeats, 1)
    print(json.dumps({"note": "one thread, CPU pinned with taskset and shared with other jobs", "arch": args.arch,
                      "batch": args.batch, "seq": args.seq,
                      "padding_fraction": round(1 - mask.float().mean().item(), 3),
                      "max_abs_diff": diff, "ms": {k: round(v, 1) for k, v in ms.items()},
                      "dense_over_packed": round(ms["dense"] / ms["packed"], 2)}, indent=2))


if __name__ == "__main__":
    main()
