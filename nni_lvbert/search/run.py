"""`lvbert search run`: strategies over a trained supernet -> best_arch.json, history.jsonl, search_curve.png.

Output directory:

    search.json        settings of the search (checked on --resume) and, when finished, a summary
    history.jsonl      one line per evaluated candidate: strategy, index, iteration, arch, score, cost
    best_arch.json     the best architecture (written last, atomically; never partial)
    search_curve.png   top-10 MLM accuracy per iteration, one series per strategy (LV-BERT Figure 3)
    nni/               NNI experiment logs

Resume: every strategy is seeded, so a resumed search replays the same proposals; history.jsonl supplies the
scores of everything already evaluated (nothing is scored twice), and new candidates are appended.
"""
from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from .. import interrupt, layout, threads
from ..arch import Arch
from ..errors import UserError
from ..options import OutputOptions, flag, opt
from ..resume import differing
from ..rundir import OPTIONS, RunDir
from ..threads import HELP as THREADS_HELP
from .algorithm import EvolutionConfig
from .defaults import STRATEGIES
from .history import HISTORY, History
from .options import LatencyOptions, RerankOptions, ScoringOptions, StrategyOptions

BEST = "best_arch.json"
SETTINGS = "search.json"
CONSTRAINTS = "constraints (candidates outside are never evaluated)"
PLOT = "search_curve.png"


@dataclass(frozen=True)
class SearchOptions(StrategyOptions, RerankOptions, LatencyOptions, ScoringOptions, OutputOptions):
    GROUP: ClassVar[str] = "scoring"

    out: str = layout.SEARCH
    seed: int = opt(0, "seed of the search's draws", group="")
    space: str | None = opt(None, "expected search space (checked against the supernet's)", group="")
    max_params: int | None = opt(None, "max backbone parameters at the supernet's size", group=CONSTRAINTS)
    max_flops: int | None = opt(None, "max backbone FLOPs per max_length sequence", group=CONSTRAINTS)
    prefix_cache: bool = opt(True, "recompute every candidate from the embeddings")
    cache_mb: int = opt(1024, "memory for cached prefix activations")
    threads: int | None = opt(None, THREADS_HELP)
    given: list[str] | None = field(default=None, compare=False)  # options typed on the command line


def _check_space(spec, expected: str | None, run_dir) -> None:
    if expected is None:
        return
    from ..config import load_space

    want = load_space(expected)
    if (want.slots, list(want.candidates)) != (spec.slots, list(spec.candidates)):
        raise UserError(f"supernet {run_dir} was trained on space {spec.name!r} ({spec.slots} slots of "
                        f"{'/'.join(spec.candidates)}), not on {want.name!r} ({want.slots} slots of "
                        f"{'/'.join(want.candidates)})")


def settings_of(opts: SearchOptions, scorer, latency=None) -> dict:
    return {
        "supernet": str(Path(opts.supernet).resolve()),
        "space": scorer.spec.to_dict(),
        "seed": opts.seed,
        "evolution": opts.evolution.to_dict(),
        "budget": opts.evolution.budget,
        "constraints": {"max_params": opts.max_params, "max_flops": opts.max_flops,
                        **(latency.settings() if latency else {})},
        "val_tokens": opts.val_tokens,
        "batch_size": opts.batch_size,
        "data": scorer.val_stats["data"],
    }


