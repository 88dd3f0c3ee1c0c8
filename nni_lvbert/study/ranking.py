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
from typing import Any, ClassVar

from .. import layout
from ..arch import NAMED_ARCHS, Arch
from ..atomic import write_json
from ..errors import UserError
from ..options import opt
from ..rundir import RunDir
from ..safeio import read_json
from ..standalone.scoring import Validation
from ..standalone.store import Standalone, preset_size, standalone_spec, train_all
from .common import NNICTL_OPTIONS, Budget, StandaloneStudyOptions, log, shown_path, shown_stats
from .driver import Plan, Study, Unit, need_supernet
from .orders import composition, graded_orders, is_mixed, stratified_orders
from .ranking_report import RESULT, report
from .reanalyse import reanalyse
from .stats import kendall, noise_ceiling, rank_correlations, regret, top_overlap

_report = report  # the name the tests and older scripts use
ORDERS = "orders.json"
TRUTH = "ground_truth.json"


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


@dataclass
class RankingPlan(Plan):
    """The study's inputs (`plan_ranking`): the stratified count, seeds per order, rankers, budget, the reference
    scorer and the compared orders."""

    n: int
    k: int
    rankers: list
    budget: Budget
    ref: Any
    orders: list

    def common(self) -> dict:
        """`standalone_spec`'s keywords (but budget): the reference supernet's shape and data."""
        return study_common(self.opts, self.ref)

    def seeds(self) -> list[int]:
        return list(range(self.opts.seed, self.opts.seed + self.k))

    def truth_specs(self) -> list[tuple[str, Standalone]]:
        return standalone_specs(self.orders, self.seeds(), budget=self.budget, **self.common())

    def short_spec(self, arch, steps: int) -> Standalone:
        """short:N's and rerank's models: the study's seed, N steps."""
        return standalone_spec(arch, self.opts.seed, budget=self.budget.shortened(steps), **self.common())

    def standalone(self) -> list[tuple[str, Standalone]]:
        """The trainings before the rankers (--nnictl): the ground truth, then `short:N` (rerank:K:N depends on
        the first stage's scores: the study trains those)."""
        return self.truth_specs() + [(f"{r.name}: {a.compact}", self.short_spec(a, int(r.arg)))
                                     for r in self.rankers if r.kind == "short" for a, _ in self.orders]


def plan_ranking(opts: RankingOptions) -> RankingPlan:
    """The study's inputs, checked, nothing written (`drive` and the --nnictl experiment share it, so both train
    the same model keys)."""
    from .rankers import parse_rankers

    n, k = _defaults(opts)
    need_supernet(opts, "its space, shape and data", k)
    if opts.rank_by not in ("acc", "loss"):
        raise UserError(f"--rank-by must be acc or loss, got {opts.rank_by!r}")
    rankers = parse_rankers(opts.rankers or ["spos"], opts.supernet)
    budget = opts.budget()
    from ..search.scorer import SupernetScorer  # torch: once the options are checked

    ref = SupernetScorer(opts.supernet, val_tokens=opts.validation_tokens(), device="cpu", prefix_cache=False,
                         masking=opts.val_masking, data_seed=opts.data_seed)
    stored = Path(opts.out) / ORDERS  # a resumed study keeps its set
    if opts.resume and stored.is_file():
        orders = [(ref.parse(o["arch"]), o["role"]) for o in read_json(stored)["orders"]]
    else:
        orders = study_orders(ref.spec, n, opts.seed, opts.searched, opts.baselines, opts.order_set)
    if len(orders) < 3:
        raise UserError(f"rank correlations need at least 3 orders, got {len(orders)}")
    return RankingPlan(opts, n, k, rankers, budget, ref, orders)


def study_common(opts: RankingOptions, ref) -> dict:
    """`standalone_spec`'s keywords (but budget) for the study's models: the reference supernet's shape and data."""
    return {"size": preset_size(ref), "cfg": ref.cfg.to_dict(), "data": ref.val_stats["data"],
            "data_seed": opts.data_seed}


def units(plan: RankingPlan, out: Path) -> list[Unit]:
    """The ground truth (every order x seed, stand-alone, scored on every validation token: trained and scored
    once in the store, ground_truth.json rewritten each time), then each ranker (rankers/<name>.json; a two-stage
    ranker after its first stage)."""
    opts, archs = plan.opts, [a for a, _ in plan.orders]
    if not (out / ORDERS).is_file():
        write_json(out / ORDERS, {"seed": opts.seed, "set": opts.order_set,
                                  "stratified": plan.n if opts.order_set == "stratified" else 0, "orders": [
            {"arch": a.compact, "role": role, **composition(a)} for a, role in plan.orders]})
    validation = Validation.of(plan.ref.batches, plan.ref.val_stats, opts.data_seed)
    truth = Unit(out / TRUTH, lambda: _score_truth(plan, validation), finished=lambda: False)

    def ranker(r) -> Unit:
        file = _ranker_file(out, r.name)
        return Unit(file, lambda: _ranker_result(r, plan, out, validation),
                    finished=lambda: file.is_file() and all(a.compact in read_json(file)["scores"] for a in archs))

    return [truth, *(ranker(r) for r in sorted(plan.rankers, key=lambda r: r.kind == "rerank"))]


