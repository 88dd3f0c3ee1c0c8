"""`lvbert study ranking`: does the supernet's inherited-weight ranking agree with stand-alone training?

1. a pool of architectures: `--pool` uniform random ones (seeded) plus, with `--searched DIR`, the best of that
   search's history; each scored with inherited supernet weights on the study's validation tokens (pool.json);
2. N of them spread evenly over the pool's score range (by rank), plus the named baselines that fit the space and
   the searched architecture;
3. each trained stand-alone from scratch (MLM, the supernet's shape, one budget, the supernet's data), and scored
   on the very same validation tokens;
4. Kendall tau and Spearman rho between the two scores with bootstrap 95 % intervals; ranking.json / .md / .png.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..arch import NAMED_ARCHS, Arch
from ..errors import UserError
from ..atomic import write_json, write_text
from ..safeio import read_json
from ..atomic import pyplot, save_figure
from .common import StudyOptions, begin, log, shown_path, shown_stats, start
from .stats import markdown_table, rank_correlations
from .store import Standalone, standalone_accuracy, train_all

POOL = "pool.json"
RESULT = "ranking.json"


@dataclass
class RankingOptions(StudyOptions):
    supernet: str = ""
    num_archs: int | None = None  # N spread over the score range (default 12, quick 3)
    pool: int | None = None  # random architectures scored to pick from (default 100, quick 12)
    searched: str | None = None  # a search directory (its 20 best join the pool, its winner the list) or best_arch.json
    baselines: bool = True


def _defaults(opts: RankingOptions) -> tuple[int, int]:
    return (opts.num_archs if opts.num_archs is not None else (3 if opts.quick else 12),
            opts.pool if opts.pool is not None else (12 if opts.quick else 100))


def _search_archs(searched: str | None, scorer) -> tuple[list[Arch], Arch | None]:
    """(the 20 best of a search's history, its winner) from a search directory or a best_arch.json."""
    if not searched:
        return [], None
    from ..search.history import read_history

    path = Path(searched)
    best_file = path / "best_arch.json" if path.is_dir() else path
    best = read_json(best_file, "search result (best_arch.json)")
    if "arch" not in best:
        raise UserError(f"{best_file} is not a best_arch.json (no 'arch')")
    winner = scorer.parse(best["arch"])
    history = best_file.parent / "history.jsonl"
    records = sorted(read_history(history), key=lambda r: -r["score"]) if history.is_file() else []
    return [scorer.parse(r["arch"]) for r in records[:20]], winner


def _pick(pool: list[tuple[Arch, float]], n: int) -> list[Arch]:
    """n architectures at evenly spaced ranks of the pool sorted by score (lowest, ..., highest)."""
    ranked = sorted(pool, key=lambda p: (p[1], p[0].compact))
    if n >= len(ranked):
        return [a for a, _ in ranked]
    if n == 1:
        return [ranked[-1][0]]
    return [ranked[round(i * (len(ranked) - 1) / (n - 1))][0] for i in range(n)]


def run_ranking(opts: RankingOptions) -> dict:
    import numpy as np

    from ..search.scorer import SupernetScorer

    opts = begin(opts, "study")
    if not opts.supernet:
        raise UserError("give the trained supernet with --supernet RUN")
    n, pool_size = _defaults(opts)
    if n < 3:
        raise UserError(f"--archs must be at least 3 (rank correlations), got {n}")
    budget = opts.budget()
    scorer = SupernetScorer(opts.supernet, val_tokens=opts.val_tokens, device="cpu", prefix_cache=True)
    from_search, searched = _search_archs(opts.searched, scorer)
    out = start(opts)

    # 1. the pool, scored with inherited weights (stored: a resumed study does not re-score it)
    if (out / POOL).is_file():
        pool = [(scorer.parse(p["arch"]), p["score"]) for p in read_json(out / POOL)["pool"]]
    else:
        rng = np.random.default_rng(opts.seed)
        cands = scorer.spec.candidates
        archs = {Arch(tuple(cands[int(i)] for i in rng.integers(0, len(cands), scorer.spec.slots)))
                 for _ in range(pool_size)}
        archs = sorted(archs | set(from_search))
        log(f"scoring a pool of {len(archs)} architectures with inherited weights")
        pool = [(a, scorer.score(a)) for a in _progress(archs, opts.progress, "inherited")]
        write_json(out / POOL, {"pool": [{"arch": a.compact, "score": s} for a, s in pool],
                                       "random": pool_size, "from_search": len(from_search),
                                       "validation": shown_stats(scorer.val_stats)})

    # 2. the compared architectures
    chosen: dict[Arch, str] = {a: "spread" for a in _pick(pool, n)}
    if searched is not None:
        chosen[searched] = "searched"
    if opts.baselines:
        for name in NAMED_ARCHS:
            try:
                chosen.setdefault(scorer.parse(name), name)
            except UserError:
                log(f"baseline {name} does not fit the supernet's space ({'/'.join(scorer.spec.candidates)}); "
                    "left out")
    inherited = dict(pool)
    for a in chosen:
        if a not in inherited:
            inherited[a] = scorer.score(a)

    # 3. stand-alone training, scored on the same tokens
    data = scorer.val_stats["data"]
    from ..config import size_names

    size = scorer.meta.get("size")  # the supernet's training preset; its shape comes from model_config.json
    size = size if size in size_names() else scorer.spec.size
    order = sorted(chosen.items(), key=lambda kv: -inherited[kv[0]])
    specs = [(f"stand-alone MLM training of {arch.compact} ({role})",
              Standalone(arch=arch.compact, objective="mlm", size=size, model_config=scorer.cfg.to_dict(),
                         budget=budget, data=data, seed=opts.seed, data_seed=opts.data_seed))
             for arch, role in order]
    paths = train_all(specs, opts.store(), opts.progress)
    rows = [{"arch": arch.compact, "role": role, "inherited": inherited[arch],
             "standalone": standalone_accuracy(path, scorer.batches), "run": str(path)}
            for (arch, role), path in zip(order, paths)]
    stats = rank_correlations([r["inherited"] for r in rows], [r["standalone"] for r in rows], seed=opts.seed)
    result = {"study": "ranking", "supernet": shown_path(opts.supernet), "size": size,
              "budget": budget.__dict__, "seed": opts.seed, "data": shown_path(data),
              "validation": shown_stats(scorer.val_stats),
              "pool": len(pool), "rows": rows, **stats}
    _report(result, out)
    write_json(out / RESULT, result)
    return result


def _progress(items, enabled: bool, desc: str):
    import sys

    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, disable=not enabled, file=sys.stderr, dynamic_ncols=True, mininterval=0.5)


