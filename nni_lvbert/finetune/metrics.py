"""Task metrics (scikit-learn / scipy; the `evaluate` library would fetch metric scripts online) and the summary
over seeds and tasks.

CoLA: Matthews correlation; STS-B: Spearman (and Pearson); MRPC/QQP: accuracy and F1 (positive class "1");
MNLI: accuracy on dev_matched and dev_mismatched; others: accuracy. Every value is in [0, 100] (GLUE's convention).
A task's *score* is its first metric (the mean of acc and F1 for MRPC/QQP, of Spearman and Pearson for STS-B, of
matched and mismatched for MNLI, as the GLUE leaderboard averages them); the GLUE score is the mean task score over
the eight tasks without WNLI.
"""
from __future__ import annotations

import statistics

import numpy as np


def compute(metrics: tuple[str, ...], preds, labels) -> dict[str, float]:
    """`preds`/`labels`: class indices (classification) or floats (regression)."""
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    preds, labels = np.asarray(preds), np.asarray(labels)
    out = {}
    for m in metrics:
        if m == "acc":
            v = accuracy_score(labels, preds)
        elif m == "f1":
            v = f1_score(labels, preds, pos_label=1, average="binary", zero_division=0.0)
        elif m == "mcc":
            v = matthews_corrcoef(labels, preds)
        elif m in ("spearman", "pearson"):
            if np.std(preds) == 0 or np.std(labels) == 0:
                v = 0.0  # undefined (constant predictions): scored as no correlation
            else:
                v = (spearmanr if m == "spearman" else pearsonr)(preds, labels)[0]
        else:
            raise ValueError(f"unknown metric {m}")
        out[m] = 100.0 * float(v)
    return out


def task_score(dev_metrics: dict[str, dict[str, float]]) -> float:
    """One number per task: mean over its dev sets of the mean of its metrics (see module docstring)."""
    per_dev = [statistics.fmean(m.values()) for m in dev_metrics.values()]
    return statistics.fmean(per_dev)


def summarize(per_seed: dict[int, dict]) -> dict:
    """Median over seeds of the score and of every metric, plus each seed's values."""
    seeds = sorted(per_seed)
    flat: dict[str, list[float]] = {}
    for s in seeds:
        for dev, ms in per_seed[s]["dev"].items():
            for k, v in ms.items():
                flat.setdefault(f"{dev}/{k}", []).append(v)
    return {"seeds": seeds, "score_median": statistics.median(per_seed[s]["score"] for s in seeds),
            "score_per_seed": {str(s): per_seed[s]["score"] for s in seeds},
            "median": {k: statistics.median(v) for k, v in flat.items()},
            "per_seed": {k: dict(zip(map(str, seeds), v)) for k, v in flat.items()}}


def glue_score(task_medians: dict[str, float]) -> float | None:
    """Mean over the eight GLUE tasks without WNLI; None unless all eight were run."""
    from .tasks import GLUE_SCORE_TASKS

    if not all(t in task_medians for t in GLUE_SCORE_TASKS):
        return None
    return statistics.fmean(task_medians[t] for t in GLUE_SCORE_TASKS)
