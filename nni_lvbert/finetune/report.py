"""The results of a fine-tuning output directory: results.json, results.md and dev_curve.png (all atomic)."""
from __future__ import annotations

from pathlib import Path

from ..atomic import pyplot, save_figure, write_json, write_text
from ..options import to_dict
from . import metrics as M

NAMES = {"acc": "acc", "f1": "F1", "mcc": "MCC", "spearman": "Spearman", "pearson": "Pearson", "em": "EM",
         "HasAns_em": "HasAns EM", "HasAns_f1": "HasAns F1", "NoAns_em": "NoAns EM", "NoAns_f1": "NoAns F1"}


def _label(key: str) -> str:
    dev, metric = key.split("/")
    prefix = {"dev": "", "dev_matched": "m ", "dev_mismatched": "mm "}.get(dev, f"{dev} ")
    return prefix + NAMES.get(metric, metric)


def markdown(results: dict, glue: float | None, seeds: list[int]) -> str:
    lines = [f"Median over seeds {', '.join(map(str, seeds))}; each seed's score in brackets. Scores in [0, 100].",
             "", "| task | dev metrics (median) | score | per seed |", "|---|---|---|---|"]
    for task, r in results.items():
        metrics = ", ".join(f"{_label(k)} {v:.2f}" for k, v in r["median"].items())
        seeds_txt = ", ".join(f"{v:.2f}" for v in r["score_per_seed"].values())
        lines.append(f"| {task} | {metrics} | **{r['score_median']:.2f}** | [{seeds_txt}] |")
    named = [f"- {task}: score = {r['score']}" for task, r in results.items() if r.get("score")]
    if named:
        lines += ["", *named]
    if glue is not None:
        lines += ["", f"GLUE score (mean of the 8 tasks without WNLI): **{glue:.2f}**"]
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> None:
    plt = pyplot()
    n = len(results)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False)
    for ax, (task, r) in zip(axes[0], results.items()):
        for seed, hist in r["curves"].items():
            ax.plot([h["epoch"] for h in hist], [h["score"] for h in hist], marker="o", label=f"seed {seed}")
        ax.set_title(task)
        ax.set_xlabel("epoch")
        ax.set_ylabel("dev score")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def write_reports(out: Path, opts, results: dict) -> dict:
    glue = M.glue_score({t: r["score_median"] for t, r in results.items()})
    summary = {"model": opts.model, "seeds": list(opts.seeds), "glue_score": glue, "tasks": results,
               "options": to_dict(opts)}
    write_json(out / "results.json", summary)
    write_text(out / "results.md", markdown(results, glue, list(opts.seeds)))
    plot(results, out / "dev_curve.png")
    return summary
