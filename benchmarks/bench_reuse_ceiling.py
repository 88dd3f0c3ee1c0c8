"""How much prefix reuse can save on LV-BERT Algorithm 1's candidates at all (not a test; no torch, seconds).

    python benchmarks/bench_reuse_ceiling.py                                  # synthetic landscapes, 5 seeds each
    python benchmarks/bench_reuse_ceiling.py --history runs/quickstart/search/history.jsonl   # a real search's candidates

Prefix reuse can skip, for a candidate, the slots of its longest prefix shared with ANY candidate scored before it.
With an unbounded cache the work is one slot evaluation per distinct prefix (the nodes of the trie of all scored
candidates), so `24 * candidates / trie nodes` bounds the speed-up of any exact prefix-reuse scheme: no cache
policy, evaluation order within a generation or batching can beat it, and the vocabulary projection and embedding
(paid once per candidate either way) only lower the wall-clock ratio further.

Algorithm 1 is run as specified (P=50, T=20, k=10, 25 crossovers + 25 mutations at p=0.1, seeded, duplicates
re-drawn) on three score landscapes: additive per-slot scores, additive + neighbour interactions, and pure noise.
Prints JSON: the ceiling per landscape and seed, and per generation (later generations share more).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TYPES = ("dc", "sa", "ff", "glu")  # the lvbert space


def trie_work(seq: list[tuple]) -> list[int]:
    """Slot evaluations each candidate needs when every prefix scored before it is still cached."""
    seen, work = set(), []
    for arch in seq:
        d = next((d for d in range(len(arch) - 1, 0, -1) if arch[:d] in seen), 0)
        work.append(len(arch) - d)
        seen.update(arch[:i] for i in range(1, len(arch)))
    return work


def ceilings(seq: list[tuple], generation: list[int]) -> dict:
    work = trie_work(seq)
    slots = len(seq[0])
    per_gen = defaultdict(lambda: [0, 0])
    for g, w in zip(generation, work):
        per_gen[g][0] += slots
        per_gen[g][1] += w
    return {"candidates": len(seq), "slot_evaluations_naive": slots * len(seq),
            "slot_evaluations_unbounded_cache": sum(work), "ceiling": round(slots * len(seq) / sum(work), 3),
            "ceiling_per_generation": [round(n / w, 2) for _, (n, w) in sorted(per_gen.items())]}


def synthetic_search(landscape: str, seed: int, slots: int) -> tuple[list[tuple], list[int]]:
    from nni_lvbert.search.algorithm import Algorithm1, EvolutionConfig

    rng = np.random.default_rng(1000 + seed)
    unary, pair = rng.normal(size=(slots, len(TYPES))), rng.normal(size=(slots - 1, len(TYPES), len(TYPES)))
    config = EvolutionConfig()
    algo = Algorithm1({f"layer{i:02d}": list(TYPES) for i in range(slots)}, config, seed=seed)
    seq, gens = [], []
    while (arch := algo.ask()) is not None:
        t = tuple(TYPES.index(v) for v in arch.values())
        if landscape == "additive":
            score = unary[np.arange(slots), t].sum()
        elif landscape == "pairwise":
            score = unary[np.arange(slots), t].sum() + sum(pair[i, t[i], t[i + 1]] for i in range(slots - 1))
        else:
            score = rng.normal()
        gens.append(algo.generation)
        seq.append(t)
        algo.tell(arch, float(score))
    assert len(seq) == config.budget
    return seq, gens


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--history", action="append", default=[], help="history.jsonl of a search (repeatable)")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--slots", type=int, default=24)
    args = p.parse_args()

    report: dict = {"synthetic": {}}
    for landscape in ("additive", "pairwise", "noise"):
        runs = [ceilings(*synthetic_search(landscape, seed, args.slots)) for seed in range(args.seeds)]
        report["synthetic"][landscape] = {"ceiling_per_seed": [r["ceiling"] for r in runs],
                                          "last_generation_per_seed": [r["ceiling_per_generation"][-1] for r in runs]}
    all_ceilings = [c for v in report["synthetic"].values() for c in v["ceiling_per_seed"]]
    report["synthetic_range"] = [min(all_ceilings), max(all_ceilings)]
    for path in args.history:
        rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        rows = [r for r in rows if r.get("strategy", "evolution") == "evolution"]
        seq = [tuple(r["arch"]) for r in rows]
        report[str(path)] = ceilings(seq, [r["iteration"] for r in rows])
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
