"""`lvbert study ranking`: which ranker of orders agrees with stand-alone training, at what cost?

1. the compared orders: `--num-archs` stratified by composition and placement (`orders.py`, seeded by `--seed`;
   orders.json), the named baselines that fit the space, and with `--searched` the searched order;
2. the ground truth: each order pre-trained stand-alone from scratch with `--num-seeds` seeds (MLM, the reference
   supernet's shape and data, one budget; in the model store, shared and resumable), each model scored on the
   whole validation split with every token masked once (`--val-masking full`), accuracy and loss with standard
   errors; the ground truth of an order is its mean over seeds. The noise ceiling is the Kendall tau between the
   means of two disjoint halves of the seeds (`stats.noise_ceiling`);
3. every ranker of `--rankers` (`rankers.py`: supernets, `short:N`, `zc:PROXY`, two-stage `rerank:K:N`) scores
   every order, on the same tokens for the trained ones, and records its cost in core-minutes;
4. per ranker: Kendall tau and Spearman rho with bootstrap 95 % intervals, tau among the orders with both
   attention and convolution, top-5 overlap, regret of its pick; ranking.json / .md / .png (tau and regret
   against cost), ranking-scatter.png (ground truth against each ranker) and ranking-truth.png (each order's
   seeds and their mean);
5. what the ground truth can resolve (`reanalyse.py`, also from a stored ranking.json without the models): the
   corrected ceiling (reliability of the k-seed mean, model-based simulation), the order effect per group
   (two-way ANOVA), each ranker against spos (paired bootstrap), each pick's rank with its seed-bootstrap
   interval, and the rankers that train with the first seed scored against the other seeds alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from .. import layout
from ..arch import NAMED_ARCHS, Arch
from ..atomic import write_json, write_text
from ..errors import UserError
from ..options import opt
from ..rundir import RunDir
from ..safeio import read_json
from .common import (NNICTL_OPTIONS, StandaloneStudyOptions, begin_on_supernet, log, shown_path, shown_stats,
                     start)
from .ranking_plots import plot_cost, plot_scatter, plot_truth
from .reanalyse import (ceiling_lines, group_tables, other_seeds_cell, pick_cell, reanalyse, reference_table,
                        searched_line, vs_cell)
from .stats import kendall, markdown_table, noise_ceiling, rank_correlations, regret, top_overlap
from .store import Standalone, Validation, preset_size, standalone_spec, train_all

ORDERS = "orders.json"
TRUTH = "ground_truth.json"
RESULT = "ranking.json"


@dataclass(frozen=True)
class RankingOptions(StandaloneStudyOptions):
    # a resumed study may compare other rankers: each is kept by name (rankers/), the ground truth stays
    MAY_CHANGE_ON_RESUME: ClassVar[frozenset[str]] = NNICTL_OPTIONS | {"rankers"}

    out: str = f"{layout.STUDY}/ranking"
    # the reference supernet: its space, shape and data define the study; the ranker `spos`
    supernet: str = opt("", "the reference supernet run directory: its space, shape and data define the study, and "
                            "it is the ranker spos", metavar="RUN", group="")
    rankers: list[str] | None = opt(None, "rankers to compare (default spos): spos | NAME=RUN (another supernet run, "
                                          "e.g. fair=runs/supernet-fair from `lvbert supernet train --sampling fair`, "
                                          "or a few-shot directory) | short:N (N steps of stand-alone pre-training) | "
                                          "zc:grad-norm | zc:snip | zc:synflow (zero-cost proxies) | rerank:K:N[:BASE] "
                                          "(two-stage: the K best of BASE, default spos, re-ranked by short:N)",
                                    metavar="RANKER", group="")
    order_set: str = opt("stratified", "stratified: --num-archs orders stratified by composition and placement "
                                       "(default); graded: 12 orders that differ in one count at a time (graded "
                                       "convolution and attention counts, one convolution first or last), where "
                                       "stand-alone differences are large enough to rank", choices=["stratified",
                                                                                                 "graded"], group="")
    num_archs: int | None = opt(None, "orders stratified by composition and placement (default 20; quick 3), plus "
                                      "the baselines and the searched order", group="")
    num_seeds: int | None = opt(None, "stand-alone pre-training seeds per order for the ground truth, --seed .. "
                                      "--seed+N-1 (default 3; quick 2)", group="")
    searched: str | None = opt(None, "a search directory or its best_arch.json: the searched order joins the "
                                     "compared orders", metavar="DIR|FILE", group="")
    baselines: bool = opt(True, "leave out bert, dynamicconv, sandwich, lvbert-small", group="")
    val_masking: str = opt("full", "full: every validation token masked once over 7 rounds (default); fixed: the "
                                   "split's fixed 15 %% masking (7x cheaper, noisier)", choices=["full", "fixed"],
                           group="")
    rank_by: str = opt("acc", "rank by validation MLM accuracy (default) or loss", choices=["acc", "loss"], group="")


def _defaults(opts: RankingOptions) -> tuple[int, int]:
    return (opts.num_archs if opts.num_archs is not None else (3 if opts.quick else 20),
            opts.num_seeds if opts.num_seeds is not None else (2 if opts.quick else 3))


def study_orders(spec, num_archs: int, seed: int, searched: str | None = None, baselines: bool = True,
                 order_set: str = "stratified") -> list[tuple[Arch, str]]:
    """The compared orders as (order, role): `num_archs` stratified by composition and placement (`orders.py`,
    seeded) or the graded set, then the named baselines that fit the space, then the searched order (a search
    directory or a best_arch.json). Each order once (its first role)."""
    from .orders import graded_orders, stratified_orders

    chosen: dict[Arch, str] = dict(graded_orders(spec.candidates, spec.slots) if order_set == "graded" else
                                   stratified_orders(spec.candidates, spec.slots, num_archs, seed))
    if baselines:
        for name in NAMED_ARCHS:
            try:
                chosen.setdefault(Arch.parse(name, spec), name)
            except UserError:
                log(f"baseline {name} does not fit the space ({'/'.join(spec.candidates)}); left out")
    if searched:
        path = Path(searched)
        best_file = path / "best_arch.json" if path.is_dir() else path
        best = read_json(best_file, "search result (best_arch.json)")
        if "arch" not in best:
            raise UserError(f"{best_file} is not a best_arch.json (no 'arch')")
        chosen.setdefault(Arch.parse(best["arch"], spec), "searched")
    return list(chosen.items())


def standalone_specs(orders: list[tuple[Arch, str]], seeds, **common) -> list[tuple[str, Standalone]]:
    """The ground truth's stand-alone MLM trainings (`standalone_spec`'s keywords), seed-major: every order's first
    seed before any second seed, so an interrupted study has a whole one-seed ranking first."""
    return [(f"stand-alone MLM training of {arch.compact} ({role}, seed {seed})", standalone_spec(arch, seed, **common))
            for seed in seeds for arch, role in orders]


def plan_ranking(opts: RankingOptions):
    """The study's inputs, checked, nothing written: (options as resumed, the stratified count, seeds per order,
    rankers, budget, reference scorer, orders). `run_ranking` and `nnictl.py` (the ground truth as an nnictl
    experiment) share it, so both train the same model keys."""
    from .rankers import parse_rankers

    opts = begin_on_supernet(opts, "its space, shape and data", _defaults(opts)[1])
    n, k = _defaults(opts)
    if opts.rank_by not in ("acc", "loss"):
        raise UserError(f"--rank-by must be acc or loss, got {opts.rank_by!r}")
    rankers = parse_rankers(opts.rankers or ["spos"], opts.supernet)
    budget = opts.budget()
    from ..search.scorer import SupernetScorer  # torch: once the options are checked

    ref = SupernetScorer(opts.supernet, val_tokens=opts.validation_tokens(), device="cpu", prefix_cache=False,
                         masking=opts.val_masking, data_seed=opts.data_seed)

    # 1. the orders (stored: a resumed study keeps its set)
    stored = Path(opts.out) / ORDERS
    if opts.resume and stored.is_file():
        orders = [(ref.parse(o["arch"]), o["role"]) for o in read_json(stored)["orders"]]
    else:
        orders = study_orders(ref.spec, n, opts.seed, opts.searched, opts.baselines, opts.order_set)
    if len(orders) < 3:
        raise UserError(f"rank correlations need at least 3 orders, got {len(orders)}")
    return opts, n, k, rankers, budget, ref, orders


def study_common(opts: RankingOptions, ref) -> dict:
    """`standalone_spec`'s keywords (but budget) for the study's models: the reference supernet's shape and data."""
    return dict(size=preset_size(ref), cfg=ref.cfg.to_dict(), data=ref.val_stats["data"], data_seed=opts.data_seed)


