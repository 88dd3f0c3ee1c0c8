"""Benchmark (not a test): how long `lvbert --help` and input errors take to appear, each a fresh process.

Prints one JSON object (the CLI numbers of docs/benchmarks.md come from it): per command the median wall time of
`--repeats` runs, its exit code and last stderr line, and `pass` when the median is under `--limit` seconds (the
errors need no data or weights, so they must come before torch/NNI/Lightning are imported). The commands run in an
empty temporary directory, so nothing they might write lands in the checkout.
    python benchmarks/bench_cli.py [--repeats 3] [--limit 2] [--module]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = [
    ["--help"],
    ["supernet", "train", "--size", "tinny"],
    ["pretrain", "--arch", "sa,ff,dc", "--size", "tiny"],
    ["search", "score", "--supernet", "runs/nonexistent"],
]


def lvbert(module: bool = False) -> list[str]:
    """The console script beside this interpreter (what users run), else (or with `module`) `python -m
    nni_lvbert.cli`."""
    if module:
        return [sys.executable, "-m", "nni_lvbert.cli"]
    script = Path(sys.executable).with_name("lvbert")
    if script.is_file():
        return [str(script)]
    found = shutil.which("lvbert")
    return [found] if found else [sys.executable, "-m", "nni_lvbert.cli"]


def bench(argv: list[str], repeats: int, limit: float, cwd: str, module: bool = False) -> dict:
    times, last = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        last = subprocess.run([*lvbert(module), *argv], capture_output=True, text=True, cwd=cwd, timeout=600)
        times.append(time.perf_counter() - t)
    median = statistics.median(times)
    lines = [x for x in last.stderr.splitlines() if x.strip()]
    return {"command": " ".join(["lvbert", *argv]), "median_s": round(median, 2),
            "runs_s": [round(x, 2) for x in times], "exit": last.returncode, "stderr": lines[-1] if lines else "",
            "pass": median < limit}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--limit", type=float, default=2.0, help="seconds a command may take to pass (default 2)")
    ap.add_argument("--module", action="store_true", help="run `python -m nni_lvbert.cli` instead of the console "
                                                          "script (with PYTHONPATH=OTHER_CHECKOUT: time that one)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as cwd:
        results = [bench(c, args.repeats, args.limit, cwd, args.module) for c in COMMANDS]
    print(json.dumps({"cpus": os.cpu_count(), "load_avg_1min": round(os.getloadavg()[0], 2), "limit_s": args.limit,
                      "results": results, "pass": all(r["pass"] for r in results)}, indent=2))


if __name__ == "__main__":
    main()
