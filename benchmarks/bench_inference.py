"""Benchmark (not a test): inference of searched and reference orders against transformers' BertModel, in PyTorch
eager and in ONNX Runtime (CPU), at batch 1 and 32 x 128 tokens.

Models (one shape, small with E = H so that BertModel has the very same one): the searched order, lvbert-small,
dynamicconv and our `bert` (12 x SA+FF) as `LVBertModel`, and transformers' `BertModel` (no pooler), each exported
the same way (`torch.onnx.export(dynamo=True)`, dynamic batch and sequence, `nni_lvbert.hf.exporting`). Latency: the
median of repeats, every (model, runtime) called in turn in one process (a change of load hits all alike); compare
the ratios. Peak memory: the peak RSS of a fresh process that loads one model in one runtime and runs it, minus
that of a process that does everything but the model. Prints one JSON object.
    taskset -c 1 env OMP_NUM_THREADS=1 python benchmarks/bench_inference.py [--batches 1 32] [--repeats 10]
(about 15 min on one busy core)
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import torch

warnings.filterwarnings("ignore")
SEARCHED = "fccfgfcccgsssfsggcsgfcgc"
ORDERS = {"searched": SEARCHED, "lvbert-small": "lvbert-small", "dynamicconv": "dynamicconv", "bert": "bert"}
REFERENCE = "hf-BertModel"


def config():
    from nni_lvbert.config import load_size

    cfg = load_size("small")
    cfg.embedding_size = cfg.hidden_size  # BertModel has no factorized embedding
    cfg.dropout = cfg.attention_dropout = 0.0
    return cfg


def build(name: str):
    """The model `name` (an ORDERS key or REFERENCE), eval mode, seeded."""
    torch.manual_seed(0)
    cfg = config()
    if name == REFERENCE:
        from transformers import BertConfig, BertModel

        return BertModel(BertConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=12,
                                    num_attention_heads=cfg.num_heads, intermediate_size=cfg.ff_size,
                                    max_position_embeddings=cfg.max_position, hidden_act="gelu",
                                    attn_implementation="sdpa"), add_pooling_layer=False).eval()
    from nni_lvbert.arch import Arch
    from nni_lvbert.config import load_space
    from nni_lvbert.hf import LVBertModel
    from nni_lvbert.hf.convert import hf_config

    return LVBertModel(hf_config(cfg, list(Arch.parse(ORDERS[name], load_space("lvbert"))))).eval()


def inputs(batch: int, seq: int) -> dict:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, config().vocab_size, (batch, seq), generator=gen)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}


def export(name: str, model, folder: Path) -> Path:
    from nni_lvbert.hf.exporting import export_onnx

    if name == REFERENCE:
        model.config.max_position = model.config.max_position_embeddings  # for exporting.dynamic_shapes
        model.config.pad_token_id = model.config.pad_token_id or 0
    return export_onnx(model, folder / f"{name}.onnx", inputs(2, 16))


def session(path: Path, threads: int):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = threads
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def memory_child(name: str, runtime: str, batch: int, seq: int, path: str, threads: int) -> None:
    """In a fresh process: load and run (3 calls) one model in one runtime ('none': everything but the model); prints
    the process's peak RSS (VmHWM: ru_maxrss would carry the parent's peak across fork and exec)."""
    import onnxruntime  # noqa: F401  (imported on every side)

    torch.set_num_threads(threads)
    feed = inputs(batch, seq)
    if runtime == "eager":
        model = build(name)
        with torch.inference_mode():
            for _ in range(3):
                model(**feed)
    elif runtime == "onnxruntime":
        s = session(Path(path), threads)
        for _ in range(3):
            s.run(None, {k: v.numpy() for k, v in feed.items()})
    peak_kb = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                   if line.startswith("VmHWM:"))
    print(peak_kb / 1024)


def peak_mb(name, runtime, batch, seq, path, threads) -> float:
    out = subprocess.run([sys.executable, __file__, "--child", name, runtime, str(batch), str(seq), str(path),
                          str(threads)], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=10, help="timed calls per (model, runtime) at batch < 8")
    ap.add_argument("--repeats-large", type=int, default=5, help="timed calls per (model, runtime) at batch >= 8")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--child", nargs=6, default=None)
    args = ap.parse_args()
    if args.child:
        name, runtime, batch, seq, path, threads = args.child
        return memory_child(name, runtime, int(batch), int(seq), path, int(threads))
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-inference-") as folder:  # five ONNX files of ~70 MB
        print(json.dumps(run(args, Path(folder)), indent=2))


def run(args, folder: Path) -> dict:
    from nni_lvbert.search.latency import median_ms

    names = [*ORDERS, REFERENCE]
    models = {n: build(n) for n in names}
    paths = {n: export(n, m, folder) for n, m in models.items()}
    sessions = {n: session(p, args.threads) for n, p in paths.items()}
    report = {"note": "CPU pinned with taskset and shared with other jobs; one thread (torch and onnxruntime)",
              "torch": torch.__version__, "seq": args.seq, "shape": "small, E = H = 256, 24 slots / 12 BERT layers",
              "searched": SEARCHED, "batches": {}}
    for batch in args.batches:
        feed = inputs(batch, args.seq)
        numpy_feed = {k: v.numpy() for k, v in feed.items()}
        calls = {}
        for n in names:
            calls[f"{n}/eager"] = lambda m=models[n], f=feed: m(**f)
            calls[f"{n}/onnxruntime"] = lambda s=sessions[n], f=numpy_feed: s.run(None, f)
        with torch.inference_mode():
            ms = median_ms(calls, args.repeats if batch < 8 else args.repeats_large, warmup=2 if batch < 8 else 1)
        rows = {}
        for n in names:
            for runtime in ("eager", "onnxruntime"):
                key = f"{n}/{runtime}"
                peak = peak_mb(n, runtime, batch, args.seq, paths[n], args.threads)
                rows[key] = {"ms": round(ms[key], 2), "sequences_per_s": round(batch * 1e3 / ms[key], 1),
                             "peak_rss_mb": round(peak, 1),
                             # > 1: faster than BertModel in the same runtime
                             "throughput_vs_BertModel": round(ms[f"{REFERENCE}/{runtime}"] / ms[key], 3)}
        base = peak_mb(REFERENCE, "none", batch, args.seq, "-", args.threads)
        for row in rows.values():
            row["peak_rss_above_baseline_mb"] = round(row["peak_rss_mb"] - base, 1)
        report["batches"][str(batch)] = {"baseline_rss_mb": round(base, 1), "runs": rows}
    return report


if __name__ == "__main__":
    main()
