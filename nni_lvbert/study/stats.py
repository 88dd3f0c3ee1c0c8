"""The studies' statistics (rank correlations with bootstrap intervals) and Markdown tables."""
from __future__ import annotations

import math
import warnings

from ..errors import UserError


def rank_correlations(x, y, resamples: int = 2000, seed: int = 0) -> dict:
    """Kendall tau-b and Spearman rho (scipy) of paired values, each with a percentile bootstrap 95 % interval
    over resampled pairs (resamples with fewer than 3 distinct pairs or constant values are skipped)."""
    import numpy as np
    from scipy.stats import kendalltau, spearmanr

    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3:
        raise UserError(f"rank correlations need at least 3 architectures, got {len(x)}")
    out = {"n": len(x), "kendall_tau": None, "spearman_rho": None, "kendall_tau_ci95": None,
           "spearman_rho_ci95": None, "bootstrap_resamples": 0}
    with warnings.catch_warnings():  # scipy warns on constant input; that case is reported as undefined below
        warnings.simplefilter("ignore")
        tau, rho = float(kendalltau(x, y).statistic), float(spearmanr(x, y).statistic)
    if len(np.unique(x)) < 2 or len(np.unique(y)) < 2 or not (np.isfinite(tau) and np.isfinite(rho)):
        out["undefined"] = "constant scores on one side"  # every model scored alike (too short a budget?)
        return out
    out.update(kendall_tau=tau, spearman_rho=rho)
    rng = np.random.default_rng(seed)
    taus, rhos = [], []
    for _ in range(resamples):
        idx = rng.integers(0, len(x), len(x))
        a, b = x[idx], y[idx]
        if len(set(idx.tolist())) < 3 or a.std() == 0 or b.std() == 0:
            continue
        taus.append(kendalltau(a, b).statistic)
        rhos.append(spearmanr(a, b).statistic)
    for name, values in (("kendall_tau", taus), ("spearman_rho", rhos)):
        values = [v for v in values if not math.isnan(v)]
        out[f"{name}_ci95"] = ([float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]
                               if values else None)
    out["bootstrap_resamples"] = len(taus)
    return out


def markdown_table(header: list[str], rows: list[list]) -> str:
    def cell(v) -> str:
        if isinstance(v, float):
            return f"{v:.4f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def kendall(x, y) -> float | None:
    """Kendall tau-b, None when undefined (fewer than 3 pairs, or constant on one side)."""
    import numpy as np
    from scipy.stats import kendalltau

    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or len(np.unique(x)) < 2 or len(np.unique(y)) < 2:
        return None
    return float(kendalltau(x, y).statistic)


