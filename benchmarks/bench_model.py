"""Benchmark (not a test): our fixed `bert` arch vs transformers' BertForMaskedLM, and per-layer-type cost.

Prints one JSON object. Everything is measured side by side in one process, the sides' training steps alternating
(noise on a shared machine hits every side alike), so compare the ratios.
    python benchmarks/bench_model.py [--size small] [--batch 16] [--steps 6]
"""
from __future__ import annotations

import argparse
import json
import warnings

import torch

from common import interleaved_medians, masked_batch  # this folder is on sys.path when run as a script

warnings.filterwarnings("ignore", message=".*is found to be not a nn.Module.*")


def build_pair(size):
    """(cfg, our interleaved `bert`, transformers' BertForMaskedLM of the same shape); BERT has E = H."""
    from transformers import BertConfig, BertForMaskedLM

    from nni_lvbert.config import load_size
    from nni_lvbert.modeling import FixedMLM

    cfg = load_size(size, embedding_size=None)
    cfg.embedding_size = cfg.hidden_size
    ours = FixedMLM(cfg, "sf" * 12)
    hf = BertForMaskedLM(BertConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=12,
                                    num_attention_heads=cfg.num_heads, intermediate_size=cfg.ff_size,
                                    max_position_embeddings=cfg.max_position, hidden_act="gelu",
                                    attn_implementation="sdpa"))
    return cfg, ours, hf


def bench_vs_hf(size, batch, seq, steps):
    cfg, ours, hf = build_pair(size)
    gen = torch.Generator().manual_seed(0)
    ids, mask, labels = masked_batch(cfg.vocab_size, batch, seq, gen)
    steps_by_side = {}
    for name, model, call in [
        ("ours", ours, lambda m: m(ids, mask, labels=labels).loss),
        ("hf", hf, lambda m: m(input_ids=ids, attention_mask=mask, labels=labels).loss),
    ]:
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step(model=model, call=call, opt=opt):
            opt.zero_grad(set_to_none=True)
            call(model).backward()
            opt.step()

        steps_by_side[name] = step
    results = interleaved_medians(steps_by_side, steps, warmup=2)
    tokens = batch * seq
    return {
        "shape": f"bert-{size} E=H={cfg.hidden_size} 12 SA + 12 FF, batch {batch}, seq {seq}",
        "ours_tokens_per_s": round(tokens / results["ours"]),
        "hf_tokens_per_s": round(tokens / results["hf"]),
        "ratio_ours_over_hf": round(results["hf"] / results["ours"], 2),
    }


def bench_layers(size, batch, seq, steps):
    from nni_lvbert.config import load_size
    from nni_lvbert.layers import LAYER_CLASSES, build_layer

    cfg = load_size(size)
    x = torch.randn(batch, seq, cfg.hidden_size, requires_grad=True)
    steps_by_type = {}
    for t in LAYER_CLASSES:
        layer = build_layer(t, cfg).train()

        def step(layer=layer):
            layer(x, None).sum().backward()

        steps_by_type[t] = step
    out = interleaved_medians(steps_by_type, steps * 2, warmup=2)
    return {
        "shape": f"H{cfg.hidden_size} batch {batch} seq {seq}, fwd+bwd",
        "ms": {t: round(v * 1e3, 2) for t, v in out.items()},
        "ratio_dc_over_sa": round(out["dc"] / out["sa"], 2),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="small")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=6)
    a = ap.parse_args()
    torch.manual_seed(0)
    report = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "vs_transformers": bench_vs_hf(a.size, a.batch, a.seq, a.steps),
        "layers": bench_layers(a.size, a.batch, a.seq, a.steps),
        "targets": {"ratio_ours_over_hf": ">= 1.5", "ratio_dc_over_sa": "<= 1.0"},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
