"""`lvbert study search`: Algorithm 1 vs NNI regularized evolution vs NNI random, equal budget, several seeds.

Every seed is one `lvbert search run` (OUT/seed<k>/, resumable on its own) over the same supernet and the same
validation tokens; the study then draws the top-10 curves with bands across seeds (LV-BERT Figure 3, now with
seeds) and counts, per seed, which strategy found the best architecture.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import layout
from ..atomic import pyplot, save_figure, write_text
from ..errors import UserError
from ..options import opt
from ..rundir import RunDir
from ..safeio import read_json
from ..search.defaults import STRATEGIES, VAL_TOKENS
from .common import StudyOptions, log, shown_path
from .driver import Plan, Study, Unit
from .stats import markdown_table

RESULT = "search_study.json"


@dataclass(frozen=True)
class SearchStudyOptions(StudyOptions):
    TRAINS_MODELS = False

    out: str = f"{layout.STUDY}/search"
    seed: int = opt(0, "seed of the study's searches and draws", group="")
    supernet: str = opt("", "a trained supernet run directory", metavar="RUN", group="")
    num_seeds: int = opt(5, "searches per strategy, seeds 0..N-1", group="")
    strategies: list[str] = opt(help=f"strategies to compare (default: {' '.join(STRATEGIES)})",
                                default_factory=lambda: list(STRATEGIES), flag="--search", metavar="STRATEGY",
                                group="")
    # Algorithm 1's P, T (default 50, 20; quick 6, 3); k, N_cro, N_mut scale with P
    population: int | None = opt(None, "Algorithm 1's P (default 50; quick 6)", group="")
    iterations: int | None = opt(None, "Algorithm 1's T (default 20; quick 3)", group="")
    val_tokens: int = opt(VAL_TOKENS, "validation tokens per candidate (as lvbert search run)", group="")


def evolution_config(opts: SearchStudyOptions):
    from ..search.algorithm import EvolutionConfig

    p = opts.population if opts.population is not None else (6 if opts.quick else 50)
    t = opts.iterations if opts.iterations is not None else (3 if opts.quick else 20)
    if p < 2 or t < 1:
        raise UserError(f"--population must be at least 2 and --iterations at least 1, got {p} and {t}")
    cfg = EvolutionConfig(population=p, iterations=t, topk=max(1, p // 5), crossover=p // 2, mutation=p - p // 2)
    cfg.validate()
    return cfg


@dataclass
class SearchPlan(Plan):
    cfg: Any  # Algorithm 1's EvolutionConfig


def plan_search(opts: SearchStudyOptions) -> SearchPlan:
    if not opts.supernet:
        raise UserError("give the trained supernet with --supernet RUN")
    if opts.num_seeds < 1:
        raise UserError(f"--num-seeds must be at least 1, got {opts.num_seeds}")
    bad = [s for s in opts.strategies if s not in STRATEGIES]
    if bad or not opts.strategies:
        raise UserError(f"unknown strategy {', '.join(bad) or '(none)'}; choose from {', '.join(STRATEGIES)}")
    cfg = evolution_config(opts)
    from ..supernet.rundir import supernet_dir

    supernet_dir(opts.supernet)  # one line when it is not a finished supernet run, before OUT is made
    return SearchPlan(opts, cfg)


def units(plan: SearchPlan, out: Path) -> list[Unit]:
    """One `lvbert search run` per seed (OUT/seed<k>/, finished with its best_arch.json); `study search --out OUT
    --resume` started in a second process while this one runs takes the next free seed."""
    from ..search.run import SearchOptions, run_search

    opts, cfg = plan.opts, plan.cfg

    def about(seed: int) -> str:
        return f"[seed {seed + 1}/{opts.num_seeds}] {' vs '.join(opts.strategies)}, {cfg.budget} evaluations each"

    def unit(seed: int) -> Unit:
        seed_dir = out / f"seed{seed}"

        def run_seed() -> None:
            log(about(seed))
            flags = RunDir(seed_dir, "search").continuation(done="best_arch.json", marker="search.json")
            run_search(SearchOptions(supernet=opts.supernet, strategies=list(opts.strategies), seed=seed,
                                     out=str(seed_dir), evolution=cfg, val_tokens=opts.val_tokens, device="cpu",
                                     threads=opts.threads, progress=opts.progress, **flags), log=log)

        return Unit(seed_dir / "best_arch.json", run_seed, lambda f: _read_seed(f.parent, opts.strategies, cfg),
                    save=None, lock=out / f".seed{seed}.lock", skipped=about(seed) + " (done)")

    return [unit(seed) for seed in range(opts.num_seeds)]


def summarize_study(plan: SearchPlan, out: Path, per_seed: list) -> dict:
    opts, cfg = plan.opts, plan.cfg
    result = summarize(dict(enumerate(per_seed)), opts.strategies, cfg)
    scorer = read_json(out / "seed0" / "search.json").get("scorer", {})
    result.update(study="search", supernet=shown_path(opts.supernet), val_tokens=opts.val_tokens,
                  masked_tokens=scorer.get("val_masked_tokens"), evolution=cfg.to_dict(), budget=cfg.budget)
    return result


def _read_seed(seed_dir: Path, strategies: list[str], cfg) -> dict:
    from ..search.history import read_history
    from ..search.run import top_curve

    records = read_history(seed_dir / "history.jsonl")
    out = {}
    for name in strategies:
        mine = [r for r in records if r["strategy"] == name]
        curve = [sum(c) / len(c) for c in top_curve(mine, cfg.iterations)]
        best = max(mine, key=lambda r: r["score"])
        out[name] = {"best": best["score"], "best_arch": best["arch"], "top10": curve, "evaluations": len(mine)}
    return out


def summarize(per_seed: dict, strategies: list[str], cfg) -> dict:
    """Wins per strategy (ties shared), final best and top-10 mean per seed, curves' mean/min/max across seeds."""
    wins = {s: 0.0 for s in strategies}
    for res in per_seed.values():
        top = max(res[s]["best"] for s in strategies)
        winners = [s for s in strategies if res[s]["best"] == top]
        for s in winners:
            wins[s] += 1 / len(winners)
    table = {}
    for s in strategies:
        best = [per_seed[k][s]["best"] for k in per_seed]
        final10 = [per_seed[k][s]["top10"][-1] for k in per_seed]
        curves = np.array([per_seed[k][s]["top10"] for k in per_seed])
        table[s] = {"wins": wins[s], "best_per_seed": best, "best_mean": float(np.mean(best)),
                    "best_std": float(np.std(best)), "top10_final_per_seed": final10,
                    "top10_final_mean": float(np.mean(final10)),
                    "curve_mean": curves.mean(0).tolist(), "curve_min": curves.min(0).tolist(),
                    "curve_max": curves.max(0).tolist(),
                    "best_arch_per_seed": [per_seed[k][s]["best_arch"] for k in per_seed]}
    ref = strategies[0]
    for s in strategies[1:]:  # per-seed paired differences against the first strategy (Algorithm 1)
        diff = [a - b for a, b in zip(table[ref]["best_per_seed"], table[s]["best_per_seed"])]
        table[s][f"{ref}_minus_this"] = {"per_seed": diff, "mean": float(np.mean(diff)),
                                         f"{ref}_better": sum(d > 0 for d in diff), "equal": sum(d == 0 for d in diff)}
    return {"seeds": len(per_seed), "strategies": strategies, "results": table}


