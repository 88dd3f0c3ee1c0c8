"""What the ranking study's ground truth can resolve, recomputed from ranking.json alone (no models): the corrected
noise ceiling, the perfect-ranker reference and the intervals over resampled orders and seeds (`ranking_stats`), the
order effect per group, paired ranker comparisons, rank intervals of the picks (and whether their group can resolve
a rank), the failed-run rule's sensitivity, and the rankers that share the ground truth's first seed scored against
the other seeds.

`reanalyse(result)` adds these keys to a ranking result (`run_ranking` calls it; the existing keys stay as they
are); `report_lines` and the `*_cell` helpers are its Markdown for `ranking._report`. From the command line:

    python -m nni_lvbert.study.reanalyse runs/study/ranking/ranking.json [--out DIR]

rewrites ranking.json, ranking.md and the plots in DIR (default: beside a file named ranking.json).
"""
from __future__ import annotations

from .ranking_stats import (flagged_runs, paired_interval, perfect_ranker, regret_interval, relative_tau,
                            sensitivity, tau_interval)
from .stats import (ceiling_by_simulation, kendall, markdown_table, noise_ceiling, order_effect, paired_bootstrap,
                    rank_interval, reliability)

BASELINE = "spos"  # the default ranker: every other ranker is compared with it (else with the table's first)
SHARES_SEED = ("short", "rerank")  # kinds that train with the study's first seed, one of the ground truth's
ALPHA = 0.05  # an order effect with p below this is detectable
# The failed-run rule, declared once: a run more than FAILED_MADS median absolute deviations below its order's
# median, the MAD pooled over every run of the study (each run's distance from its order's median); only runs below
# count (scores are "higher is better"). It was set after seeing the data (a training stuck on the unigram plateau,
# 0.055 against its order's 0.22, lies 34-250 such deviations below; no other run lay beyond 10), so every report
# shows the answer's sensitivity to it: no rule, 10, 20 and 50 (`ranking_stats.sensitivity`). The ANOVA counts a
# failed run as seed noise; the group tests are repeated without the orders that have one.
FAILED_MADS = 20
# the groups the order effect is tested in: name, and whether an order (its composition) belongs to it
GROUPS = (("all orders", lambda c: True), ("with convolution", lambda c: c["dc"] > 0),
          ("without convolution", lambda c: c["dc"] == 0), ("mixed", lambda c: c["dc"] > 0 and c["sa"] > 0))


def reanalyse(result: dict, resamples: int = 2000) -> dict:
    """The result with the new keys (every bootstrap and simulation seeded by the study's first seed):
    reliability, ceiling_simulated (all orders), groups (order effect, ceilings and each ranker's tau per group),
    searched_rank; per ranker in `rankers`: shares_seed, kendall_tau_other_seeds, vs_baseline (paired bootstrap of
    the tau difference), pick_rank_interval."""
    import copy

    import numpy as np

    from ..arch import Arch
    from .orders import composition

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
        t["pick_rank_interval"] = {**rank_interval(per_seed, pick, resamples, seed),
                                   **_group_of(comp[pick], groups)}
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
    import numpy as np

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