def run_search(opts: SearchOptions, log=None) -> dict:
    """Run every strategy in `opts.strategies` with the same budget; returns best_arch.json's content."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    run = RunDir(opts.out, "search", "output directory")
    older = opts.resume and not run.has(OPTIONS) and run.has(SETTINGS)  # a search of an older version: options there
    opts = run.begin(opts, marker=SETTINGS, stored=run.read_json(SETTINGS).get("options") if older else None)
    opts.evolution.validate()
    unknown = [s for s in opts.strategies if s not in STRATEGIES]
    if unknown or not opts.strategies:
        raise UserError(f"unknown strategy {', '.join(unknown) or '(none)'}; choose from {', '.join(STRATEGIES)}")
    if len(set(opts.strategies)) != len(opts.strategies):
        raise UserError("a strategy is listed twice")
    from .rerank import check as check_rerank

    check_rerank(opts.rerank, opts.rerank_steps)
    for name in ("max_params", "max_flops"):
        v = getattr(opts, name)
        if v is not None and v < 1:
            raise UserError(f"{flag(name, opts)} must be positive, got {v}")
    out = run.path
    supernet = Path(opts.supernet)
    if not supernet.is_dir():
        raise UserError(f"supernet directory not found: {supernet}")

    threads.settle(opts.threads)
    from ..data.validation import resolve_device
    from .cost import CostModel
    from .latency import LatencySearch, both, write_pareto
    from .scorer import open_scorer, scored_shape

    spec, cfg = scored_shape(supernet)  # the constraints are checked before weights and data are loaded
    _check_space(spec, opts.space, supernet)
    cost = CostModel(cfg, spec)
    accept = cost.constraint(opts.max_params, opts.max_flops)  # raises when a bound is impossible
    latency = LatencySearch.from_options(opts.max_latency_ms, opts.latency_table, opts.pareto, cfg, spec,
                                         resolve_device(opts.device).type)
    accept = both(accept, latency and latency.accept)
    scorer = open_scorer(supernet, val_tokens=opts.val_tokens, batch_size=opts.batch_size, data=opts.data,
                         prefix_cache=opts.prefix_cache, cache_mb=opts.cache_mb, keep=opts.evolution.topk,
                         device=opts.device)  # a one-shot supernet run, or a few-shot directory
    settings = settings_of(opts, scorer, latency)

    # everything checked: only now touch the output directory
    if opts.resume:
        diff = differing(run.read_json(SETTINGS).get("settings", {}), settings)  # compared as options are
        if diff:
            raise UserError(f"cannot resume {out}: the search settings differ ({', '.join(diff)}); "
                            "use the same options or --overwrite")
    created = opts.overwrite or not out.exists() or not any(out.iterdir())
    run.open(opts, marker=SETTINGS)
    for stale in (BEST, PLOT):  # a resumed search rewrites them at the end
        (out / stale).unlink(missing_ok=True)
    run.write_json(SETTINGS, {"settings": settings, "strategies": opts.strategies})
    history = History(out / HISTORY)
    scorer.remember(history.records)  # known scores are never recomputed
    budget = opts.evolution.budget
    if opts.progress:  # a human watching: the budget before the bars (an error later stays the only line otherwise)
        log(f"search budget per strategy: {opts.evolution.budget_text()}")
    summary: dict[str, dict] = {}
    from tqdm.auto import tqdm

    def strategy_bar(i: int):  # one bar per strategy, its own budget: "random [3/3]: 26/1000"
        n = len(opts.strategies)
        return tqdm(total=budget, desc=opts.strategies[i] + (f" [{i + 1}/{n}]" if n > 1 else ""), unit="cand",
                    disable=not opts.progress, file=sys.stderr, dynamic_ncols=True, mininterval=0.5)

    bar = strategy_bar(0)
    reranked = None
    try:
        for i, name in enumerate(opts.strategies):
            if i:
                bar.close()
                bar = strategy_bar(i)
            summary[name] = _run_one(name, opts, scorer, cost, accept, history, bar, out, latency)
        bar.close()
        if opts.rerank:
            from .rerank import rerank

            reranked = rerank(history.records, opts.rerank, opts.rerank_steps, scorer, out, opts.seed,
                              opts.progress, log)
    except KeyboardInterrupt:  # lvbert's one line says how to continue (interrupt.py)
        bar.close()
        interrupt.note(f"candidate {len(history.records) + 1}")
        raise
    except UserError:
        bar.close()
        history.close()
        if created and not history.records:  # failed before evaluating anything: leave no output behind
            shutil.rmtree(out, ignore_errors=True)
        raise
    finally:
        bar.close()
        history.close()

    best_name = max(summary, key=lambda n: (summary[n]["score"], -opts.strategies.index(n)))
    best = summary[best_name]
    result = _best_arch(best, best_name, opts, scorer, cost, summary, reranked)
    result["evidence"] = evidence(history.records, result, scorer)
    if latency:
        result["constraints"].update(latency.summary(scorer.parse(result["compact"])))
    if opts.pareto:
        result["pareto"] = str(out / "pareto.json")
        write_pareto(history.records, out, opts.max_latency_ms)
    _plot(history.records, opts.strategies, out / PLOT, opts.evolution)
    run.write_json(SETTINGS, {"settings": settings, "strategies": opts.strategies, "summary": summary,
                              "scorer": scorer.stats()})
    run.write_json(BEST, result)
    return result


def _run_one(name: str, opts: SearchOptions, scorer, cost, accept, history: History, bar, out: Path,
             latency=None) -> dict:
    from .strategy import SupernetEvaluator, make_strategy, run_strategy

    cfg = opts.evolution
    previous = history.by_strategy(name)
    strategy = make_strategy(name, cfg, opts.seed, accept)
    state = {"index": 0, "best": None, "start": time.perf_counter(), "computed": scorer.computed}

    def score(arch: Arch) -> float:
        compact = arch.compact
        i = state["index"]
        state["index"] += 1
        if i < len(previous):  # replaying an interrupted search: same seed, same proposals
            if previous[i]["arch"] != compact:
                raise UserError(f"cannot resume: {HISTORY} does not match the replayed {name} search at candidate "
                                f"{i} ({previous[i]['arch']} vs {compact}); use --overwrite")
            value = previous[i]["score"]
        else:
            cached = arch in scorer.scores
            t0 = time.perf_counter()
            value = scorer.score(arch)
            iteration = strategy.iteration if hasattr(strategy, "iteration") else cfg.iteration_of(i)
            history.append({"strategy": name, "index": i, "iteration": iteration, "arch": compact,
                            "arch_dict": arch.dict, "score": value, "backbone_params": cost.params(arch),
                            "backbone_flops": cost.flops(arch), **(latency.record(arch) if latency else {}),
                            "cached": cached,
                            "seconds": round(time.perf_counter() - t0, 4)})
        if state["best"] is None or value > state["best"][1]:
            state["best"] = (compact, value)
        bar.update(1)
        bar.set_postfix(best=f"{state['best'][1]:.4f}", refresh=False)
        return value

    run_strategy(scorer.space, strategy, SupernetEvaluator(score), cfg.budget, (out / "nni").resolve())
    if state["best"] is None:
        raise UserError("no candidate satisfies the constraints (--max-params/--max-flops/--max-latency-ms): nothing "
                        "was evaluated")
    bar.update(cfg.budget - state["index"])  # strategies that stop early (exhausted space) still fill the bar
    records = history.by_strategy(name)
    best = max(records, key=lambda r: (r["score"], -r["index"]))
    return {"arch": best["arch"], "score": best["score"], "evaluations": len(records),
            "computed": scorer.computed - state["computed"], "seconds": round(time.perf_counter() - state["start"], 2)}


def evidence(records: list[dict], result: dict, scorer, k: int = 10) -> dict:
    """What best_arch.json's score rests on: the supernet's training steps, the validation tokens, the score's own
    standard error (clustered by validation sequence: one more pass of the best order) and how many of the best k
    distinct orders score within 2 of those errors of it (more than one: the search cannot tell them apart)."""
    best = {}
    for r in records:
        best[r["arch"]] = max(best.get(r["arch"], -1.0), r["score"])
    top = sorted(best.values(), reverse=True)[:k]
    se = scorer.metrics(result["compact"])["mlm_acc_se"]
    within = sum(1 for v in top if result["score"] - v <= 2 * se)
    return {"supernet_steps": scorer.describe().get("steps"), "masked_tokens": scorer.val_stats["masked_tokens"],
            "score_se": se, "top_k": len(top), "top_k_range": [top[-1], top[0]] if top else None,
            "top_k_within_2se": within,
            "note": (f"{within} of the {len(top)} best distinct orders score within 2 standard errors of the pick: "
                     "the search does not separate them" if within > 1 else
                     f"the pick is more than 2 standard errors above the next of the {len(top)} best orders")}


def _best_arch(best: dict, name: str, opts: SearchOptions, scorer, cost, summary: dict, reranked=None) -> dict:
    """best_arch.json: the search's best order or, after --rerank, the re-ranking's pick (with both stages)."""
    from ..info import param_counts

    stages = {}
    if reranked is not None:
        pick = next(c for c in reranked["candidates"] if c["arch"] == reranked["pick"])
        stages = {"stage1": {"arch": best["arch"], "score": best["score"], "strategy": name},
                  "rerank": reranked}
        best = {"arch": pick["arch"], "score": pick["inherited"]}
    arch = scorer.parse(best["arch"])
    params = param_counts(scorer.cfg, arch)
    return {
        "arch": arch.dict,
        "compact": best["arch"],
        "score": best["score"],
        "metric": "mlm_acc (inherited supernet weights, fixed-masked validation split)" + (
            f"; picked among the {reranked['k']} best by {reranked['steps']} steps of stand-alone pre-training"
            if reranked else ""),
        "params": {k: params[k] for k in ("backbone", "word_embedding", "other_embedding", "mlm_head", "total")},
        "backbone_flops": cost.flops(arch),
        "strategy": name,
        "seed": opts.seed,
        "supernet": {**scorer.describe(), "run_dir": str(Path(opts.supernet).resolve())},
        "space": scorer.spec.name,
        "size": scorer.meta.get("size"),
        "budget": opts.evolution.budget,
        "evolution": opts.evolution.to_dict(),
        "constraints": {"max_params": opts.max_params, "max_flops": opts.max_flops},
        "validation": {"sequences": scorer.val_stats["sequences"], "tokens": scorer.val_stats["tokens"],
                       "masked_tokens": scorer.val_stats["masked_tokens"]},
        "strategies": summary,
        **stages,
    }


def top_curve(records: list[dict], iterations: int, k: int = 10) -> list[list[float]]:
    """Per iteration, the k best scores among everything evaluated up to and including it."""
    out, pool = [], []
    by_iter: dict[int, list[float]] = {}
    for r in records:
        by_iter.setdefault(r["iteration"], []).append(r["score"])
    last = max(by_iter) if by_iter else -1
    for it in range(min(iterations, last + 1)):
        pool = sorted(pool + by_iter.get(it, []), reverse=True)[:k]
        out.append(list(pool))
    return out


def _plot(records: list[dict], strategies: list[str], path: Path, cfg: EvolutionConfig) -> None:
    from matplotlib.ticker import MaxNLocator

    from ..atomic import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    styles = [("o", "-"), ("s", "--"), ("^", ":")]
    for i, name in enumerate(strategies):
        curve = top_curve([r for r in records if r["strategy"] == name], cfg.iterations)
        if not curve:
            continue
        xs = list(range(1, len(curve) + 1))
        mean = [sum(c) / len(c) for c in curve]
        marker, style = styles[i % len(styles)]
        line, = ax.plot(xs, mean, marker=marker, linestyle=style, markersize=4, label=name)
        ax.fill_between(xs, [min(c) for c in curve], [max(c) for c in curve], color=line.get_color(), alpha=0.15)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("iteration")
    ax.set_ylabel("MLM accuracy of the top 10")
    ax.set_title("Top-10 MLM accuracy per iteration (line: mean, band: min-max)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)

