"""The studies' statistics (rank correlations with bootstrap intervals) and Markdown tables."""
from __future__ import annotations

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
    out = {"n": int(len(x)), "kendall_tau": None, "spearman_rho": None, "kendall_tau_ci95": None,
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
        values = [v for v in values if v == v]  # NaN-free
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
    (mean, min, max). It is the agreement of two independent, half-size ground truths; the full k-seed mean is
    less noisy than either half, so this bounds the attainable tau from below rather than exactly."""
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
    top = lambda v: set(np.argsort(-np.asarray(v, float), kind="stable")[:k].tolist())  # noqa: E731
    return len(top(scores) & top(truth)) / k


def regret(scores, truth) -> dict:
    """The ground truth's best minus the ground-truth score of the ranker's pick (its top-scored order), and the
    pick's ground-truth rank (1 = best)."""
    import numpy as np

    scores, truth = np.asarray(scores, float), np.asarray(truth, float)
    pick = int(np.argmax(scores))
    return {"regret": float(truth.max() - truth[pick]), "pick": pick,
            "pick_rank": int((truth > truth[pick]).sum()) + 1}