def _report(result: dict, out: Path) -> None:
    res, strategies = result["results"], result["strategies"]
    ref = strategies[0]
    rows = []
    for s in strategies:
        r = res[s]
        d = r.get(f"{ref}_minus_this")
        rows.append([s, f"{r['wins']:g} / {result['seeds']}", f"{r['best_mean']:.4f} ± {r['best_std']:.4f}",
                     " ".join(f"{v:.4f}" for v in r["best_per_seed"]), f"{r['top10_final_mean']:.4f}",
                     "—" if d is None else f"{d['mean']:+.4f} ({d[f'{ref}_better']} of {result['seeds']} seeds)"])
    md = [f"# Search strategies at equal budget ({result['budget']} evaluations, {result['seeds']} seeds)\n",
          f"Supernet `{result['supernet']}`; every candidate scored with inherited weights on the first "
          f"{result['val_tokens']} validation tokens ({result.get('masked_tokens')} masked: one token = "
          f"{1 / max(1, result.get('masked_tokens') or 1):.5f} of accuracy). Wins: the seeds in which a strategy "
          "found the best score (a tie is split between the tied strategies).\n",
          markdown_table(["strategy", "wins", "best (mean ± sd)", "best per seed", "top-10 mean at end",
                          f"{ref} − this"], rows)]
    write_text(out / "search_study.md", "\n".join(md))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, s in enumerate(strategies):
        r = res[s]
        xs = list(range(1, len(r["curve_mean"]) + 1))
        line, = ax.plot(xs, r["curve_mean"], marker="os^"[i % 3], ms=4, label=s)
        ax.fill_between(xs, r["curve_min"], r["curve_max"], color=line.get_color(), alpha=0.15)
    ax.set_xlabel("iteration")
    ax.set_ylabel("mean MLM accuracy of the top 10")
    ax.set_title(f"Top-10 per iteration over {result['seeds']} seeds (line: mean, band: min–max)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, out / "search_study.png", dpi=110, bbox_inches="tight")


STUDY = Study("search", RESULT, plan_search, units, summarize_study, _report, lambda result, file: result)