def _ci(ci) -> str:
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "n/a"


def _num(v) -> str:
    return "undefined" if v is None else f"{v:.3f}"


def _report(result: dict, out: Path) -> None:
    rows = result["rows"]
    b = result["budget"]
    md = [f"# Inherited-weight vs stand-alone ranking ({result['n']} architectures)\n",
          f"Supernet `{result['supernet']}` (size {result['size']}); stand-alone: MLM from scratch, {b['steps']} "
          f"steps, batch {b['batch_size']}, lr {b['lr']:g}, warm-up {b['warmup_steps']}, seed {result['seed']}; "
          f"both scored on the same {result['validation']['masked_tokens']} masked validation tokens.\n",
          f"- Kendall tau **{_num(result['kendall_tau'])}** (95 % bootstrap {_ci(result['kendall_tau_ci95'])})",
          f"- Spearman rho **{_num(result['spearman_rho'])}** (95 % bootstrap {_ci(result['spearman_rho_ci95'])})"
          + (f" — {result['undefined']}" if result.get("undefined") else "") + "\n",
          markdown_table(["arch", "role", "inherited", "stand-alone"],
                         [[f"`{r['arch']}`", r["role"], r["inherited"], r["standalone"]] for r in rows])]
    write_text(out / "ranking.md", "\n".join(md))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    for role, marker in (("spread", "o"), ("searched", "*")):
        pts = [(r["inherited"], r["standalone"]) for r in rows if r["role"] == role]
        if pts:
            ax.scatter(*zip(*pts), marker=marker, s=90 if role == "searched" else 30, label=role, zorder=3)
    named = [r for r in rows if r["role"] not in ("spread", "searched")]
    if named:
        ax.scatter([r["inherited"] for r in named], [r["standalone"] for r in named], marker="s", s=36,
                   label="baselines", zorder=3)
    _label_points(ax, [(r["role"], r["inherited"], r["standalone"]) for r in rows if r["role"] != "spread"],
                  [(r["inherited"], r["standalone"]) for r in rows])
    ax.set_xlabel("inherited-weight MLM accuracy (supernet)")
    ax.set_ylabel("stand-alone MLM accuracy")
    if result["kendall_tau"] is None:  # e.g. --quick: too few distinct scores to rank
        title = f"Kendall τ undefined: {result.get('undefined') or 'the scores do not vary'}"
    else:
        title = (f"Kendall τ = {_num(result['kendall_tau'])} {_ci(result['kendall_tau_ci95'])}, "
                 f"Spearman ρ = {_num(result['spearman_rho'])}")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, out / "ranking.png", dpi=110, bbox_inches="tight")


def _label_points(ax, labels, points=(), fontsize: int = 8) -> None:
    """Annotate points so that labels do not overprint each other or the markers: each label takes the first of a
    few offsets (right/left, above/below, further out) whose box, estimated in points, stays inside the axes and
    is free of the markers and of the labels placed so far; a thin line joins each label to its point."""
    ax.autoscale_view()
    scale = ax.figure.dpi / 72  # display pixels per point
    width, height = 0.62 * fontsize, 1.25 * fontsize  # per character, per line (points)
    (x0, y0), (x1, y1) = (v / scale for v in ax.get_window_extent().get_points())
    placed = [(px - 4, py - 4, px + 4, py + 4) for px, py in
              ((v / scale for v in ax.transData.transform(p)) for p in points)]
    for text, x, y in sorted(labels, key=lambda t: (t[1], t[2])):
        px, py = (v / scale for v in ax.transData.transform((x, y)))
        w = width * len(text)
        offsets = [(6, -4), (-6 - w, -4), (6, 3), (6, -13), (-6 - w, 3), (-6 - w, -13), (6, 13), (6, -23),
                   (-6 - w, 13), (-6 - w, -23), (20, -4), (-20 - w, -4)]
        boxes = [(px + dx, py + dy, px + dx + w, py + dy + height) for dx, dy in offsets]
        free = [b for b in boxes if x0 <= b[0] and b[2] <= x1 and y0 <= b[1] and b[3] <= y1
                and not any(b[0] < o[2] and o[0] < b[2] and b[1] < o[3] and o[1] < b[3] for o in placed)]
        box = free[0] if free else boxes[0]
        placed.append(box)
        ax.annotate(text, (x, y), fontsize=fontsize, xytext=(box[0] - px, box[1] - py), textcoords="offset points",
                    arrowprops={"arrowstyle": "-", "lw": 0.6, "color": "0.4", "shrinkA": 0, "shrinkB": 3})
