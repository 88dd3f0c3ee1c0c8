"""The ranking study's plots (`study/ranking.py` writes them from ranking.json's content): tau and regret against
cost (ranking.png), the ground truth against each ranker (ranking-scatter.png), each order's seeds and their mean
(ranking-truth.png); `label_points` places labels clear of each other and of the markers."""
from __future__ import annotations

from pathlib import Path

from ..arch import NAMED_ARCHS
from ..atomic import pyplot, save_figure


def plot_cost(result: dict, path: Path) -> None:
    """Kendall tau (with its interval) and regret against each ranker's cost, log scale."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6))
    taus, regrets = [], []
    for t in result["rankers"]:
        cost = max(t["core_minutes"], 1e-3)
        if t["kendall_tau"] is not None:
            h = t.get("kendall_tau_hierarchical")  # orders and seeds resampled, where reanalysed
            ci = (h["ci95"] if h else t["kendall_tau_ci95"]) or [t["kendall_tau"]] * 2
            # a bootstrap interval need not hold its point estimate (a small study): bars are clipped at the point
            left.errorbar([cost], [t["kendall_tau"]], yerr=[[max(0.0, t["kendall_tau"] - ci[0])],
                                                            [max(0.0, ci[1] - t["kendall_tau"])]],
                          fmt="o", capsize=3)
            taus.append((t["ranker"], cost, t["kendall_tau"]))
        right.plot([cost], [t["regret"]], "o")
        regrets.append((t["ranker"], cost, t["regret"]))
    ceiling, corrected, ref = result["noise_ceiling"], result.get("reliability"), result.get("perfect_ranker")
    if ceiling:
        left.axhline(ceiling["kendall_tau"], ls="--", color="0.4", lw=1,
                     label="split-half agreement" if ref else "noise ceiling (split-half)")
    if ref and ref.get("kendall_tau") is not None:
        left.axhline(ref["kendall_tau"], ls=":", color="0.2", lw=1,
                     label=f"perfect ranker against the {len(result['seeds'])}-seed mean (expected; 5-95 % band)")
        left.axhspan(*ref["range90"], color="0.85", alpha=0.5, lw=0)
    elif corrected:
        left.axhline(corrected["kendall_tau_noise_free"], ls=":", color="0.2", lw=1,
                     label=f"noise-free ranker against the {len(result['seeds'])}-seed mean")
    if ceiling or corrected:
        left.legend(fontsize=8)
    if result["seed_std_median"] is not None:
        right.axhline(result["seed_std_median"], ls="--", color="0.4", lw=1, label="median seed spread")
        right.legend(fontsize=8)
        # linear up to a tenth of the seed spread, logarithmic above: picks within the noise stay apart from a
        # pick that is far off
        right.set_yscale("symlog", linthresh=max(result["seed_std_median"] / 10, 1e-6))
    for ax, label, points in ((left, "Kendall τ against the ground truth", taus),
                              (right, "regret of the pick", regrets)):
        ax.set_xscale("log")
        ax.set_xlabel("cost (core-minutes)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        label_points(ax, points, [(x, y) for _, x, y in points])
    fig.suptitle(f"{result['orders']} orders, {len(result['seeds'])}-seed stand-alone ground truth", fontsize=10)
    save_figure(fig, path, dpi=110, bbox_inches="tight")


def plot_scatter(result: dict, path: Path) -> None:
    """The ground truth against each ranker's scores, one panel per ranker, the named orders labelled."""
    plt = pyplot()
    rankers = result["rankers"]
    cols = min(len(rankers), 5)
    nrows = -(-len(rankers) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.8 * nrows), squeeze=False)
    for ax in axes.flat[len(rankers):]:
        ax.set_visible(False)
    rows = result["rows"]
    for ax, t in zip(axes.flat, rankers):
        name = t["ranker"]
        ax.scatter([r[name] for r in rows], [r["ground_truth"] for r in rows], s=22, zorder=3)
        label_points(ax, [(r["role"], r[name], r["ground_truth"]) for r in rows if r["role"] in NAMED_ARCHS
                           or r["role"] == "searched"], [(r[name], r["ground_truth"]) for r in rows])
        title = f"{name}: τ {t['kendall_tau']:.2f}" if t["kendall_tau"] is not None else \
            f"{name}: τ n/a ({t.get('undefined') or 'all scores equal'})"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(f"{name} score")
        ax.grid(alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("ground truth (stand-alone, seed mean)")
    fig.tight_layout()
    save_figure(fig, path, dpi=110, bbox_inches="tight")


def plot_truth(result: dict, path: Path) -> None:
    """The ground truth itself: every order's per-seed scores (dots) and their mean (a bar), best first; the left
    panel all orders, the right one only those with convolution, on its own scale (how far the seeds agree
    where the orders are close)."""
    plt = pyplot()
    rows = sorted(result["rows"], key=lambda r: -r["ground_truth"])
    groups = [("all orders", rows), ("orders with convolution", [r for r in rows if "c" in r["arch"]])]
    groups = [(title, g) for title, g in groups if g]
    fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4.2), squeeze=False)
    colors = {True: "tab:blue", False: "tab:orange"}  # holds convolution or not
    for ax, (title, group) in zip(axes[0], groups):
        for x, r in enumerate(group):
            color = colors["c" in r["arch"]]
            ax.plot([x - 0.3, x + 0.3], [r["ground_truth"]] * 2, color=color, lw=2)
            ax.scatter([x] * len(r["seeds"]), r["seeds"], s=10, color=color, alpha=0.6, zorder=3)
        ax.set_xticks(range(len(group)))
        ax.set_xticklabels([r["role"] if r["role"] in NAMED_ARCHS or r["role"] == "searched" else ""
                            for r in group], rotation=60, ha="right", fontsize=7)
        ax.set_title(f"{title} ({len(group)}), best first", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    what = "minus the MLM loss" if result["rank_by"] == "loss" else "MLM accuracy"  # the scores: higher is better
    axes[0][0].set_ylabel(f"stand-alone {what} (dots: seeds; bar: mean)")
    fig.suptitle(f"The ground truth: {len(result['seeds'])} seed(s) per order; blue: with convolution", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110, bbox_inches="tight")


def label_points(ax, labels, points=(), fontsize: int = 8) -> None:
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
                   (-6 - w, 13), (-6 - w, -23), (20, -4), (-20 - w, -4), (6, 23), (-6 - w, 23), (6, 33),
                   (-6 - w, 33), (6, -33), (-6 - w, -33)]
        boxes = [(px + dx, py + dy, px + dx + w, py + dy + height) for dx, dy in offsets]

        def overlap(b):  # area shared with the markers and labels placed so far
            return sum(max(0, min(b[2], o[2]) - max(b[0], o[0])) * max(0, min(b[3], o[3]) - max(b[1], o[1]))
                       for o in placed)

        inside = [b for b in boxes if x0 <= b[0] and b[2] <= x1 and y0 <= b[1] and b[3] <= y1] or boxes
        box = min(inside, key=overlap)  # the first free box, else the least covered one
        placed.append(box)
        ax.annotate(text, (x, y), fontsize=fontsize, xytext=(box[0] - px, box[1] - py), textcoords="offset points",
                    arrowprops={"arrowstyle": "-", "lw": 0.6, "color": "0.4", "shrinkA": 0, "shrinkB": 3})
