"""Search throughput on the `tiny` supernet (not a test). Prints one JSON object.

    python benchmarks/bench_search.py --supernet runs/quickstart/supernet # a trained tiny supernet
    python benchmarks/bench_search.py                                       # builds an untrained tiny one
    python benchmarks/bench_search.py --size small --device cuda --evaluations 200   # GPU: scoring at small

Measures, on one candidate sequence (LV-BERT Algorithm 1 driven by the real scores):
- the whole Algorithm-1 budget in process with prefix reuse (P + (T-1)(N_cro + N_mut) = 1000 evaluations, each on
  >= --val-tokens validation tokens): wall time, candidates/s, validation tokens/s; with --evaluations N < budget
  the first N are measured and the total is extrapolated (labelled);
- the same candidates without prefix reuse (all of them, or an evenly spread --naive-sample of them): speedup and
  the largest score difference; the slot-evaluation count an unbounded cache would need (the reuse ceiling);
- the naive per-candidate path of a FunctionalEvaluator: `space.freeze(arch)` + full forward with the vocabulary
  projection at every position (a few candidates);
- the nnictl path: seconds per trial of `python -m nni_lvbert.search.trial` as a subprocess (what each nnictl
  trial runs), and optionally a real nnictl experiment (--nnictl-trials N): wall seconds per trial.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
warnings.filterwarnings("ignore")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def build_untrained(root: Path, size: str = "tiny") -> Path:
    """An untrained lvbert supernet of `size` on the embedded corpus (data prepared or reused from the cache)."""
    from nni_lvbert.config import load_size, load_space
    from nni_lvbert.data import prepare
    from nni_lvbert.rundir import RunDir
    from nni_lvbert.space import LVBertSpace
    from nni_lvbert.supernet.rundir import WEIGHTS
    from nni_lvbert.supernet.strategy import SeededRandomOneShot

    spec = load_space("lvbert")
    cfg = load_size(size)
    data = prepare(None, size, vocab_size=cfg.vocab_size, max_length=cfg.max_length)
    cfg.vocab_size = data.vocab_size
    space = LVBertSpace(spec, cfg)
    SeededRandomOneShot().mutate_model(space)
    run = RunDir(root / f"untrained-{size}", "supernet")
    run.path.mkdir(parents=True, exist_ok=True)
    run.save_static(spec, cfg, data.tokenizer_dir)
    run.save_weights(space, WEIGHTS)
    run.write_json("meta.json", {"run_dir": str(run), "size": size, "steps": 0, "data": {"path": str(data.path)}})
    return run.path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--supernet", default=None, help="supernet run directory (default: build an untrained one)")
    p.add_argument("--size", default="tiny", help="size of the untrained supernet built without --supernet")
    p.add_argument("--device", default="auto", help="scoring device: auto (default: a GPU if any), cpu, cuda, ...")
    p.add_argument("--val-tokens", type=int, default=16384)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--cache-mb", type=int, default=1024, help="prefix cache memory (default 1024, the CLI's)")
    p.add_argument("--evaluations", type=int, default=None, help="measure only the first N (default: whole budget)")
    p.add_argument("--naive-sample", type=int, default=200, help="candidates re-scored without prefix reuse (0: all)")
    p.add_argument("--freeze-sample", type=int, default=5, help="candidates scored the FunctionalEvaluator way")
    p.add_argument("--trial-runs", type=int, default=2, help="subprocess trials timed (0: skip)")
    p.add_argument("--nnictl-trials", type=int, default=0, help="also run a real nnictl experiment of N trials")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    import numpy as np
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from bench_reuse_ceiling import trie_work  # this folder is on sys.path when run as a script
    from nni_lvbert.search.algorithm import Algorithm1, EvolutionConfig
    from nni_lvbert.search.scorer import SupernetScorer

    report: dict = {"machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                                "load_avg_start": [round(x, 2) for x in os.getloadavg()],
                                "python": platform.python_version(), "torch": torch.__version__}}
    tmp = Path(tempfile.mkdtemp(prefix="bench_search_"))
    if args.supernet:
        run = Path(args.supernet)
        report["supernet"] = str(run)
    else:
        run = build_untrained(tmp, args.size)
        report["supernet"] = f"untrained {args.size} supernet built by the benchmark (scores ~equal: the " \
                             "candidate sequence, and so prefix reuse, differ from a trained supernet's)"
    t0 = time.perf_counter()
    cached = SupernetScorer(run, val_tokens=args.val_tokens, batch_size=args.batch_size, prefix_cache=True,
                            cache_mb=args.cache_mb, device=args.device)
    report["device"] = str(cached.device)
    report["load_seconds"] = round(time.perf_counter() - t0, 2)
    report["validation"] = {k: cached.val_stats[k] for k in ("sequences", "tokens", "masked_tokens")}
    report["model"] = {"slots": cached.spec.slots, "hidden": cached.cfg.hidden_size, "vocab": cached.cfg.vocab_size,
                       "max_length": cached.cfg.max_length}

    # 1. Algorithm 1 in process with prefix reuse. Every k-th candidate is also scored right away without prefix
    #    reuse (and the first few the FunctionalEvaluator way), so both see the same machine load.
    cfg = EvolutionConfig()
    algo = Algorithm1({label: list(cached.spec.candidates) for label in cached.labels}, cfg, seed=args.seed)
    limit = min(args.evaluations or cfg.budget, cfg.budget)
    naive = SupernetScorer(run, val_tokens=args.val_tokens, batch_size=args.batch_size, prefix_cache=False,
                           device=args.device)
    every = 1 if args.naive_sample <= 0 else max(1, limit // max(1, args.naive_sample))
    seq, times, scores = [], [], []
    pairs, diffs, freeze_times = [], [], []
    side = 0.0
    start = time.perf_counter()
    while len(seq) < limit:
        arch = algo.ask()
        if arch is None:
            break
        types = list(arch.values())
        t = time.perf_counter()
        score = cached.score(types)
        times.append(time.perf_counter() - t)
        seq.append(tuple(types))
        scores.append(score)
        if (len(seq) - 1) % every == 0:
            t = time.perf_counter()
            diffs.append(abs(naive.score(types) - score))
            pairs.append((times[-1], time.perf_counter() - t))
            if len(freeze_times) < args.freeze_sample:
                t2 = time.perf_counter()
                assert abs(freeze_full_vocab(cached, types) - score) < 1e-6
                freeze_times.append(time.perf_counter() - t2)
            side += time.perf_counter() - t
        algo.tell(arch, score)
    wall = time.perf_counter() - start - side
    unbounded = sum(trie_work(seq))  # slot evaluations if every prefix ever computed stayed cached
    tokens = cached.val_stats["tokens"]
    report["in_process"] = {
        "evaluations": len(seq), "budget": cfg.budget, "wall_seconds": round(wall, 1),
        "candidates_per_s": round(len(seq) / wall, 2), "val_tokens_per_s": round(len(seq) * tokens / wall),
        "full_budget_seconds": round(wall * cfg.budget / len(seq), 1),
        "full_budget_is": "measured" if len(seq) == cfg.budget else f"extrapolated from {len(seq)} evaluations",
        "slot_evaluations": cached.slots_computed, "naive_slot_evaluations": len(seq) * cached.spec.slots,
        "unbounded_cache_slot_evaluations": unbounded,
        "prefix_cache_mb": round(cached.cache.bytes / 2**20, 1), "prefix_cache_budget_mb": args.cache_mb,
        "best": {"arch": "".join({"dc": "c", "sa": "s", "ff": "f", "glu": "g"}[t] for t in seq[int(np.argmax(scores))]),
                 "score": max(scores)},
    }
    cached_sum, naive_sum = sum(c for c, _ in pairs), sum(n for _, n in pairs)
    report["prefix_reuse"] = {
        "candidates_compared": len(pairs), "max_abs_score_diff": max(diffs),
        "naive_seconds_per_candidate": round(naive_sum / len(pairs), 4),
        "cached_seconds_per_candidate": round(cached_sum / len(pairs), 4),
        "speedup_wall": round(naive_sum / cached_sum, 2),
        "speedup_slot_evaluations": round(len(seq) * cached.spec.slots / cached.slots_computed, 2),
        "ceiling_unbounded_cache": round(len(seq) * cached.spec.slots / unbounded, 2),
    }
    if freeze_times:
        per = sum(freeze_times) / len(freeze_times)
        report["freeze_full_vocab"] = {
            "candidates": len(freeze_times), "seconds_per_candidate": round(per, 4),
            "speedup_of_in_process_scorer": round(per / (cached_sum / len(pairs)), 2),
            "speedup_without_prefix_reuse": round(per / (naive_sum / len(pairs)), 2)}

    # 4. the nnictl path
    if args.trial_runs:
        trial_times = []
        for i in range(args.trial_runs):
            arch = "".join({"dc": "c", "sa": "s", "ff": "f", "glu": "g"}[t] for t in seq[(i * 97) % len(seq)])
            cmd = [sys.executable, "-m", "nni_lvbert.search.trial", "--supernet", str(run), "--arch", arch,
                   "--val-tokens", str(args.val_tokens), "--batch-size", str(args.batch_size)]
            if args.threads:
                cmd += ["--threads", str(args.threads)]
            t = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
            trial_times.append(time.perf_counter() - t)
            if proc.returncode != 0:
                raise SystemExit(proc.stderr)
            line = next(x for x in proc.stdout.splitlines() if x.startswith("{"))
            assert abs(json.loads(line)["mlm_acc"] - cached.score(arch)) < 1e-6
        per = sum(trial_times) / len(trial_times)
        report["nnictl_trial_subprocess"] = {
            "runs": len(trial_times), "seconds_per_trial": round(per, 2),
            "full_budget_seconds_sequential": round(per * cfg.budget),
            "slowdown_vs_in_process": round(per / (wall / len(seq)), 1)}
    if args.nnictl_trials:
        report["nnictl_experiment"] = nnictl_experiment(run, args, tmp)
    report["machine"]["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=2))
    return 0


def freeze_full_vocab(scorer, types) -> float:
    """The naive FunctionalEvaluator path: `space.freeze` (deep copy) + full forward, vocabulary at every position."""
    import torch

    with torch.inference_mode():
        model = scorer.space.freeze(dict(zip(scorer.labels, types))).eval()
        correct = count = 0
        for b in scorer.batches:
            labels = torch.full_like(b.input_ids, -100)
            labels.view(-1)[b.positions] = b.target
            mask = b.mask.long() if b.mask is not None else None
            out = model.mlm(model.encode(b.input_ids, mask, b.token_type_ids), labels, only_masked=False)
            correct += int(out.correct)
            count += int(out.count)
    return correct / count


def nnictl_experiment(run: Path, args, tmp: Path) -> dict:
    """A real nnictl experiment of N sequential trials through `lvbert search nnictl`: wall seconds per trial."""
    import socket

    from tests.nnictl_helpers import wait_for_trials

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "nni_lvbert.cli", "search", "nnictl", "--supernet", str(run), "--port", str(port),
           "--out", str(tmp / "nnictl"), "--max-trials", str(args.nnictl_trials), "--concurrency", "1", "--json"]
    if args.threads:
        cmd += ["--trial-threads", str(args.threads)]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    created = time.perf_counter() - t
    exp_id = json.loads(proc.stdout)["experiment"]
    try:
        jobs = wait_for_trials(port, args.nnictl_trials, timeout=60 * args.nnictl_trials + 120)
    finally:
        subprocess.run([str(Path(sys.executable).with_name("nnictl")), "stop", exp_id], capture_output=True)
    total = time.perf_counter() - t
    durations = [(j["endTime"] - j["startTime"]) / 1000 for j in jobs if j.get("endTime") and j.get("startTime")]
    return {"trials": len(jobs), "create_seconds": round(created, 1), "wall_seconds": round(total, 1),
            "wall_seconds_per_trial": round((total - created) / len(jobs), 2),
            "trial_duration_mean": round(sum(durations) / len(durations), 2) if durations else None}


if __name__ == "__main__":
    sys.exit(main())
