"""What the ranking study's ground truth can resolve, recomputed from ranking.json alone (no models): the split-half
agreement, the perfect-ranker reference and the intervals over resampled orders and seeds (`ranking_stats`), the
order effect per group, paired ranker comparisons, rank intervals of the picks (and whether their group can resolve
a rank), the failed-run rule's sensitivity, and the rankers that share the ground truth's first seed scored against
the other seeds.

`reanalyse(result)` adds these keys to a ranking result (`ranking.summarize` calls it; the existing keys stay as they
are); its Markdown is `ranking_report.py`'s. From the command line:

    python -m nni_lvbert.study.reanalyse runs/study/ranking/ranking.json [--out DIR]

rewrites ranking.json, ranking.md and the plots in DIR (default: beside a file named ranking.json).
"""
from __future__ import annotations

import argparse
import copy
from pathlib import Path

import numpy as np

from ..arch import Arch
from ..atomic import write_json
from ..errors import UserError
from ..safeio import read_json
from .orders import composition
from .ranking_report import ALPHA, FAILED_MADS, RESULT, report
from .ranking_stats import (
    flagged_runs,
    paired_interval,
    perfect_ranker,
    regret_interval,
    relative_tau,
    sensitivity,
    tau_interval,
)
from .stats import (
    ceiling_by_simulation,
    kendall,
    noise_ceiling,
    order_effect,
    paired_bootstrap,
    rank_interval,
    reliability,
)

BASELINE = "spos"  # the default ranker: every other ranker is compared with it (else with the table's first)
SHARES_SEED = ("short", "rerank")  # kinds that train with the study's first seed, one of the ground truth's
# the groups the order effect is tested in: name, and whether an order (its composition) belongs to it
GROUPS = (("all orders", lambda c: True), ("with convolution", lambda c: c["dc"] > 0),
          ("without convolution", lambda c: c["dc"] == 0), ("mixed", lambda c: c["dc"] > 0 and c["sa"] > 0))


def reanalyse(result: dict, resamples: int = 2000) -> dict:
    """The result with the new keys (every bootstrap and simulation seeded by the study's first seed):
    reliability, ceiling_simulated (all orders), groups (order effect, ceilings and each ranker's tau per group),
    searched_rank; per ranker in `rankers`: shares_seed, kendall_tau_other_seeds, vs_baseline (paired bootstrap of
    the tau difference), pick_rank_interval."""

    result = copy.deepcopy(result)  # the caller's result stays as it was
    rows = result["rows"]
    per_seed = np.array([r["seeds"] for r in rows], float)
    truth = per_seed.mean(1)
    k, seed = per_seed.shape[1], result["seeds"][0]
    names = [t["ranker"] for t in result["rankers"]]
    scores = {name: np.array([r[name] for r in rows], float) for name in names}
    comp = [composition(Arch.parse(r["arch"])) for r in rows]

    failed = failed_runs(per_seed)
    reference = perfect_ranker(per_seed, resamples, seed)
    with_failed = {i for i, _ in failed}
    kept = np.ones_like(per_seed, bool)
    for i, j in failed:
        kept[i, j] = False
    truth_kept = (per_seed * kept).sum(1) / kept.sum(1)  # each order's mean over its runs that did not fail
    groups = []
    for name, member in GROUPS:
        idx = [i for i, c in enumerate(comp) if member(c)]
        if len(idx) < 3:
            continue
        y = per_seed[idx]
        effect = order_effect(y)
        groups.append({"group": name, "orders": len(idx), "order_effect": effect, "resolvable": _resolvable(effect),
                       "noise_ceiling": noise_ceiling(y), "reliability": reliability(y),
                       "ceiling_simulated": _simulated(y, resamples, seed),
                       "kendall_tau": {n: kendall(scores[n][idx], truth[idx]) for n in names}})
        clean = [i for i in idx if i not in with_failed]
        if len(clean) < len(idx) and len(clean) >= 3:
            effect = order_effect(per_seed[clean])
            groups[-1]["without_failed"] = {"orders": len(clean), "order_effect": effect,
                                            "resolvable": _resolvable(effect)}
    baseline = BASELINE if BASELINE in names else names[0] if names else None
    for t in result["rankers"]:
        name, s = t["ranker"], scores[t["ranker"]]
        t["shares_seed"] = t.get("kind", name.split(":")[0]) in SHARES_SEED
        t["kendall_tau_without_failed"] = kendall(s, truth_kept) if failed else None
        t["kendall_tau_other_seeds"] = kendall(s, per_seed[:, 1:].mean(1)) if t["shares_seed"] and k > 1 else None
        t["vs_baseline"] = None if name == baseline else {
            "baseline": baseline, **(paired_bootstrap(s, scores[baseline], truth, resamples, seed) or {}),
            "hierarchical": paired_interval(s, scores[baseline], per_seed, resamples, seed)}
        t["kendall_tau_hierarchical"] = tau_interval(s, per_seed, resamples, seed)
        t["relative_tau"] = relative_tau(t["kendall_tau_hierarchical"], reference)
        t["regret_hierarchical"] = regret_interval(s, per_seed, resamples, seed)
        pick = next(i for i, r in enumerate(rows) if r["arch"] == t["pick"])
        t["pick_rank_interval"] = {**rank_interval(per_seed, pick, resamples, seed), **_group_of(comp[pick], groups)}
    searched = [i for i, r in enumerate(rows) if r["role"] == "searched"]
    return {**result, "failed_runs": [{"arch": rows[i]["arch"], "seed": result["seeds"][j],
                                       "score": float(per_seed[i, j]), "order_median": float(np.median(per_seed[i]))}
                                      for i, j in failed],
            "reliability": reliability(per_seed), "perfect_ranker": reference,
            "failed_run_sensitivity": sensitivity(per_seed, scores, sims=resamples, seed=seed),
            "ceiling_simulated": _simulated(per_seed, resamples, seed), "groups": groups, "baseline": baseline,
            "searched_rank": (_searched(rows, searched[0], per_seed, comp, groups, resamples, seed)
                              if searched else None)}


