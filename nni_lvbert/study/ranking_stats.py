"""What a ranking study's numbers support (issue 54): intervals that resample the orders AND the ground truth's
seeds, a perfect-ranker reference from a noise model that fits the data, the ranker's tau relative to it, and the
failed-run rule's sensitivity. numpy/scipy only; `reanalyse` stores them, its report prints them.

- **Hierarchical bootstrap** (`hierarchical`): each resample draws n orders with replacement and k seed columns with
  replacement (the same seeds for every order: seeds are crossed with orders), and recomputes the ground truth as the
  mean over the drawn seeds. Resampling orders alone (`stats.rank_correlations`) treats the 3-seed mean as exact and
  leaves out its seed noise, so its interval is too narrow.
- **Perfect-ranker reference** (`perfect_ranker`): the Kendall tau a ranker that knows every order's true value
  reaches against the noisy k-seed mean. Simulated: true values = the observed means shrunk to the between-order
  variance (two-way ANOVA), noise = the mean of k residuals drawn from the two-way fit's own residuals (rescaled
  to undo the fit's degrees of freedom): heavy tails (a failed run) stay in the model, unlike normal noise with the
  pooled sd. It is an expectation with a spread (a ranker can exceed it by chance, or by sharing the ground truth's
  seed noise), not an upper bound.
- **Failed-run rule** (declared in `reanalyse.FAILED_MADS`): a run more than M median absolute deviations below its
  order's median, the MAD pooled over every run of the study; `sensitivity` repeats the answer for no rule and
  M = 10, 20, 50.
"""
from __future__ import annotations

import math

import numpy as np

from .stats import order_effect

LEVEL = 0.95


def kendall(x, y) -> float | None:
    """Kendall tau-b (as `stats.kendall` and scipy compute it, in numpy: the bootstraps call it many thousand times):
    (concordant - discordant) / sqrt(pairs untied in x * pairs untied in y); None when undefined (fewer than 3
    pairs, or constant on one side)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3:
        return None
    i, j = np.triu_indices(len(x), 1)
    dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    untied = float(np.count_nonzero(dx)) * float(np.count_nonzero(dy))
    return None if untied == 0 else float((dx * dy).sum() / np.sqrt(untied))


def _interval(values, level: float = LEVEL) -> list[float] | None:
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return None
    tail = 100 * (1 - level) / 2
    return [float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))]


def _draws(n: int, k: int, resamples: int, seed: int, seeds: bool = True):
    """(order indices, seed columns) of each resample; seeds=False keeps every seed (orders only)."""
    rng = np.random.default_rng(seed)
    for _ in range(resamples):
        idx = rng.integers(0, n, n)
        cols = rng.integers(0, k, k) if seeds else np.arange(k)
        yield idx, cols


def hierarchical(statistic, per_seed, resamples: int = 2000, seed: int = 0, seeds: bool = True) -> dict:
    """statistic(order indices, truth over those orders) on the data and over resamples of orders and seeds
    (`seeds=False`: orders only): the point value and its percentile 95 % interval (undefined resamples skipped)."""
    y = np.asarray(per_seed, float)
    n, k = y.shape
    point = statistic(np.arange(n), y.mean(1))
    values = []
    for idx, cols in _draws(n, k, resamples, seed, seeds):
        if len(set(idx.tolist())) < 3:
            continue
        values.append(statistic(idx, y[idx][:, cols].mean(1)))
    values = [v for v in values if v is not None]
    return {"value": point, "ci95": _interval(values), "resamples": len(values),
            "resampled": "orders and seeds" if seeds else "orders"}


def tau_interval(scores, per_seed, resamples: int = 2000, seed: int = 0, seeds: bool = True) -> dict:
    """Kendall tau of a ranker's scores against the k-seed mean, with the hierarchical interval."""
    s = np.asarray(scores, float)
    return hierarchical(lambda idx, truth: kendall(s[idx], truth), per_seed, resamples, seed, seeds)


def paired_interval(scores_a, scores_b, per_seed, resamples: int = 2000, seed: int = 0) -> dict:
    """tau(a) - tau(b) on the same resampled orders and seeds."""
    a, b = np.asarray(scores_a, float), np.asarray(scores_b, float)

    def diff(idx, truth):
        ta, tb = kendall(a[idx], truth), kendall(b[idx], truth)
        return None if ta is None or tb is None else ta - tb

    return hierarchical(diff, per_seed, resamples, seed)


def regret_interval(scores, per_seed, resamples: int = 2000, seed: int = 0) -> dict:
    """The ground truth's best minus the truth of the ranker's pick (its top-scored order), over resampled orders
    and seeds."""
    s = np.asarray(scores, float)
    return hierarchical(lambda idx, truth: float(truth.max() - truth[int(np.argmax(s[idx]))]), per_seed, resamples,
                        seed)