def run_ranking(opts: RankingOptions) -> dict:
    import numpy as np

    if opts.nnictl:  # the trainings as an nnictl experiment (study/nnictl.py): nothing trained or scored here
        from .nnictl import ranking_specs, write_study_experiment

        return write_study_experiment(*ranking_specs(opts))
    opts, n, k, rankers, budget, ref, orders = plan_ranking(opts)
    out = start(opts)
    if not (out / ORDERS).is_file():
        from .orders import composition

        write_json(out / ORDERS, {"seed": opts.seed, "set": opts.order_set,
                                  "stratified": n if opts.order_set == "stratified" else 0, "orders": [
            {"arch": a.compact, "role": role, **composition(a)} for a, role in orders]})
    archs = [a for a, _ in orders]

    # 2. the ground truth: every order x seed, stand-alone, scored on every validation token
    common = study_common(opts, ref)
    data, size = common["data"], common["size"]

    def spec_of(arch: Arch, seed: int, b=budget) -> Standalone:
        return standalone_spec(arch, seed, budget=b, **common)

    seeds = list(range(opts.seed, opts.seed + k))
    paths = train_all(standalone_specs(orders, seeds, budget=budget, **common), opts.store(), opts.progress)
    validation = Validation.of(ref.batches, ref.val_stats, opts.data_seed)
    truth = _score_truth(out, paths, validation, opts.rank_by)
    per_seed = np.array([[truth[p.name]["score"] for p in paths[i::len(orders)]] for i in range(len(orders))])
    gt = per_seed.mean(1)

    # 3. the rankers
    results = {}
    for r in sorted(rankers, key=lambda r: r.kind == "rerank"):  # a two-stage ranker after its first stage
        results[r.name] = _ranker_result(r, out, archs, opts, ref, spec_of, budget, results, validation)

    # 4. statistics
    mixed = [i for i, a in enumerate(archs) if _mixed(a)]
    spread = float(np.median(per_seed.std(1, ddof=1))) if k > 1 else None
    table = []
    for r in rankers:
        scores = np.array([results[r.name]["scores"][a.compact] for a in archs])
        stats = rank_correlations(scores, gt, seed=opts.seed)
        table.append({"ranker": r.name, "kind": r.kind, "core_minutes": results[r.name]["core_minutes"],
                      **{key: stats[key] for key in ("kendall_tau", "kendall_tau_ci95", "spearman_rho",
                                                     "spearman_rho_ci95")},
                      "undefined": stats.get("undefined"),
                      "kendall_tau_mixed": kendall(scores[mixed], gt[mixed]),  # None below 3 orders
                      "top5_overlap": top_overlap(scores, gt, 5),
                      **{key: v if key != "pick" else archs[v].compact for key, v in regret(scores, gt).items()},
                      "budget_check": _budget_check(r, scores, per_seed, mixed, opts.seed)})
    rows = [{"arch": a.compact, "role": role, "ground_truth": float(gt[i]),
             "seeds": per_seed[i].tolist(), "seed_std": float(per_seed[i].std(ddof=1)) if k > 1 else None,
             "se": float(np.mean([truth[p.name][f"mlm_{opts.rank_by}_se"] for p in paths[i::len(orders)]])),
             **{r.name: results[r.name]["scores"][a.compact] for r in rankers}}
            for i, (a, role) in enumerate(orders)]
    result = {"study": "ranking", "supernet": shown_path(opts.supernet), "size": size,
              "budget": budget.__dict__, "seeds": seeds, "data": shown_path(data), "rank_by": opts.rank_by,
              "validation": shown_stats(ref.val_stats), "orders": len(orders), "mixed_orders": len(mixed),
              "noise_ceiling": noise_ceiling(per_seed),
              "noise_ceiling_mixed": noise_ceiling(per_seed[mixed]),
              "seed_std_median": spread,
              "ground_truth_core_minutes": sum(truth[p.name]["core_minutes"] for p in paths),
              "rankers": table, "rows": rows,
              "ranker_details": {name: {key: v for key, v in res.items() if key not in ("scores", "metrics")}
                                 for name, res in results.items()}}
    result = reanalyse(result, 200 if opts.quick else 2000)  # --quick checks the chain: fewer resamples
    _report(result, out)
    write_json(out / RESULT, result)
    return {key: result[key] for key in ("orders", "noise_ceiling", "seed_std_median")} | {
        "ceiling_noise_free": (result["reliability"] or {}).get("kendall_tau_noise_free"),
        "perfect_ranker": {key: (result.get("perfect_ranker") or {}).get(key) for key in ("kendall_tau", "range90")},
        "order_effect": {g["group"]: {key: (g["order_effect"] or {}).get(key) for key in ("F", "df", "p")}
                         for g in result["groups"]},
        "rankers": {t["ranker"]: {"kendall_tau": t["kendall_tau"], "regret": t["regret"],
                                  "core_minutes": round(t["core_minutes"], 2)} for t in table},
        "result": str(out / RESULT)}