def summarize(plan: RankingPlan, out: Path, values: list) -> dict:
    """Per ranker: rank correlations with the seeds' mean, tau among the mixed orders, top-5, regret, the budget
    check; per order its seeds; then what the ground truth can resolve (`reanalyse`)."""
    import numpy as np

    opts, (truth, *ranked), archs = plan.opts, values, [a for a, _ in plan.orders]
    results, k, specs = {r["ranker"]: r for r in ranked}, plan.k, plan.truth_specs()
    names = [s.dirname() for _, s in specs]
    models = truth["models"]
    per_seed = np.array([[models[p]["score"] for p in names[i::len(archs)]] for i in range(len(archs))])
    gt = per_seed.mean(1)
    mixed = [i for i, a in enumerate(archs) if is_mixed(a)]
    table = []
    for r in plan.rankers:
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
             "se": float(np.mean([models[p][f"mlm_{opts.rank_by}_se"] for p in names[i::len(archs)]])),
             **{r.name: results[r.name]["scores"][a.compact] for r in plan.rankers}}
            for i, (a, role) in enumerate(plan.orders)]
    result = {"study": "ranking", "supernet": shown_path(opts.supernet), "size": plan.common()["size"],
              "budget": plan.budget.__dict__, "seeds": plan.seeds(), "data": shown_path(plan.common()["data"]),
              "rank_by": opts.rank_by, "validation": shown_stats(plan.ref.val_stats), "orders": len(archs),
              "mixed_orders": len(mixed), "noise_ceiling": noise_ceiling(per_seed),
              "noise_ceiling_mixed": noise_ceiling(per_seed[mixed]),
              "seed_std_median": float(np.median(per_seed.std(1, ddof=1))) if k > 1 else None,
              "ground_truth_core_minutes": sum(models[p]["core_minutes"] for p in names),
              "rankers": table, "rows": rows,
              "ranker_details": {name: {key: v for key, v in res.items() if key not in ("scores", "metrics")}
                                 for name, res in results.items()}}
    return reanalyse(result, 200 if opts.quick else 2000)  # --quick checks the chain: fewer resamples


def answer(result: dict, file: Path) -> dict:
    return {key: result[key] for key in ("orders", "noise_ceiling", "seed_std_median")} | {
        "ceiling_noise_free": (result["reliability"] or {}).get("kendall_tau_noise_free"),
        "perfect_ranker": {key: (result.get("perfect_ranker") or {}).get(key) for key in ("kendall_tau", "range90")},
        "order_effect": {g["group"]: {key: (g["order_effect"] or {}).get(key) for key in ("F", "df", "p")}
                         for g in result["groups"]},
        "rankers": {t["ranker"]: {"kendall_tau": t["kendall_tau"], "regret": t["regret"],
                                  "core_minutes": round(t["core_minutes"], 2)} for t in result["rankers"]},
        "result": str(file)}


STUDY = Study("ranking", RESULT, plan_ranking, units, summarize, report, answer)



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


def _score_truth(plan: RankingPlan, validation) -> dict:
    """{"models": {model dir name: metrics + score + training core-minutes}} (ground_truth.json): every model
    trained (`train_all`) and scored once per validation set, whichever study or process does it."""
    from ..cost import core_minutes
    from .rankers import rank_score

    paths = train_all(plan.truth_specs(), plan.opts.store(), plan.opts.progress)
    metrics = validation.metrics_all(paths, "ground truth ")
    return {"models": {p.name: {**m, "score": rank_score(m, plan.opts.rank_by),
                                "core_minutes": core_minutes(RunDir(p, "pretrain").meta)}
                       for p, m in zip(paths, metrics)}}


def _ranker_file(out: Path, name: str) -> Path:
    return out / "rankers" / f"{name.replace('/', '_').replace(':', '-')}.json"


def _ranker_result(r, plan: RankingPlan, out: Path, validation) -> dict:
    """One ranker's scores of every order (kept in rankers/<name>.json; recomputed only when orders are missing);
    a two-stage ranker reads its first stage's."""
    from .rankers import rerank_scores, short_scores, supernet_scores, zc_scores

    opts, ref, archs = plan.opts, plan.ref, [a for a, _ in plan.orders]
    log(f"ranker {r.name}: scoring {len(archs)} orders")
    if r.kind == "supernet":
        res = supernet_scores(r, archs, opts.val_masking, ref.val_stats["data"], opts.data_seed,
                              opts.validation_tokens(), opts.rank_by)
    elif r.kind == "short":
        res = short_scores(r, archs, plan.short_spec, opts.store(), validation, opts.rank_by, opts.progress)
    elif r.kind == "rerank":
        res = rerank_scores(r, archs, read_json(_ranker_file(out, r.first_stage)), plan.short_spec, opts.store(),
                            validation, opts.rank_by, opts.progress)
    else:
        res = zc_scores(r, archs, ref.cfg, ref.batches[0], opts.seed)
    return {"ranker": r.name, "kind": r.kind, "arg": r.arg, **res}