def residuals(per_seed) -> np.ndarray:
    """The two-way (order + seed) fit's residuals, rescaled by sqrt(nk / ((n-1)(k-1))) so their variance estimates
    the noise variance (the fit uses up n + k - 1 degrees of freedom)."""
    y = np.asarray(per_seed, float)
    n, k = y.shape
    r = y - y.mean(1, keepdims=True) - y.mean(0, keepdims=True) + y.mean()
    return r.ravel() * np.sqrt(n * k / ((n - 1) * (k - 1)))


def perfect_ranker(per_seed, sims: int = 2000, seed: int = 0) -> dict | None:
    """Expected Kendall tau of a perfect ranker against the k-seed mean, and its 5-95 % range, under the residual
    bootstrap noise model (module docstring); None below 3 orders or 2 seeds or without order variance."""
    y = np.asarray(per_seed, float)
    if y.ndim != 2 or y.shape[0] < 3 or y.shape[1] < 2:
        return None
    n, k = y.shape
    effect = order_effect(y)
    res = residuals(y)
    var_e = float(res.var())
    var_o = max(0.0, float(y.mean(1).var(ddof=1)) - var_e / k)
    out = {"model": "observed means shrunk to the between-order variance + the mean of k resampled residuals",
           "sims": sims, "between_sd": float(np.sqrt(var_o)), "residual_sd": float(np.sqrt(var_e)),
           "residual_sd_robust": float(1.4826 * np.median(np.abs(res - np.median(res)))),
           "order_effect_p": None if effect is None else effect["p"], "kendall_tau": None, "range90": None}
    if var_o <= 0:
        out["undefined"] = "no between-order variance"
        return out
    means = y.mean(1)
    true = (means - means.mean()) * np.sqrt(var_o / means.var(ddof=1))
    rng = np.random.default_rng(seed)
    noise = rng.choice(res, size=(sims, n, k)).mean(2)
    taus = [kendall(true, true + e) for e in noise]
    taus = [t for t in taus if t is not None]
    out.update(kendall_tau=float(np.mean(taus)),
               range90=[float(np.percentile(taus, 5)), float(np.percentile(taus, 95))])
    return out


def relative_tau(tau: dict, reference: dict | None) -> dict | None:
    """A ranker's tau as a fraction of the perfect ranker's expected tau (its interval: the ranker's hierarchical
    interval over the reference's expectation; the reference's own 5-95 % range is reported beside it)."""
    if not reference or not reference.get("kendall_tau") or tau.get("value") is None:
        return None
    ref = reference["kendall_tau"]
    ci = tau.get("ci95")
    return {"fraction": tau["value"] / ref, "ci95": None if ci is None else [ci[0] / ref, ci[1] / ref],
            "reference": ref, "reference_range90": reference["range90"]}


def flagged_runs(per_seed, mads: float | None) -> list[tuple[int, int]]:
    """(order, seed) of the runs more than `mads` median absolute deviations below their order's median, the MAD
    pooled over every run's deviation from its order's median (3+ seeds); None: no rule, nothing flagged."""
    y = np.asarray(per_seed, float)
    if mads is None or y.ndim != 2 or y.shape[1] < 3:
        return []
    below = np.median(y, axis=1, keepdims=True) - y
    mad = float(np.median(np.abs(below)))
    if mad <= 0:
        return []
    return [(int(i), int(j)) for i, j in zip(*np.nonzero(below > mads * mad))]


def sensitivity(per_seed, scores: dict, rules=(None, 10, 20, 50), sims: int = 2000, seed: int = 0) -> list[dict]:
    """The answer under each failed-run rule: the runs it flags, each ranker's tau against the ground truth without
    them (each order's mean over its other seeds), and the perfect-ranker reference without the orders that have
    one."""
    y = np.asarray(per_seed, float)
    out = []
    for rule in rules:
        flagged = flagged_runs(y, rule)
        kept = np.ones_like(y, bool)
        for i, j in flagged:
            kept[i, j] = False
        truth = (y * kept).sum(1) / kept.sum(1)
        clean = sorted(set(range(len(y))) - {i for i, _ in flagged})
        effect = order_effect(y[clean]) if len(clean) >= 3 else None
        out.append({"mads": rule, "flagged": len(flagged),
                    "kendall_tau": {name: kendall(s, truth) for name, s in scores.items()},
                    "order_effect_p": None if effect is None else effect["p"],
                    "perfect_ranker": perfect_ranker(y[clean], sims, seed) if len(clean) >= 3 else None})
    return out