def noise_ceiling(per_seed) -> dict | None:
    """How well any ranker could agree with the ground truth: Kendall tau between the seed-means of two disjoint
    halves of the pre-training seeds (orders x seeds), over every split into halves of k//2 and k - k//2 seeds
    (the mean; min and max are the range over the splits, not an interval). It is the agreement of two
    independent, half-size ground truths; the full k-seed mean is less noisy than either half, so this bounds the
    attainable tau from below (`reliability` corrects it to the k-seed mean)."""
    import itertools

    import numpy as np

    per_seed = np.asarray(per_seed, float)
    k = per_seed.shape[1] if per_seed.ndim == 2 else 0
    if k < 2:
        return None
    taus = []
    for half in itertools.combinations(range(k), k // 2):
        rest = [s for s in range(k) if s not in half]
        tau = kendall(per_seed[:, list(half)].mean(1), per_seed[:, rest].mean(1))
        if tau is not None:
            taus.append(tau)
    if not taus:
        return None
    return {"kendall_tau": float(np.mean(taus)), "min": float(min(taus)), "max": float(max(taus)),
            "splits": len(taus), "halves": [k // 2, k - k // 2]}


def top_overlap(scores, truth, k: int = 5) -> float:
    """Share of the ground truth's top k that the ranker's top k holds (ties broken by position)."""
    import numpy as np

    k = min(k, len(truth))
    top = lambda v: set(np.argsort(-np.asarray(v, float), kind="stable")[:k].tolist())
    return len(top(scores) & top(truth)) / k


def regret(scores, truth) -> dict:
    """The ground truth's best minus the ground-truth score of the ranker's pick (its top-scored order), and the
    pick's ground-truth rank (1 = best)."""
    import numpy as np

    scores, truth = np.asarray(scores, float), np.asarray(truth, float)
    pick = int(np.argmax(scores))
    return {"regret": float(truth.max() - truth[pick]), "pick": pick,
            "pick_rank": int((truth > truth[pick]).sum()) + 1}


# --- what the ground truth itself can resolve (issue 43) -----------------------------------------------------------
def _splits(k: int):
    """Every split of k seeds into halves of k//2 and k - k//2 (as noise_ceiling takes them)."""
    import itertools

    for half in itertools.combinations(range(k), k // 2):
        yield list(half), [s for s in range(k) if s not in half]


def spearman_brown(rho1: float, m: float) -> float:
    """The reliability of the mean of m measurements whose single reliability is rho1."""
    return m * rho1 / (1 + (m - 1) * rho1) if rho1 > 0 else 0.0


def reliability(per_seed) -> dict | None:
    """The reliability of the k-seed mean (orders x seeds), corrected from the split-half Kendall tau: for each
    split into halves of k1 and k2 seeds, r = sin(pi tau / 2) (the normal-theory link of tau and Pearson r), and the
    single-seed reliability rho1 solves r = sqrt(SB(k1) SB(k2)) with SB(m) = m rho1 / (1 + (m-1) rho1)
    (Spearman-Brown for unequal halves; r <= 0 gives 0). rho1 is averaged over the splits; R_k = SB(k) is the
    reliability of the full k-seed mean, and (2/pi) arcsin(sqrt(R_k)) the Kendall tau a noise-free ranker would
    reach against that mean (its correlation with the mean is sqrt(R_k))."""
    import numpy as np
    from scipy.optimize import brentq

    per_seed = np.asarray(per_seed, float)
    k = per_seed.shape[1] if per_seed.ndim == 2 else 0
    if k < 2:
        return None
    splits = []
    for half, rest in _splits(k):
        tau = kendall(per_seed[:, half].mean(1), per_seed[:, rest].mean(1))
        if tau is None:
            continue
        r = float(np.sin(np.pi * tau / 2))
        k1, k2 = len(half), len(rest)
        if r <= 0:
            rho1 = 0.0
        elif r >= 1:
            rho1 = 1.0
        else:
            rho1 = float(brentq(lambda p, a, b, r: np.sqrt(spearman_brown(p, a) * spearman_brown(p, b)) - r, 0.0,
                                1.0, args=(k1, k2, r), xtol=1e-12))
        splits.append({"seeds": half, "kendall_tau": tau, "r": r, "rho1": rho1})
    if not splits:
        return None
    rho1 = float(np.mean([s["rho1"] for s in splits]))
    r_k = spearman_brown(rho1, k)
    return {"rho1": rho1, "seeds": k, "reliability_k": r_k,
            "kendall_tau_noise_free": float(2 / np.pi * np.arcsin(np.sqrt(r_k))), "splits": splits}


def two_way_anova(per_seed) -> dict | None:
    """Two-way ANOVA without replication (orders x seeds, order + seed, one observation per cell): the mean squares
    of order and residual with their degrees of freedom; None below 2 orders or 2 seeds."""
    import numpy as np

    y = np.asarray(per_seed, float)
    if y.ndim != 2 or y.shape[0] < 2 or y.shape[1] < 2:
        return None
    n, k = y.shape
    grand, by_order, by_seed = y.mean(), y.mean(1), y.mean(0)
    ss_order = k * float(((by_order - grand) ** 2).sum())
    ss_resid = float(((y - by_order[:, None] - by_seed[None, :] + grand) ** 2).sum())
    df_order, df_resid = n - 1, (n - 1) * (k - 1)
    return {"orders": n, "seeds": k, "ms_order": ss_order / df_order, "ms_resid": ss_resid / df_resid,
            "df": [df_order, df_resid]}


def order_effect(per_seed) -> dict | None:
    """Is there an order effect the seeds can see? The two-way ANOVA's F = MS_order / MS_resid on (n-1, (n-1)(k-1))
    degrees of freedom, p = F's survival function, the between-order sd sqrt(max(0, (MS_order - MS_resid) / k))
    and the residual (seed-to-seed) sd sqrt(MS_resid). F and p are None when the residual is exactly 0."""
    import numpy as np
    from scipy.stats import f

    a = two_way_anova(per_seed)
    if a is None:
        return None
    ms_o, ms_e = a["ms_order"], a["ms_resid"]
    stat = ms_o / ms_e if ms_e > 0 else None
    return {**a, "F": stat, "p": float(f.sf(stat, *a["df"])) if stat is not None else None,
            "between_sd": float(np.sqrt(max(0.0, (ms_o - ms_e) / a["seeds"]))), "residual_sd": float(np.sqrt(ms_e))}


def ceiling_by_simulation(per_seed, sims: int = 2000, seed: int = 0, true_values: str = "normal") -> dict | None:
    """Model-based ceiling: the Kendall tau a noise-free ranker would reach against the k-seed mean, if each k-seed
    mean were the order's true value plus normal noise of variance MS_resid / k (the two-way ANOVA's fit). The true
    values: "normal", n draws from N(0, s_o^2) with s_o^2 = max(0, (MS_order - MS_resid) / k); "observed", the
    observed k-seed means shrunk to that variance (centred, times sqrt(max(0, 1 - 1/F))), which keeps their shape
    (clusters, gaps) where a normal draw would not. Mean and 5-95 % range over `sims` draws; kendall_tau None when
    s_o^2 is 0 (no order differences to rank)."""
    import numpy as np

    a = two_way_anova(per_seed)
    if a is None:
        return None
    if true_values not in ("normal", "observed"):
        raise ValueError(f"true_values must be normal or observed, not {true_values!r}")
    n, k = a["orders"], a["seeds"]
    var_o, var_e = max(0.0, (a["ms_order"] - a["ms_resid"]) / k), a["ms_resid"]
    out = {"model": f"{true_values} true values + normal seed noise (two-way ANOVA fit)", "sims": sims,
           "between_sd": float(np.sqrt(var_o)), "residual_sd": float(np.sqrt(var_e)), "kendall_tau": None,
           "range90": None}
    if var_o <= 0 or n < 3:
        out["undefined"] = "no between-order variance" if var_o <= 0 else "fewer than 3 orders"
        return out
    rng = np.random.default_rng(seed)
    if true_values == "normal":
        true = rng.normal(0.0, np.sqrt(var_o), (sims, n))
    else:
        means = np.asarray(per_seed, float).mean(1)
        true = np.broadcast_to((means - means.mean()) * np.sqrt(1 - a["ms_resid"] / a["ms_order"]), (sims, n))
    observed = true + rng.normal(0.0, np.sqrt(var_e / k), (sims, n))
    taus = [kendall(t, o) for t, o in zip(true, observed)]
    taus = [t for t in taus if t is not None]
    out.update(kendall_tau=float(np.mean(taus)), range90=[float(np.percentile(taus, 5)),
                                                          float(np.percentile(taus, 95))])
    return out


def paired_bootstrap(scores_a, scores_b, truth, resamples: int = 2000, seed: int = 0) -> dict | None:
    """tau(a, truth) - tau(b, truth) (Kendall tau-b) and its percentile 95 % interval over the orders resampled
    with replacement, the same orders for both rankers (resamples where a tau is undefined are skipped); None when
    a tau is undefined on the orders themselves."""
    import numpy as np

    a, b, t = (np.asarray(v, float) for v in (scores_a, scores_b, truth))
    ta, tb = kendall(a, t), kendall(b, t)
    if ta is None or tb is None:
        return None
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(resamples):
        idx = rng.integers(0, len(t), len(t))
        da, db = kendall(a[idx], t[idx]), kendall(b[idx], t[idx])
        if da is not None and db is not None and len(set(idx.tolist())) >= 3:
            diffs.append(da - db)
    return {"difference": ta - tb, "ci95": [float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5))]
            if diffs else None, "resamples": len(diffs)}


def rank_interval(per_seed, i: int, resamples: int = 2000, seed: int = 0, level: float = 0.9) -> dict:
    """Order i's rank (1 = best; ties share the better rank) in the k-seed mean, its rank in each seed, and the
    `level` interval (empirical quantiles, inverted CDF) of its rank in the mean of k seeds (columns) resampled
    with replacement."""
    import numpy as np

    y = np.asarray(per_seed, float)

    def rank(values) -> np.ndarray:  # values: orders x ... -> the rank of order i along axis 0
        return (values > values[i]).sum(0) + 1

    k = y.shape[1]
    cols = np.random.default_rng(seed).integers(0, k, (resamples, k))
    ranks = rank(y[:, cols].mean(2))  # orders x resamples x k -> orders x resamples -> resamples
    tail = (1 - level) / 2
    lo, hi = np.quantile(ranks, [tail, 1 - tail], method="inverted_cdf")
    return {"rank": int(rank(y.mean(1))), "per_seed": rank(y).astype(int).tolist(), "interval": [int(lo), int(hi)],
            "level": level, "resamples": resamples}