# --- Markdown ------------------------------------------------------------------------------------------------------
def _num(v, digits: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def _range(r) -> str:
    return f"[{r[0]:.2f}, {r[1]:.2f}]" if r else "n/a"


def ceiling_lines(result: dict) -> list[str]:
    """The perfect-ranker reference: the Kendall tau a ranker knowing every order's true value is expected to reach
    against the k-seed mean (an expectation with a spread, not an upper bound), under the residual-bootstrap noise
    model, then under normal theory and the normal simulations (which assume normal noise with the pooled sd)."""
    rel, sim, k = result.get("reliability"), result.get("ceiling_simulated"), len(result["seeds"])
    if not rel:
        return []
    lines = []
    ref = result.get("perfect_ranker")
    if ref:
        clean = next((s for s in result.get("failed_run_sensitivity") or [] if s["mads"] == FAILED_MADS), None)
        without = (f"; without the orders with a flagged run {_sim_cell(clean['perfect_ranker'])}"
                   if clean and clean["flagged"] and clean["perfect_ranker"] else "")
        lines.append(f"- perfect-ranker reference (the Kendall tau a ranker that knows every order's true value is "
                     f"expected to reach against the {k}-seed mean; an expectation, not a ceiling: a ranker can "
                     f"exceed it by chance or by sharing the ground truth's seed noise): **{_sim_cell(ref)}** (mean "
                     f"[5-95 %] over {ref['sims']} draws; noise: the mean of {k} residuals resampled from the two-way "
                     f"fit's own, so a failed run's tail stays in the model){without}")
    lines.append(f"- normal theory (assumes normal seed noise with the pooled sd, mis-specified when a run failed): "
                 f"the {k}-seed mean's reliability {rel['reliability_k']:.2f} (single seed {rel['rho1']:.2f}; each "
                 f"split's tau -> r = sin(pi tau / 2), Spearman-Brown for its unequal halves, averaged over the "
                 f"splits) gives Kendall tau {rel['kendall_tau_noise_free']:.2f}"
                 if ref else
                 f"- corrected ceiling: the {k}-seed mean's reliability is **{rel['reliability_k']:.2f}** (single seed "
                 f"{rel['rho1']:.2f}; each split's tau -> r = sin(pi tau / 2), Spearman-Brown for its unequal halves, "
                 f"averaged over the splits), so a noise-free ranker would reach **Kendall tau "
                 f"{rel['kendall_tau_noise_free']:.2f}** against the {k}-seed mean (normal theory)")
    if sim:
        lines.append(("- simulated with normal noise" if ref else "- model-based ceiling") + " (simulated from the "
                     "two-way ANOVA's order and residual variances, "
                     f"{sim['normal']['sims']} draws; mean [5-95 %]): {_sim_cell(sim['normal'])} with normal true "
                     f"values, {_sim_cell(sim['observed'])} with the observed means' shape (shrunk to the fitted "
                     "variance)")
    return lines


def reference_table(result: dict) -> list[str]:
    """Each ranker against the perfect-ranker reference, with intervals over resampled orders and seeds."""
    ref = result.get("perfect_ranker")
    if not ref or not any(t.get("kendall_tau_hierarchical") for t in result["rankers"]):
        return []
    k = len(result["seeds"])
    rows = []
    for t in result["rankers"]:
        tau, rel, reg = t["kendall_tau_hierarchical"], t.get("relative_tau"), t["regret_hierarchical"]
        vs = (t.get("vs_baseline") or {}).get("hierarchical")
        rows.append([t["ranker"], f"{_num(tau['value'], 2)} {_range(tau['ci95'])}",
                     "n/a" if not rel else f"{rel['fraction']:.2f} {_range(rel['ci95'])}",
                     "—" if vs is None else f"{_signed(vs['value'])} {_range(vs['ci95'])}",
                     f"{_num(reg['value'], 4)} {_range4(reg['ci95'])}"])
    return [f"Against the perfect-ranker reference ({_sim_cell(ref)}), every interval over the orders **and** the "
            f"ground truth's {k} seeds resampled (hierarchical bootstrap, 95 %): a ranker's tau, its tau as a "
            f"fraction of the reference's expectation, its paired difference from {result.get('baseline')}, and "
            "the regret of its pick.\n",
            markdown_table(["ranker", "Kendall tau [95 %, orders and seeds]", "fraction of the perfect ranker's tau",
                            f"tau - {result.get('baseline')} [95 %, paired]", "regret [95 %]"], rows)]


def _p_cell(p) -> str:
    return "n/a" if p is None else _num(p, 3) if p >= 1e-3 else f"{p:.1g}"


def _signed(v) -> str:
    return "n/a" if v is None else f"{v:+.2f}"


def _range4(r) -> str:
    return f"[{r[0]:.4f}, {r[1]:.4f}]" if r else "n/a"


def sensitivity_table(result: dict) -> list[str]:
    """The answer under each failed-run rule (no rule, 10, 20, 50 MADs)."""
    rows = result.get("failed_run_sensitivity")
    if not rows:
        return []
    names = [t["ranker"] for t in result["rankers"]]
    return [f"Sensitivity to the failed-run rule (declared: {FAILED_MADS} median absolute deviations below the "
            "order's median, the MAD pooled over every run of the study): the runs each rule flags, each ranker's "
            "tau against the ground truth without them, the order effect without the orders that have one, and "
            "the perfect-ranker reference without those orders.\n",
            markdown_table(["rule", "flagged runs", "order effect p", "perfect ranker [5-95 %]", *names],
                           [["none" if r["mads"] is None else f"{r['mads']} MADs", r["flagged"],
                             _p_cell(r["order_effect_p"]), _sim_cell(r["perfect_ranker"]),
                             *[_num(r["kendall_tau"][n], 2) for n in names]] for r in rows])]


def _sim_cell(s: dict | None) -> str:
    if not s:
        return "n/a"
    return f"{s['kendall_tau']:.2f} {_range(s['range90'])}" if s["kendall_tau"] is not None else \
        f"n/a ({s.get('undefined')})"


def _effect_cell(e: dict | None) -> tuple[str, str]:
    if not e or e["F"] is None:
        return "n/a", "n/a"
    return f"F({e['df'][0]}, {e['df'][1]}) = {e['F']:.2f}", f"{e['p']:.2g}"


def group_tables(result: dict) -> list[str]:
    """The order effect and the ceilings per group, then each ranker's tau inside each group ("not resolvable at
    this budget" where the group shows no order effect)."""
    groups, k = result.get("groups"), len(result["seeds"])
    if not groups:
        return []
    out = ["## Order effect and " + ("perfect-ranker reference" if result.get("perfect_ranker") else "ceiling")
           + " per group\n",
           f"Two-way ANOVA of the ground truth (order + seed, one model per cell): is an order effect detectable "
           f"against the seed-to-seed noise (p < {ALPHA})? Where it is not, the orders of the group are not "
           f"resolvable at this budget, and no tau inside it says whether a ranker orders them.\n",
           markdown_table(["group", "orders", "order effect", "p", "between-order sd", "residual sd", "verdict"],
                          [[label, g["orders"], *_effect_cell(g["order_effect"]),
                            _num((g["order_effect"] or {}).get("between_sd"), 4),
                            _num((g["order_effect"] or {}).get("residual_sd"), 4), _verdict(g)]
                           for label, g in _with_clean_rows(groups)]),
           *_failed_lines(result),
           *sensitivity_table(result),
           markdown_table(["group", "split-half tau (range over the splits)", "single-seed reliability",
                           f"{k}-seed reliability", "noise-free tau (reliability)", "simulated, normal [5-95 %]",
                           "simulated, observed shape [5-95 %]"],
                          [[g["group"], _split_cell(g["noise_ceiling"]), _num((g["reliability"] or {}).get("rho1"), 2),
                            _num((g["reliability"] or {}).get("reliability_k"), 2),
                            _num((g["reliability"] or {}).get("kendall_tau_noise_free"), 2),
                            _sim_cell((g["ceiling_simulated"] or {}).get("normal")),
                            _sim_cell((g["ceiling_simulated"] or {}).get("observed"))] for g in groups])]
    inner = [g for g in groups if g["group"] != "all orders"]
    note = {True: "", False: ": not resolvable at this budget", None: ": untested"}
    header = [f"tau {g['group']} ({g['orders']})" + (": resolvable without its failed runs" if not g["resolvable"] and
                                                     (g.get("without_failed") or {}).get("resolvable")
                                                     else note[g["resolvable"]]) for g in inner]
    out.append(markdown_table(["ranker", *header], [[name, *[_num(g["kendall_tau"][name]) for g in inner]]
                                                    for name in (t["ranker"] for t in result["rankers"])]))
    return out


def _with_clean_rows(groups: list[dict]):
    """(label, entry) of each group, each followed by its test without the orders that have a failed run."""
    for g in groups:
        yield g["group"], g
        if g.get("without_failed"):
            yield f"{g['group']}, without the orders with a failed run", g["without_failed"]


def _failed_lines(result: dict) -> list[str]:
    failed = result.get("failed_runs")
    if not failed:
        return []
    runs = "; ".join(f"`{f['arch']}` seed {f['seed']}: {f['score']:.4f} (its order's median {f['order_median']:.4f})"
                     for f in failed)
    return [f"Failed runs (more than {FAILED_MADS} median absolute deviations below their order's median: at tiny, a "
            f"training that never left the unigram plateau): {runs}. The ANOVA counts such a run as seed noise, so each group with one is tested "
            "again without its orders that have one (the rows marked so); the ground truth and every tau keep "
            "them. Against the ground truth without them (each order's mean over its other seeds), Kendall tau: "
            + ", ".join(f"{t['ranker']} {_num(t.get('kendall_tau_without_failed'))}" for t in result["rankers"])
            + ".\n"]


def _verdict(g: dict) -> str:
    if g["resolvable"] is None:
        return "n/a"
    return "order effect detectable" if g["resolvable"] else "no order effect detectable: not resolvable at this budget"


def _split_cell(c: dict | None) -> str:
    return f"{c['kendall_tau']:.3f} ({c['min']:.2f} to {c['max']:.2f})" if c else "n/a"


def searched_line(result: dict) -> list[str]:
    s = result.get("searched_rank")
    if not s:
        return []
    rank = (f"rank {s['rank']} of {result['orders']} in the {len(result['seeds'])}-seed mean, per seed "
            f"{'/'.join(map(str, s['per_seed']))}, {round(100 * s['level'])} % interval over resampled seeds "
            f"{s['interval'][0]} to {s['interval'][1]}")
    if "regret" not in s:
        return [f"- the searched order `{s['arch']}`: {rank}"]
    regret = f"regret {s['regret']['value']:.4f} {_range4(s['regret']['ci95'])} (95 %, resampled seeds)"
    if s["resolvable"] is False:
        return [f"- the searched order `{s['arch']}` is in the group '{s['group']}', which shows no order effect: "
                f"its rank inside it is not resolvable ({rank}); what the data support is its group and its "
                f"{regret}"]
    return [f"- the searched order `{s['arch']}`: {rank}; {regret}"]


def vs_cell(t: dict) -> str:
    v = t.get("vs_baseline")
    if v is None or "difference" not in v:
        return "—" if v is None else "n/a"
    if v.get("hierarchical"):  # orders and seeds resampled
        h = v["hierarchical"]
        return f"{_signed(h['value'])} {_range(h['ci95'])}"
    return f"{v['difference']:+.2f} {_range(v['ci95'])}"


def other_seeds_cell(t: dict) -> str:
    return _num(t["kendall_tau_other_seeds"]) if t.get("shares_seed") else "—"


def pick_cell(t: dict) -> str:
    r = t.get("pick_rank_interval")
    if not r:
        return f"`{t['pick']}` ({t['pick_rank']})"
    unresolved = "; not resolvable inside '" + r["group"] + "'" if r.get("resolvable") is False else ""
    return (f"`{t['pick']}` ({t['pick_rank']}; {'/'.join(map(str, r['per_seed']))}; "
            f"{r['interval'][0]}-{r['interval'][1]}{unresolved})")


def main(argv=None) -> int:
    import argparse
    from pathlib import Path

    from ..atomic import write_json
    from ..errors import UserError
    from ..safeio import read_json
    from .ranking import RESULT, _report

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
    _report(result, out)
    write_json(out / RESULT, result)
    print(out / RESULT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
