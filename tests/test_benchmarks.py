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


BENCH_CONCURRENCY = BENCH_GPU.parent / "bench_concurrency.py"


def test_bench_concurrency_quick_writes_its_json(tmp_path):
    out = tmp_path / "concurrency.json"
    r = subprocess.run([sys.executable, str(BENCH_CONCURRENCY), "--quick", "--workdir", str(tmp_path / "work"),
                        "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout)
    assert json.loads(out.read_text()) == report and report["quick"] and report["max_steps"] == 2
    for side, copies in (("alone_today", 1), ("alone", 1), ("pair", 2), ("pair_today", 2)):
        assert len(report[side]["train_seconds"]) == copies and min(report[side]["train_seconds"]) > 0, side
    assert report["aggregate_throughput"] > 0 and report["aggregate_throughput_today"] > 0
    assert report["alone_over_today"] > 0
    cores = report["cpus"]
    today = report["alone_today"]["decision"][0]
    assert today["why"] == "--threads" and report["alone_today"]["cpu_threads"] == [cores]  # every core, as before
    assert report["alone"]["decision"][0]["why"].startswith("1 lvbert process computing")  # alone: torch's choice
    pair = report["pair"]["decision"]
    assert all(d["why"].startswith("2 lvbert processes computing") for d in pair), pair  # both see the other
    assert report["pair"]["cpu_threads"] == [max(1, cores // 2)] * 2
    assert "PASSIVE" in [d["omp_wait_policy"] for d in pair]  # the second one started beside the first
    assert all(d["omp_wait_policy"] is None for d in report["pair_today"]["decision"])  # as before: no policy
