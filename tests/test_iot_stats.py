"""The IOT study's statistics (`study/iot_stats.py`) on small synthetic cases, each against a direct computation:
the in-sample oracle is inflated by noise and the cross-fitted one is not, random routing at the predictor's usage,
the held-out best order, and the validation sampling error beside the seeds' spread."""
from __future__ import annotations

import numpy as np
import pytest

from nni_lvbert.study import iot_stats as st


def _noise(rows=3000, tokens=8, m=4, p=0.3, seed=0, better=None):
    """Token arrays where every order is right with probability p on every token, independently (pure noise), but
    for rows whose `better` entry is k >= 0, where order k is right with probability 0.9."""
    rng = np.random.default_rng(seed)
    row = np.repeat(np.arange(rows), tokens).astype(np.int32)
    prob = np.full((rows * tokens, m), p)
    if better is not None:
        for k in range(m):
            prob[np.repeat(better == k, tokens), k] = 0.9
    correct = (rng.random(prob.shape) < prob).astype(np.uint8)
    loss = rng.random(prob.shape).astype(np.float16)
    seq = (np.arange(rows) // 2).astype(np.int32)  # two rows (masking rounds) per sequence
    return {"row": row, "correct": correct, "loss": loss, "seq": seq}


def test_per_row_and_halves_by_direct_loops():
    row = np.array([2, 0, 2, 1, 0, 2, 2])
    v = np.array([1.0, 2, 3, 4, 5, 6, 7])
    assert st.per_row(v, row, 4).tolist() == [7, 4, 17, 0]
    assert st.halves(row).tolist() == [0, 0, 1, 0, 1, 0, 1]  # rank within its row (array order) mod 2
    two = st.per_row(np.stack([v, 2 * v], -1), row, 3)
    assert two.shape == (3, 2) and two[:, 1].tolist() == [14, 8, 34]


def test_in_sample_oracle_is_inflated_by_noise_and_the_cross_fitted_one_is_not():
    a = _noise()
    rows = len(a["seq"])
    naive = st.oracle_rows(a["correct"], a["loss"], a["row"], rows)
    cross = st.crossfit_oracle_rows(a["correct"], a["loss"], a["row"], rows)
    # direct: per row, the most right tokens over the orders (in-sample)
    c = np.zeros((rows, 4))
    np.add.at(c, a["row"], a["correct"])
    assert np.array_equal(naive, c.max(1))
    # direct cross-fit: alternate tokens of a row (rows are contiguous here), choose on one half, score the other
    even, odd = c * 0, c * 0
    np.add.at(even, a["row"][0::2], a["correct"][0::2])
    np.add.at(odd, a["row"][1::2], a["correct"][1::2])
    r = np.arange(rows)
    pick_e = st.best_order(even, st.per_row(a["loss"][0::2].astype(float), a["row"][0::2], rows))
    pick_o = st.best_order(odd, st.per_row(a["loss"][1::2].astype(float), a["row"][1::2], rows))
    assert np.array_equal(cross, odd[r, pick_e] + even[r, pick_o])
    n = np.full(rows, 8.0)
    naive_acc = st.clustered(naive, n, a["seq"])
    cross_acc = st.clustered(cross, n, a["seq"])
    assert naive_acc["mean"] > 0.3 + 10 * naive_acc["se"]  # noise alone: far above every order's 0.3
    assert abs(cross_acc["mean"] - 0.3) < 3 * cross_acc["se"]  # cross-fitted: no gain from noise


def test_cross_fitted_oracle_keeps_real_headroom():
    rng = np.random.default_rng(1)
    better = rng.integers(0, 4, 3000)  # each row has an order that is truly better on it
    a = _noise(better=better)
    cross = st.crossfit_oracle_rows(a["correct"], a["loss"], a["row"], 3000)
    res = st.clustered(cross, np.full(3000, 8.0), a["seq"])
    assert res["mean"] > 0.75  # mostly the 0.9 order, chosen on the other half


def test_random_routing_at_usage_and_held_out_best_by_direct_computation():
    a = _noise(seed=2)
    rng = np.random.default_rng(3)
    a["choice"] = rng.choice(4, size=3000, p=[0.1, 0.2, 0.3, 0.4]).astype(np.int8)
    a["standalone"] = (rng.random(len(a["row"]))[:, None] < [0.3, 0.35, 0.3, 0.3]).astype(np.uint8)
    archs = ["a", "b", "c", "d"]
    r = st.seed_rows(a, archs)
    c = st.per_row(a["correct"], a["row"], 3000)
    usage = np.bincount(a["choice"], minlength=4) / 3000
    assert np.allclose(r["y"]["random_at_usage"], (c * usage).sum(1))
    assert np.allclose(r["y"]["routed"], c[np.arange(3000), a["choice"]])
    # held out: the order best on the even sequences scores the odd ones, and the other way round
    fold = a["seq"] % 2
    k_even, k_odd = (int(np.argmax(c[fold == f].sum(0))) for f in (0, 1))
    expect = np.where(fold == 0, c[:, k_odd], c[:, k_even])
    assert np.array_equal(r["y"]["best_shared_heldout"], expect) and r["heldout_chosen"] == [k_even, k_odd]
    n = r["n"]
    in_sample = st.clustered(r["y"]["best_shared"], n, r["seq"])["mean"]
    assert in_sample == pytest.approx(c.sum(0).max() / n.sum())  # best of 4 on the same tokens
    assert in_sample >= st.clustered(r["y"]["best_shared_heldout"], n, r["seq"])["mean"]
    # a predictor with no information is at its random-usage baseline (pure noise: within 3 standard errors)
    d = st.clustered(r["y"]["routed"] - r["y"]["random_at_usage"], n, r["seq"])
    assert abs(d["mean"]) < 3 * d["se"]


def test_over_seeds_adds_the_validation_error_the_seeds_spread_leaves_out():
    rng = np.random.default_rng(4)
    rows, seq = 2000, np.arange(2000) // 2
    n = np.full(rows, 8.0)
    shared = rng.binomial(8, 0.3, rows).astype(float)  # the validation set's own noise, common to every seed
    ys = [shared + rng.integers(-1, 2, rows) * (rng.random(rows) < 0.05) for _ in range(3)]
    res = st.over_seeds(ys, n, seq)
    means = [y.sum() / n.sum() for y in ys]
    assert res["mean"] == pytest.approx(np.mean(means))
    assert res["se_seeds"] == pytest.approx(np.std(means, ddof=1) / np.sqrt(3))
    assert res["se_validation"] == pytest.approx(st.clustered(np.mean(ys, 0), n, seq)["se"])
    assert res["se"] == pytest.approx(np.hypot(res["se_seeds"], res["se_validation"]))
    assert res["se_seeds"] < res["se_validation"] / 3  # the seeds agree: their spread alone says far too little
    one = st.over_seeds(ys[:1], n, seq)
    assert one["se_seeds"] is None and one["se"] == one["se_validation"]
