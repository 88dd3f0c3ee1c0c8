"""How does the ranking move with the stand-alone budget? Two `lvbert study ranking` results over the same
architectures (same supernet, same validation tokens, different --steps) -> rank correlations between the
inherited-weight score and each budget's stand-alone score, and between the two budgets; JSON + PNG.

    python scripts/ranking_budget.py docs/study/ranking.json docs/study/ranking-4k.json \
        --out docs/study/ranking-budget        # writes ranking-budget.json and ranking-budget.png
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

NAMED = ("bert", "dynamicconv", "sandwich", "lvbert-small", "searched")


def _rows(res: dict) -> dict:
    """{arch: role, inherited, standalone} of a ranking.json: the current form (ground truth + one column per
    ranker: the first ranker is the inherited score) or the older one (inherited, standalone)."""
    first = res["rankers"][0]["ranker"] if "rankers" in res else None
    return {r["arch"]: {"role": r["role"], "inherited": r[first] if first else r["inherited"],
                        "standalone": r["ground_truth"] if first else r["standalone"]} for r in res["rows"]}


def compare(a: dict, b: dict) -> dict:
    from nni_lvbert.study.stats import rank_correlations

    rows_a, rows_b = _rows(a), _rows(b)
    if set(rows_a) != set(rows_b):
        raise SystemExit("error: the two ranking studies compare different architectures")
    if a["validation"]["masked_tokens"] != b["validation"]["masked_tokens"]:
        raise SystemExit("error: the two ranking studies were scored on different validation tokens")
    archs = sorted(rows_a, key=lambda k: -rows_a[k]["inherited"])
    steps = [res["budget"]["steps"] for res in (a, b)]
    inh = [rows_a[k]["inherited"] for k in archs]
    sa, sb = [rows_a[k]["standalone"] for k in archs], [rows_b[k]["standalone"] for k in archs]
    conv = [i for i, k in enumerate(archs) if "c" in k]  # orders with at least one dynamic convolution

    def corr(x, y, idx=None):
        idx = range(len(x)) if idx is None else idx
        c = rank_correlations([x[i] for i in idx], [y[i] for i in idx])
        return {k: c[k] for k in ("n", "kendall_tau", "kendall_tau_ci95", "spearman_rho", "spearman_rho_ci95")}

    return {
        "steps": steps,
        "rows": [{"arch": k, "role": rows_a[k]["role"], "inherited": i, f"standalone_{steps[0]}": x,
                  f"standalone_{steps[1]}": y} for k, i, x, y in zip(archs, inh, sa, sb)],
        f"inherited_vs_{steps[0]}": corr(inh, sa),
        f"inherited_vs_{steps[1]}": corr(inh, sb),
        f"{steps[0]}_vs_{steps[1]}": corr(sa, sb),
        "with_convolution": {f"inherited_vs_{steps[0]}": corr(inh, sa, conv),
                             f"inherited_vs_{steps[1]}": corr(inh, sb, conv),
                             f"{steps[0]}_vs_{steps[1]}": corr(sa, sb, conv)},
    }


def plot(result: dict, path: Path) -> None:
    from nni_lvbert.atomic import pyplot, save_figure
    from nni_lvbert.study.ranking_plots import label_points  # labels clear of each other and of the markers

    s0, s1 = result["steps"]
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, key in zip(axes, (f"inherited_vs_{s0}", f"inherited_vs_{s1}")):
        steps = key.rsplit("_", 1)[1]
        points = [(r["inherited"], r[f"standalone_{steps}"]) for r in result["rows"]]
        for r, (x, y) in zip(result["rows"], points):
            named = r["role"] in NAMED
            ax.scatter(x, y, marker="s" if named else "o", s=36 if named else 24, color="C1" if named else "C0",
                       zorder=3)
        label_points(ax, [(r["role"], x, y) for r, (x, y) in zip(result["rows"], points) if r["role"] in NAMED],
                      points, fontsize=7)
        c = result[key]
        ax.set_title(f"{steps} stand-alone steps: Kendall τ = {c['kendall_tau']:.2f}", fontsize=10)
        ax.set_xlabel("inherited-weight MLM accuracy (supernet)")
        ax.set_ylabel("stand-alone MLM accuracy")
        ax.grid(alpha=0.3)
    fig.suptitle(f"τ between the two budgets' stand-alone accuracies: {result[f'{s0}_vs_{s1}']['kendall_tau']:.2f}",
                 fontsize=10)
    save_figure(fig, path, dpi=110, bbox_inches="tight")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("first", help="ranking.json of the shorter budget")
    p.add_argument("second", help="ranking.json of the longer budget")
    p.add_argument("--out", required=True, help="output path without extension (.json and .png are written)")
    a = p.parse_args()
    result = compare(*(json.loads(Path(f).read_text()) for f in (a.first, a.second)))
    out = Path(a.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, out.with_suffix(".png"))
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
