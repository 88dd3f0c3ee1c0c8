"""The ranking study's issue-54 statistics (`study/ranking_stats.py`) on small synthetic cases, each against a direct
numpy/scipy computation: the hierarchical bootstrap (orders and seeds) against the orders-only one, the paired
difference and regret intervals, the perfect-ranker reference, and the failed-run rule with its sensitivity."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import kendalltau

from nni_lvbert.study import ranking_stats as rs


def _study(n=12, k=3, between=0.01, noise=0.01, seed=0):
    rng = np.random.default_rng(seed)
    true = rng.normal(0, between, n)
    return true, true[:, None] + rng.normal(0, noise, (n, k))


def test_hierarchical_tau_equals_a_direct_bootstrap_over_orders_and_seeds():
    true, y = _study()
    scores = true + np.random.default_rng(1).normal(0, 0.005, len(true))
    res = rs.tau_interval(scores, y, resamples=300, seed=7)
    rng, taus = np.random.default_rng(7), []
    for _ in range(300):  # the same draws, written out: orders, then seed columns
        idx, cols = rng.integers(0, 12, 12), rng.integers(0, 3, 3)
        if len(set(idx.tolist())) < 3:
            continue
        truth = y[idx][:, cols].mean(1)
        if len(np.unique(truth)) > 1 and len(np.unique(scores[idx])) > 1:
            taus.append(kendalltau(scores[idx], truth).statistic)
    assert res["value"] == pytest.approx(kendalltau(scores, y.mean(1)).statistic)
    assert res["ci95"] == pytest.approx([np.percentile(taus, 2.5), np.percentile(taus, 97.5)])
    assert res["resamples"] == len(taus) and res["resampled"] == "orders and seeds"


def test_the_orders_only_interval_is_narrower_than_the_hierarchical_one_when_seeds_are_noisy():
    true, y = _study(n=15, between=0.01, noise=0.03, seed=3)
    scores = true  # a perfect ranker
    orders = rs.tau_interval(scores, y, resamples=400, seed=0, seeds=False)
    both = rs.tau_interval(scores, y, resamples=400, seed=0)
    width = lambda r: r["ci95"][1] - r["ci95"][0]
    assert orders["value"] == both["value"]
    assert width(both) > width(orders) * 1.2  # the ground truth's seed noise widens it


def test_paired_and_regret_intervals_by_direct_computation():
    true, y = _study(seed=5)
    a, b = true, true[::-1].copy()
    d = rs.paired_interval(a, b, y, resamples=200, seed=2)
    truth = y.mean(1)
    assert d["value"] == pytest.approx(kendalltau(a, truth).statistic - kendalltau(b, truth).statistic)
    assert d["ci95"][0] > 0  # a ranks like the truth, b reversed: clearly better on every resample
    r = rs.regret_interval(a, y, resamples=200, seed=2)
    assert r["value"] == pytest.approx(truth.max() - truth[np.argmax(a)])
    assert 0 <= r["ci95"][0] <= r["ci95"][1]


def test_residuals_and_the_perfect_ranker_reference_by_direct_simulation():
    _, y = _study(n=10, k=3, seed=9)
    n, k = y.shape
    res = rs.residuals(y)
    direct = (y - y.mean(1, keepdims=True) - y.mean(0) + y.mean()).ravel() * np.sqrt(n * k / ((n - 1) * (k - 1)))
    assert np.allclose(res, direct)
    ref = rs.perfect_ranker(y, sims=400, seed=4)
    var_e = res.var()
    means = y.mean(1)
    var_o = max(0.0, means.var(ddof=1) - var_e / k)
    true = (means - means.mean()) * np.sqrt(var_o / means.var(ddof=1))
    noise = np.random.default_rng(4).choice(res, size=(400, n, k)).mean(2)
    taus = [kendalltau(true, true + e).statistic for e in noise]
    assert ref["kendall_tau"] == pytest.approx(np.mean(taus))
    assert ref["range90"] == pytest.approx([np.percentile(taus, 5), np.percentile(taus, 95)])
    assert ref["between_sd"] == pytest.approx(np.sqrt(var_o)) and ref["residual_sd"] == pytest.approx(np.sqrt(var_e))


def test_a_failed_run_lowers_the_reference_and_the_rule_sensitivity_shows_it():
    true, y = _study(n=10, between=0.02, noise=0.002, seed=11)
    y[4, 2] = y[4].mean() - 0.15  # a run stuck on the plateau
    below = np.median(y, 1, keepdims=True) - y
    mads = (np.median(y[4]) - y[4, 2]) / np.median(np.abs(below))
    assert mads > 50  # far beyond every rule
    assert rs.flagged_runs(y, 20) == [(4, 2)] and rs.flagged_runs(y, None) == []
    rows = rs.sensitivity(y, {"perfect": true}, sims=300, seed=0)
    assert [r["mads"] for r in rows] == [None, 10, 20, 50] and [r["flagged"] for r in rows] == [0, 1, 1, 1]
    clean = y.copy()
    clean[4, 2] = np.nan
    assert rows[1]["kendall_tau"]["perfect"] == pytest.approx(kendalltau(true, np.nanmean(clean, 1)).statistic)
    with_failed = rs.perfect_ranker(y, sims=300, seed=0)["kendall_tau"]
    assert rows[2]["perfect_ranker"]["kendall_tau"] > with_failed  # the failed run's tail costs a perfect ranker
    rel = rs.relative_tau({"value": 0.5, "ci95": [0.1, 0.8]}, {"kendall_tau": 0.8, "range90": [0.6, 0.9]})
    assert rel["fraction"] == pytest.approx(0.625) and rel["ci95"] == pytest.approx([0.125, 1.0])


def test_numpy_kendall_tau_b_equals_scipys_with_ties_and_none_when_undefined():
    rng = np.random.default_rng(12)
    for _ in range(50):
        x, y = rng.integers(0, 4, 10).astype(float), rng.integers(0, 6, 10).astype(float)
        if len(np.unique(x)) > 1 and len(np.unique(y)) > 1:
            assert rs.kendall(x, y) == pytest.approx(kendalltau(x, y).statistic, abs=1e-12)
    assert rs.kendall([1, 1, 1], [1, 2, 3]) is None and rs.kendall([1, 2], [2, 1]) is None
