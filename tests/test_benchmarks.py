"""The GPU benchmark script runs (on the CPU, tiny shapes): a GPU session has minutes, not time to debug it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH_GPU = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_gpu.py"


def test_bench_gpu_runs_every_part_on_the_cpu(tmp_path):
    out = tmp_path / "gpu.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(BENCH_GPU), "--device", "cpu", "--size", "tiny", "--batch", "2", "--seq",
                        "16", "--steps", "1", "--compile", "--compile-backend", "aot_eager", "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout)
    assert json.loads(out.read_text()) == report
    assert not report["bf16_autocast"] and report["peak_bf16_flops"] is None
    assert report["model"]["ours"]["tokens_per_s"] > 0 and report["model"]["ours_over_hf"] > 0
    assert report["model"]["ours_device_counts_over_hf"] > 0
    compiled = report["model_compiled"]  # aot_eager: no C++ build here, and no CUDA graphs (inductor only)
    assert compiled["ours_compiled_over_hf"] > 0 and compiled["ours_whole_default_over_hf"] > 0, compiled
    layers = {"dc", "sa", "ff", "glu", "dc[conv1d+band]", "dc[shifted+band]", "dc[conv1d+unfold]", "dc[shifted+unfold]"}
    assert set(report["layers"]["ms"]) == layers | {f"{t}_compiled" for t in layers}
    assert report["layers"]["best_dc"] in layers and report["layers"]["best_dc_compiled"].endswith("_compiled")
    assert report["layers"]["dc_over_sa"] > 0 and report["layers"]["dc_over_sa_compiled"] > 0
    assert report["supernet"]["supernet_over_fixed"] > 0
    r = subprocess.run([sys.executable, str(BENCH_GPU), "--device", "cuda", "--parts", "layers"], capture_output=True,
                       text=True, env={**env, "CUDA_VISIBLE_DEVICES": ""}, timeout=600)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: --device cuda")
