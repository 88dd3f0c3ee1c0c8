"""Benchmark (not a test): two trainings on one machine with the fair-share defaults vs one alone (issue 55 item 2).

Runs `lvbert supernet train --size tiny --max-steps 80` (each run's `train_seconds` from its meta.json), one after
another, side by side in one invocation:

    alone_today   one alone as before the fair share: --threads = all cores, OMP_WAIT_POLICY unset
    alone         one alone with the defaults (nni_lvbert/threads.py: a lone run keeps torch's own choice)
    pair          two at once with the defaults (a fair share of the cores each; OMP_WAIT_POLICY=PASSIVE beside
                  another lvbert)
    pair_today    two at once as before: --threads = all cores each, OMP_WAIT_POLICY unset (the 5x slowdown)

and prints (and with --out writes) one JSON object. `aggregate_throughput` = 2 x alone / the pair's slower run
(goal >= 1.2); `alone_over_today` = alone / alone_today (goal: not above 1, up to noise). The children share a
private data cache (prepared once by an untimed warm-up run) and a private registry of computing processes
($LVBERT_CACHE; each "today" run one of its own, so that it computes as if alone), and get no $OMP_NUM_THREADS,
$MKL_NUM_THREADS or $OMP_WAIT_POLICY (those would decide instead of the defaults measured here). Measure on an idle
machine: another job on the cores makes every number wrong.

    python benchmarks/bench_concurrency.py [--max-steps 80] [--out concurrency.json] [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nni_lvbert.threads import cores

QUICK = ["--max-docs", "120", "--batch-size", "8", "--val-batches", "1"]  # --quick: seconds, for a unit test


def child_env(registry: Path) -> dict:
    """The environment of a training: `registry` as its $LVBERT_CACHE (where computing processes register; a
    private one per run for "today": each then computes as if alone, as before the fair share)."""
    drop = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "LVBERT_CONCURRENCY")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "LVBERT_CACHE": str(registry)}


def command(work: Path, out: Path, steps: int, quick: bool, today: bool, threads: int | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "nni_lvbert.cli", "supernet", "train", "--size", "tiny", "--max-steps", str(steps),
           "--out", str(out), "--cache-dir", str(work / "data"), "--no-progress", "--overwrite",
           *(QUICK if quick else [])]
    return cmd + (["--threads", str(threads or cores())] if today else [])


def run_side(work: Path, name: str, copies: int, steps: int, quick: bool, today: bool,
             threads: int | None = None) -> dict:
    """`copies` trainings started at once (`threads`: their --threads, default: all cores "today", else none);
    each one's train_seconds and threads (meta.json)."""
    outs = [work / f"{name}-{i}" for i in range(copies)]
    start = time.perf_counter()
    procs = [subprocess.Popen(command(work, o, steps, quick, today, threads), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True,
                              env=child_env(work / (f"registry-{o.name}" if today else "registry")))
             for o in outs]
    errors = [p.communicate()[1] for p in procs]
    wall = time.perf_counter() - start
    for p, err in zip(procs, errors):
        if p.returncode:
            raise SystemExit(f"error: {name} training failed (exit {p.returncode}): {err.strip()[-600:]}")
    metas = [json.loads((o / "meta.json").read_text()) for o in outs]
    return {"train_seconds": [round(m["train_seconds"], 3) for m in metas], "wall_seconds": round(wall, 3),
            "cpu_threads": [m["cpu_threads"] for m in metas],
            "decision": [m.get("cpu_threads_decision") for m in metas]}


def report(sides: dict, steps: int, quick: bool) -> dict:
    alone = sides["alone"]["train_seconds"][0]
    today = sides["alone_today"]["train_seconds"][0]
    pair, pair_today = max(sides["pair"]["train_seconds"]), max(sides["pair_today"]["train_seconds"])
    return {"cpus": cores(), "load_avg_1min": round(os.getloadavg()[0], 2), "max_steps": steps,
            "quick": quick, **sides,
            "aggregate_throughput": round(2 * alone / pair, 3),  # two runs' steps per second / one alone's
            "aggregate_throughput_today": round(2 * today / pair_today, 3),
            "alone_over_today": round(alone / today, 3),
            "goals": {"aggregate_throughput": ">= 1.2", "alone_over_today": "<= 1 (up to noise)"}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-steps", type=int, default=80, help="steps of each training (default 80)")
    ap.add_argument("--quick", action="store_true", help="a few steps on 120 documents: checks that it runs")
    ap.add_argument("--workdir", default=None, help="where the runs and their data cache go (default: a temp dir)")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    args = ap.parse_args(argv)
    steps = 2 if args.quick and args.max_steps == 80 else args.max_steps
    with tempfile.TemporaryDirectory(prefix="lvbert-concurrency-") as tmp:
        work = Path(args.workdir or tmp)
        run_side(work, "warmup", 1, 1, args.quick, True, threads=1)  # the data prepared once, untimed
        sides = {"alone_today": run_side(work, "alone_today", 1, steps, args.quick, True),
                 "alone": run_side(work, "alone", 1, steps, args.quick, False),
                 "pair": run_side(work, "pair", 2, steps, args.quick, False),
                 "pair_today": run_side(work, "pair_today", 2, steps, args.quick, True)}
    result = report(sides, steps, args.quick)
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
