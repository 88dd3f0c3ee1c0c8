"""`lvbert study ranking`'s report (ranking.md and the plots of `ranking_plots.py`), from a ranking result alone:
what `ranking.summarize` and `reanalyse.reanalyse` give, or a stored ranking.json."""
from __future__ import annotations

from pathlib import Path

from ..atomic import write_text
from .ranking_plots import plot_cost, plot_scatter, plot_truth
from .stats import markdown_table

RESULT = "ranking.json"
ALPHA = 0.05  # an order effect with p below this is detectable
# The failed-run rule, declared once: a run more than FAILED_MADS median absolute deviations below its order's
# median, the MAD pooled over every run of the study (each run's distance from its order's median); only runs below
# count (scores are "higher is better"). It was set after seeing the data (a training stuck on the unigram plateau,
# 0.055 against its order's 0.22, lies 34-250 such deviations below; no other run lay beyond 10), so every report
# shows the answer's sensitivity to it: no rule, 10, 20 and 50 (`ranking_stats.sensitivity`). The ANOVA counts a
# failed run as seed noise; the group tests are repeated without the orders that have one.
FAILED_MADS = 20

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


def _budget_line(ranker: str, check: dict, steps: int) -> str:
    return (f"- budget check: `{ranker}` against the ground truth's seed-{check['seed']} models ({steps} steps): "
            f"Kendall tau {_tau_cell(check)}, among the mixed orders {_num(check['kendall_tau_mixed'])}; one seed "
            f"against another at the ground truth's budget {_num(check['seed_to_seed_tau'])} (mixed "
            f"{_num(check['seed_to_seed_tau_mixed'])}); against the other seeds' mean "
            f"{_num(check['kendall_tau_other_seeds'])}")


def _pick_header(result: dict) -> str:
    picks = [t["pick_rank_interval"] for t in result["rankers"] if t.get("pick_rank_interval")]
    return (f"pick (its rank; per seed; {round(100 * picks[0]['level'])} % interval over resampled seeds)" if picks
            else "pick (its rank)")


def _tau_cell(t: dict) -> str:
    if t["kendall_tau"] is None:
        return f"n/a ({t.get('undefined') or 'all scores equal'})"
    h = t.get("kendall_tau_hierarchical")  # orders and seeds resampled (issue 54)
    return f"{_num(t['kendall_tau'])} {_range(h['ci95'] if h else t['kendall_tau_ci95'])}"


def report(result: dict, out: Path) -> None:
    b, ceiling = result["budget"], result["noise_ceiling"]
    def ceiling_text(ceiling):
        return (f"{ceiling['kendall_tau']:.3f} (halves of {ceiling['halves'][0]} and {ceiling['halves'][1]} seeds; "
                f"{ceiling['min']:.3f} to {ceiling['max']:.3f} is the range over the {ceiling['splits']} splits, "
                "not an interval)" if ceiling else "n/a (one seed)")

    seeds, base = len(result["seeds"]), result.get("baseline")
    hier = any(t.get("kendall_tau_hierarchical") for t in result["rankers"])
    groups = {g["group"]: g for g in result.get("groups") or []}
    others = ", ".join(map(str, result["seeds"][1:])) or "n/a"
    mixed_note = ": not resolvable at this budget" if (groups.get("mixed") or {}).get("resolvable") is False else ""
    md = [f"# Rankers against stand-alone training ({result['orders']} orders, {seeds} seed{'s' * (seeds > 1)})\n",
          f"Reference supernet `{result['supernet']}` (size {result['size']}). Ground truth: MLM from scratch, "
          f"{b['steps']} steps, batch {b['batch_size']}, lr {b['lr']:g}, warm-up {b['warmup_steps']}, seeds "
          f"{', '.join(map(str, result['seeds']))}; scored by {result['rank_by']} on "
          f"{result['validation']['masked_tokens']} masked validation tokens "
          f"({result['validation'].get('masking', 'fixed')} masking).\n",
          (f"- split-half agreement (Kendall tau between seed halves; each half is noisier than the {seeds}-seed "
           "mean): " if hier else f"- noise ceiling (Kendall tau between seed halves; a lower bound, each half being "
                                   f"noisier than the {seeds}-seed mean): ")
          + f"**{ceiling_text(ceiling)}**; among the mixed orders: "
          f"{ceiling_text(result.get('noise_ceiling_mixed'))}",
          *ceiling_lines(result),
          f"- median seed spread (std over seeds) of an order's score: {_num(result['seed_std_median'], 4)}",
          f"- orders with both attention and convolution: {result['mixed_orders']}",
          *searched_line(result),
          *[_budget_line(t["ranker"], t["budget_check"], b["steps"])
            for t in result["rankers"] if t.get("budget_check")],
          "",
          markdown_table(["ranker", "core-min", "Kendall tau [95 %" + (", orders and seeds]" if hier else "]"),
                          f"tau - {base} [95 %, paired]",
                          "Spearman rho", f"tau (mixed{mixed_note})", f"tau against seeds {others} only", "top-5",
                          "regret", _pick_header(result)],
                         [[t["ranker"], f"{t['core_minutes']:.1f}", _tau_cell(t), vs_cell(t),
                           _num(t["spearman_rho"]), _num(t["kendall_tau_mixed"]), other_seeds_cell(t),
                           f"{t['top5_overlap']:.1f}", _num(t["regret"], 4), pick_cell(t)]
                          for t in result["rankers"]]),
          ("Intervals over the orders and the ground truth's seeds resampled (hierarchical bootstrap); paired: both "
           "taus on the same resample." if hier else "Paired: both taus on the same resampled orders.")
          + f" Tau against seeds {others} only: the rankers that train "
          f"with the ground truth's first seed {result['seeds'][0]} (short, rerank), against the other seeds' mean.\n"
          if result.get("groups") is not None else "",
          *reference_table(result),
          *group_tables(result),
          markdown_table(["order", "role", "ground truth", "seed std", *[t["ranker"] for t in result["rankers"]]],
                         [[f"`{r['arch']}`", r["role"], r["ground_truth"], _num(r["seed_std"], 4),
                           *[r[t["ranker"]] for t in result["rankers"]]]
                          for r in sorted(result["rows"], key=lambda r: -r["ground_truth"])])]
    write_text(out / "ranking.md", "\n".join(md))
    plot_cost(result, out / "ranking.png")
    plot_scatter(result, out / "ranking-scatter.png")
    plot_truth(result, out / "ranking-truth.png")