def _searched(rows, i: int, per_seed, comp, groups: list[dict], resamples: int, seed: int) -> dict:
    """The searched order: its rank with the interval over resampled seeds, whether the smallest group holding it
    shows an order effect (else its rank inside that group is not resolvable), and its regret (the best order's
    mean minus its own) with its 95 % interval over resampled seeds."""
    y = np.asarray(per_seed, float)
    cols = np.random.default_rng(seed).integers(0, y.shape[1], (resamples, y.shape[1]))
    values = [float(m.max() - m[i]) for m in (y[:, c].mean(1) for c in cols)]
    regret = {"value": float(y.mean(1).max() - y.mean(1)[i]),
              "ci95": [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))], "resampled": "seeds"}
    return {"arch": rows[i]["arch"], **rank_interval(per_seed, i, resamples, seed), **_group_of(comp[i], groups),
            "regret": regret}


def _group_of(composition: dict, groups: list[dict]) -> dict:
    """The smallest tested group an order belongs to (GROUPS' order: the last that holds it) and whether it shows
    an order effect: a rank inside a group without one is not resolvable."""
    by_name = {g["group"]: g for g in groups}
    member = [name for name, test in reversed(GROUPS) if test(composition) and name in by_name]
    group = by_name[member[0]] if member else None
    return {"group": None if group is None else group["group"],
            "resolvable": None if group is None else group["resolvable"]}


def failed_runs(per_seed) -> list[tuple[int, int]]:
    """(order, seed) index pairs of the runs the declared rule flags (`ranking_stats.flagged_runs` at FAILED_MADS:
    the MAD pooled over the study; 3+ seeds)."""
    return flagged_runs(per_seed, FAILED_MADS)


def _resolvable(effect: dict | None) -> bool | None:
    return None if effect is None or effect["p"] is None else effect["p"] < ALPHA


def _simulated(per_seed, sims: int, seed: int) -> dict:
    return {shape: ceiling_by_simulation(per_seed, sims, seed, shape) for shape in ("normal", "observed")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m nni_lvbert.study.reanalyse", description=__doc__.split("\n\n")[0])
    p.add_argument("result", help="a ranking study's ranking.json")
    p.add_argument("--out", help="where ranking.json, ranking.md and the plots go (default: beside RESULT when it "
                                 "is named ranking.json)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples and simulations (default 2000)")
    args = p.parse_args(argv)
    src = Path(args.result)
    if args.out is None and src.name != RESULT:
        p.error(f"{src} is not named {RESULT}: give --out DIR (the report would overwrite {src.parent}/{RESULT})")
    out = Path(args.out) if args.out else src.parent
    try:
        result = read_json(src, "ranking result")
        if result.get("study") != "ranking":
            raise UserError(f"{src} is not a ranking study's result")
        result = reanalyse(result, args.resamples)
    except UserError as e:
        p.error(str(e))
    out.mkdir(parents=True, exist_ok=True)
    report(result, out)
    write_json(out / RESULT, result)
    print(out / RESULT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