def _budget_check(r, scores, per_seed, mixed: list[int], seed: int) -> dict | None:
    """For `short:N`: its ranking against the ground truth's models of the same seed (the same orders and seed at
    the two budgets): does the ground truth's budget rank as N steps do? Beside it, as the yardstick, how the first
    seed's ranking agrees with each other seed's at the ground truth's budget (what a change of seed moves)."""
    if r.kind != "short":
        return None
    first = per_seed[:, 0]
    stats = rank_correlations(scores, first, seed=seed)
    others = [kendall(first, per_seed[:, j]) for j in range(1, per_seed.shape[1])]
    others_mixed = [kendall(first[mixed], per_seed[mixed, j]) for j in range(1, per_seed.shape[1])]
    return {"steps": int(r.arg), "seed": seed, "kendall_tau": stats["kendall_tau"],
            "kendall_tau_ci95": stats["kendall_tau_ci95"],
            "kendall_tau_mixed": kendall(scores[mixed], first[mixed]),  # kendall: None below 3 orders
            "seed_to_seed_tau": _mean(others), "seed_to_seed_tau_mixed": _mean(others_mixed),
            # the ranker's seed is one of the ground truth's: against the other seeds' mean it is independent of it,
            # comparable with the noise ceiling's split that holds this seed out
            "kendall_tau_other_seeds": kendall(scores, per_seed[:, 1:].mean(1)) if per_seed.shape[1] > 1 else None}


