"""Benchmark (not a test): supernet training step (one sampled path) vs the fixed model of the same arch.

Each side runs in its own process (so peak RSS is its own), same arch, same batch, same optimizer (AdamW over all
parameters; the supernet's unused candidates simply get no gradient). Prints one JSON object with the ratios.
    python benchmarks/bench_supernet.py [--size small] [--batch 128] [--seq 128] [--steps 4] [--arch lvbert-small]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import warnings

warnings.filterwarnings("ignore", message=".*is found to be not a nn.Module.*")


def build_side(mode: str, size: str, arch: str, seq: int = 128):
    """(model, select): the supernet (with `select`, what SeededSamplingModule does every step: activate the arch's
    path) or the fixed model of `arch` (`select` does nothing)."""
    import torch

    from nni_lvbert.arch import parse_arch, to_dict
    from nni_lvbert.config import load_size, load_space
    from nni_lvbert.modeling import FixedMLM

    torch.manual_seed(0)
    cfg = load_size(size, max_length=seq)
    spec = load_space("lvbert")
    types = parse_arch(arch, spec)
    if mode == "supernet":
        from nni_lvbert.space import LVBertSpace
        from nni_lvbert.supernet.strategy import SeededRandomOneShot

        model = LVBertSpace(spec, cfg)
        SeededRandomOneShot().mutate_model(model)
        paths = [m for m in model.modules() if hasattr(m, "resample") and hasattr(m, "label")]

        def select():
            memo = to_dict(types)
            for m in paths:
                m.resample(memo=memo)
        return model, select
    return FixedMLM(cfg, types), lambda: None


def run_one(mode: str, size: str, arch: str, batch: int, seq: int, steps: int) -> dict:
    import torch

    from common import masked_batch  # this folder is on sys.path when run as a script

    model, select = build_side(mode, size, arch, seq)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids, mask, labels = masked_batch(model.config.vocab_size, batch, seq)
    times = []
    for i in range(steps + 1):
        t = time.perf_counter()
        select()
        opt.zero_grad(set_to_none=True)
        model(ids, mask, labels=labels).loss.backward()
        opt.step()
        if i:  # first step allocates optimizer state
            times.append(time.perf_counter() - t)
    return {
        "mode": mode,
        "params": sum(p.numel() for p in model.parameters()),
        "step_s": sorted(times)[len(times) // 2],
        "tokens_per_s": batch * seq / sorted(times)[len(times) // 2],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="small")
    ap.add_argument("--arch", default="lvbert-small")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--mode", choices=["supernet", "fixed"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.mode:
        print(json.dumps(run_one(a.mode, a.size, a.arch, a.batch, a.seq, a.steps)))
        return
    res = {}
    for mode in ("fixed", "supernet", "fixed", "supernet"):  # interleaved: noise hits both sides alike
        out = subprocess.run([sys.executable, __file__, "--mode", mode, "--size", a.size, "--arch", a.arch,
                              "--batch", str(a.batch), "--seq", str(a.seq), "--steps", str(a.steps)],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        prev = res.get(mode)
        res[mode] = r if prev is None or r["step_s"] < prev["step_s"] else {**r, "peak_rss_mb": prev["peak_rss_mb"]}
    f, s = res["fixed"], res["supernet"]
    print(json.dumps({
        "shape": f"{a.arch} at {a.size}, batch {a.batch} x seq {a.seq}",
        "fixed": f, "supernet": s,
        "step_time_ratio_supernet_over_fixed": round(s["step_s"] / f["step_s"], 3),
        "peak_rss_ratio_supernet_over_fixed": round(s["peak_rss_mb"] / f["peak_rss_mb"], 3),
        "targets": {"step_time_ratio": "<= 1.05", "peak_rss_ratio": "<= 1.3"},
    }, indent=2))


if __name__ == "__main__":
    main()