def _mean(values: list) -> float | None:
    import numpy as np

    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _mixed(arch: Arch) -> bool:
    from .orders import is_mixed

    return is_mixed(arch)


def _score_truth(out: Path, paths: list[Path], validation, rank_by: str) -> dict:
    """{model dir name: metrics + score + training core-minutes} (ground_truth.json); each model scored once per
    validation set, whichever study or process scores it (`store.Validation`)."""
    from ..cost import core_minutes
    from .rankers import rank_score

    metrics = validation.metrics_all(paths, "ground truth ")
    known = {p.name: {**m, "score": rank_score(m, rank_by), "core_minutes": core_minutes(RunDir(p, "pretrain").meta)}
             for p, m in zip(paths, metrics)}
    write_json(out / TRUTH, {"models": known})
    return known


def _ranker_result(r, out: Path, archs, opts, ref, spec_of, budget, done: dict, validation) -> dict:
    """One ranker's scores of every order (kept in rankers/<name>.json; recomputed only when orders are missing).
    `done`: the results so far by ranker name (a two-stage ranker's first stage)."""
    from .rankers import rerank_scores, short_scores, supernet_scores, zc_scores

    def short_spec(arch: Arch, steps: int):  # short:N's and rerank's models: the study's seed, N steps
        return spec_of(arch, opts.seed, budget.shortened(steps))

    path = out / "rankers" / f"{r.name.replace('/', '_').replace(':', '-')}.json"
    if path.is_file():
        stored = read_json(path)
        if all(a.compact in stored["scores"] for a in archs):
            return stored
    log(f"ranker {r.name}: scoring {len(archs)} orders")
    if r.kind == "supernet":
        res = supernet_scores(r, archs, opts.val_masking, ref.val_stats["data"], opts.data_seed,
                              opts.validation_tokens(), opts.rank_by)
    elif r.kind == "short":
        res = short_scores(r, archs, short_spec, opts.store(), validation, opts.rank_by, opts.progress)
    elif r.kind == "rerank":
        res = rerank_scores(r, archs, done[r.first_stage], short_spec, opts.store(), validation, opts.rank_by,
                            opts.progress)
    else:
        res = zc_scores(r, archs, ref.cfg, ref.batches[0], opts.seed)
    res = {"ranker": r.name, "kind": r.kind, "arg": r.arg, **res}
    write_json(path, res)
    return res


def _ci(ci) -> str:
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "n/a"


def _num(v, digits: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


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
    return f"{_num(t['kendall_tau'])} {_ci(h['ci95'] if h else t['kendall_tau_ci95'])}"


def _report(result: dict, out: Path) -> None:
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
