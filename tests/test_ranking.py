"""The ranking study's pieces: stratified orders, full-split masking and its standard errors, zero-cost proxies,
the statistics (noise ceiling, top-k overlap, regret), the rankers' spellings, and `lvbert study ranking --quick`
end to end with a supernet, short-training and zero-cost ranker."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy.stats import kendalltau

from nni_lvbert.arch import Arch
from nni_lvbert.study.orders import STRATA, composition, graded_orders, is_mixed, stratified_orders
from nni_lvbert.study.stats import (
    ceiling_by_simulation,
    noise_ceiling,
    order_effect,
    paired_bootstrap,
    rank_interval,
    regret,
    reliability,
    top_overlap,
)
from tests.conftest import one_error_line, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")
TYPES = ("dc", "sa", "ff", "glu")


@pytest.fixture(scope="module")
def trained(study_supernet):
    return study_supernet


# --- orders ------------------------------------------------------------------------------------------------------
def test_graded_orders_change_one_count_at_a_time():
    """The graded set: convolution 0..8 at 6 attention layers, attention 0/2/10 at 4 convolutions, one convolution
    in the first or last slot; distinct, deterministic, each labelled with its counts (a shorter space scales the
    counts and keeps the distinct ones)."""
    orders = graded_orders(TYPES, 24)
    assert orders == graded_orders(TYPES, 24) and len({a for a, _ in orders}) == len(orders) == 12
    counts = [(composition(a)["sa"], composition(a)["dc"]) for a, _ in orders]
    assert counts[:7] == [(6, k) for k in (0, 1, 2, 3, 4, 6, 8)] and counts[7:10] == [(0, 4), (2, 4), (10, 4)]
    first, last = orders[10][0], orders[11][0]
    assert first[0] == "dc" and last[-1] == "dc" and composition(first)["dc"] == composition(last)["dc"] == 1
    for arch, role in orders:
        c = composition(arch)
        assert role.startswith(f"attention {c['sa']}, convolution {c['dc']}")
        assert abs(c["ff"] - c["glu"]) <= 1  # the rest alternates feed-forward and GLU
    short = graded_orders(TYPES, 12)
    assert 3 <= len(short) < 12 and len({a for a, _ in short}) == len(short)
    assert all(role.startswith(f"attention {composition(a)['sa']}, convolution {composition(a)['dc']}")
               for a, role in short)
    from nni_lvbert.errors import UserError

    with pytest.raises(UserError, match="graded order set needs sa, dc"):
        graded_orders(("sa", "ff"), 6)


def test_stratified_orders_are_seeded_distinct_and_keep_their_stratum():
    orders = stratified_orders(TYPES, 24, 20, seed=0)
    assert orders == stratified_orders(TYPES, 24, 20, seed=0) and orders != stratified_orders(TYPES, 24, 20, seed=1)
    assert len({a for a, _ in orders}) == 20 and all(len(a) == 24 for a, _ in orders)
    assert [s for _, s in orders[:len(STRATA)]] == [s.name for s in STRATA]  # dealt round-robin
    for arch, stratum in orders:
        c = composition(arch)
        if "no convolution" in stratum:
            assert c["dc"] == 0 and c["sa"] > 0
        if "no attention" in stratum:
            assert c["sa"] == 0 and c["dc"] > 0
        if stratum.startswith("mixed"):
            assert is_mixed(arch)
            sa = [i for i, t in enumerate(arch) if t == "sa"]
            dc = [i for i, t in enumerate(arch) if t == "dc"]
            if stratum.endswith("early"):
                assert max(sa) < min(dc)
            if stratum.endswith("late"):
                assert max(dc) < min(sa)
        if stratum == "attention-heavy, no convolution":
            assert c["sa"] >= 12
    # a space without attention or convolution keeps the strata it can fill
    kinds = {s for _, s in stratified_orders(("dc", "ff"), 6, 6, seed=0)}
    assert kinds == {"convolution-heavy, no attention", "convolution-light, no attention", "uniform random"}


# --- full-split masking and standard errors ------------------------------------------------------------------------
def test_full_split_masks_every_token_exactly_once(trained):
    from nni_lvbert.data.masking import FULL_ROUNDS, IGNORE_INDEX, full_split_rounds

    data = trained["data"]
    tok = data.tokenizer()
    rows = [dict(r) for r in data.val_dataset().select(range(20))]
    rounds = full_split_rounds(rows, tok, seed=0)
    assert len(rounds) == FULL_ROUNDS and rounds == full_split_rounds(rows, tok, seed=0)
    assert rounds != full_split_rounds(rows, tok, seed=1)
    special = set(tok.all_special_ids)
    replaced = kept = 0
    for i, row in enumerate(rows):
        original = [lab if lab != IGNORE_INDEX else t for t, lab in zip(row["input_ids"], row["labels"])]
        hits = np.zeros(len(original), int)
        for part in rounds:
            r = part[i]
            assert r["seq"] == i
            for pos, (t, lab) in enumerate(zip(r["input_ids"], r["labels"])):
                if lab != IGNORE_INDEX:
                    hits[pos] += 1
                    assert lab == original[pos]
                    replaced += t == tok.mask_token_id
                    kept += t == original[pos]
                else:
                    assert t == original[pos]
        assert all(hits[p] == (original[p] not in special) for p in range(len(original)))
    total = replaced + kept
    assert 0.7 < replaced / total < 0.9  # 80 % [MASK]


def test_metrics_agree_with_the_search_score_and_give_cluster_standard_errors(trained):
    from nni_lvbert.data.validation import load_val_batches, model_accuracy, model_metrics
    from nni_lvbert.modeling import FixedMLM
    from nni_lvbert.search.scorer import SupernetScorer

    scorer = SupernetScorer(trained["run"], val_tokens=10**9, device="cpu", prefix_cache=False)
    arch = scorer.parse("csfcsf")
    m = scorer.metrics(arch)
    assert m["mlm_acc"] == pytest.approx(scorer.score(arch), abs=1e-12)
    assert m["masked_tokens"] == scorer.val_stats["masked_tokens"]
    assert 0.9 * scorer.val_stats["sequences"] < m["sequences"] <= scorer.val_stats["sequences"]  # with a target
    assert 0 < m["mlm_acc_se"] < 0.1 and 0 < m["mlm_loss_se"] < m["mlm_loss"]
    full = SupernetScorer(trained["run"], val_tokens=10**9, device="cpu", prefix_cache=False, masking="full")
    f = full.metrics(arch)
    assert f["masked_tokens"] > 4 * m["masked_tokens"] and f["mlm_acc_se"] < m["mlm_acc_se"]
    assert full.val_stats["masking"] == "full" and full.val_stats["sequences"] == scorer.val_stats["sequences"]
    # a built model scores the same through model_metrics as through model_accuracy
    model = FixedMLM(scorer.cfg, arch).eval()
    batches, _ = load_val_batches(scorer.val_stats["data"], 2000, 16, scorer.cfg.pad_token_id)
    mm = model_metrics(model, batches)
    assert mm["mlm_acc"] == pytest.approx(model_accuracy(model, batches), abs=1e-12)
    with torch.inference_mode():  # the loss is the mean cross-entropy over masked tokens
        losses = [torch.nn.functional.cross_entropy(model.head(model.encode(b.input_ids, b.mask, b.token_type_ids)
                                                               .reshape(-1, scorer.cfg.hidden_size)[b.positions]),
                                                    b.target, reduction="sum") for b in batches]
    assert mm["mlm_loss"] == pytest.approx(float(sum(losses)) / mm["masked_tokens"], rel=1e-5)


def test_zero_cost_proxies_are_seeded_finite_and_tell_orders_apart(trained):
    from nni_lvbert.search.proxies import PROXIES, proxy_score
    from nni_lvbert.search.scorer import SupernetScorer

    scorer = SupernetScorer(trained["run"], val_tokens=500, device="cpu", prefix_cache=False)
    for proxy in PROXIES:
        a = proxy_score(proxy, scorer.cfg, scorer.parse("csfcsf"), scorer.batches[0], seed=0)
        assert np.isfinite(a) and a > 0, proxy
        assert proxy_score(proxy, scorer.cfg, scorer.parse("csfcsf"), scorer.batches[0], seed=0) == a
        assert proxy_score(proxy, scorer.cfg, scorer.parse("ssssss"), scorer.batches[0], seed=0) != a


# --- statistics --------------------------------------------------------------------------------------------------
def test_noise_ceiling_top_overlap_and_regret():
    rng = np.random.default_rng(0)
    truth = np.linspace(0, 1, 12)
    per_seed = truth[:, None] + rng.normal(scale=0.05, size=(12, 3))
    c = noise_ceiling(per_seed)
    assert c["splits"] == 3 and c["halves"] == [1, 2] and c["min"] <= c["kendall_tau"] <= c["max"]
    assert c["kendall_tau"] == pytest.approx(np.mean([kendalltau(per_seed[:, s], np.delete(per_seed, s, 1).mean(1))
                                                      .statistic for s in range(3)]))
    noisy = truth[:, None] + rng.normal(scale=5, size=(12, 4))
    assert noise_ceiling(noisy)["kendall_tau"] < c["kendall_tau"] and noise_ceiling(noisy)["splits"] == 6
    assert noise_ceiling(per_seed[:, :1]) is None
    assert top_overlap(truth, truth) == 1.0 and top_overlap(-truth, truth) == 0.0
    assert top_overlap([5, 4, 3, 2, 1, 0], [0, 1, 2, 3, 4, 5], k=3) == 0.0
    r = regret([0.1, 0.9, 0.2], [0.5, 0.3, 0.7])
    assert r == {"regret": pytest.approx(0.4), "pick": 1, "pick_rank": 3}


def test_reliability_corrects_the_split_half_tau_by_spearman_brown():
    rng = np.random.default_rng(1)
    truth = np.linspace(0, 1, 15)
    sb = lambda rho, m: m * rho / (1 + (m - 1) * rho)
    free = lambda r_k: 2 / np.pi * np.arcsin(np.sqrt(r_k))
    # two seeds: one split of 1 and 1, so rho1 = r itself
    y = truth[:, None] + rng.normal(scale=0.3, size=(15, 2))
    r = np.sin(np.pi * kendalltau(y[:, 0], y[:, 1]).statistic / 2)
    rel = reliability(y)
    assert 0 < r < 1 and rel["rho1"] == pytest.approx(r) and rel["reliability_k"] == pytest.approx(2 * r / (1 + r))
    assert rel["kendall_tau_noise_free"] == pytest.approx(free(2 * r / (1 + r)))
    # three seeds: halves of 1 and 2, r^2 = rho * 2 rho / (1 + rho), so rho = (r^2 + sqrt(r^4 + 8 r^2)) / 4
    y = truth[:, None] + rng.normal(scale=0.3, size=(15, 3))
    rhos = []
    for s in range(3):
        r = np.sin(np.pi * kendalltau(y[:, s], np.delete(y, s, 1).mean(1)).statistic / 2)
        rhos.append((r ** 2 + np.sqrt(r ** 4 + 8 * r ** 2)) / 4)
    rel = reliability(y)
    assert [s["rho1"] for s in rel["splits"]] == pytest.approx(rhos, abs=1e-9) and len(rhos) == 3
    assert rel["rho1"] == pytest.approx(np.mean(rhos)) and rel["reliability_k"] == pytest.approx(sb(np.mean(rhos), 3))
    assert rel["kendall_tau_noise_free"] == pytest.approx(free(sb(np.mean(rhos), 3)))
    assert rel["reliability_k"] > rel["rho1"] and rel["kendall_tau_noise_free"] > noise_ceiling(y)["kendall_tau"]
    # four seeds: halves of 2 and 2, r = SB(2), so rho1 = r / (2 - r); 6 splits
    y = truth[:, None] + rng.normal(scale=0.5, size=(15, 4))
    rel = reliability(y)
    assert len(rel["splits"]) == 6
    assert rel["rho1"] == pytest.approx(np.mean([s["r"] / (2 - s["r"]) for s in rel["splits"]]))
    # no agreement between the halves: clamped to 0
    anti = np.c_[truth, -truth]
    assert reliability(anti)["rho1"] == 0 and reliability(anti)["kendall_tau_noise_free"] == 0
    assert reliability(truth[:, None]) is None


def test_order_effect_is_the_two_way_anova():
    from scipy.stats import f, ttest_rel

    rng = np.random.default_rng(2)
    n, k = 8, 3
    y = rng.normal(size=(n, 1)) * 0.5 + rng.normal(size=(1, k)) + rng.normal(size=(n, k))
    # by regression: the order dummies' extra sum of squares over a seed-only model
    order, seed = np.repeat(np.eye(n), k, 0), np.tile(np.eye(k), (n, 1))
    rss = lambda x: float(((y.ravel() - x @ np.linalg.lstsq(x, y.ravel(), rcond=None)[0]) ** 2).sum())
    full, reduced = rss(np.c_[order, seed]), rss(seed)
    stat = ((reduced - full) / (n - 1)) / (full / ((n - 1) * (k - 1)))
    e = order_effect(y)
    assert e["df"] == [n - 1, (n - 1) * (k - 1)] and e["F"] == pytest.approx(stat)
    assert e["p"] == pytest.approx(f.sf(stat, n - 1, (n - 1) * (k - 1)))
    assert e["residual_sd"] ** 2 == pytest.approx(full / ((n - 1) * (k - 1)))
    assert e["between_sd"] ** 2 == pytest.approx(max(0, ((reduced - full) / (n - 1) - full / 14) / k))
    # two orders: the F test is the paired t test squared
    t = ttest_rel(y[0], y[1])
    assert order_effect(y[:2])["F"] == pytest.approx(t.statistic ** 2) and order_effect(y[:2])["p"] == \
        pytest.approx(t.pvalue)
    strong = np.arange(n)[:, None] + rng.normal(scale=0.1, size=(n, k))
    assert order_effect(strong)["p"] < 1e-6 and order_effect(strong)["between_sd"] > 0.9
    flat = rng.normal(size=(n, k))
    flat -= flat.mean(1, keepdims=True)  # every order's mean alike: no order effect at all
    assert (order_effect(flat)["F"], order_effect(flat)["p"], order_effect(flat)["between_sd"]) == \
        (pytest.approx(0, abs=1e-12), pytest.approx(1), 0)
    assert order_effect(np.ones((3, 2)))["F"] is None and order_effect(y[:, :1]) is None


def test_simulated_ceiling_matches_the_normal_theory_tau():
    from scipy.stats import norm

    rng = np.random.default_rng(3)
    n, k = 10, 3
    y = rng.normal(scale=1.0, size=(n, 1)) + rng.normal(scale=1.5, size=(n, k))
    e = order_effect(y)
    c = ceiling_by_simulation(y, sims=400, seed=0)
    assert c["between_sd"] == pytest.approx(e["between_sd"]) and c["residual_sd"] == pytest.approx(e["residual_sd"])
    # normal true values: tau of a bivariate normal with r = s_o / sqrt(s_o^2 + s_e^2 / k) is (2/pi) arcsin(r)
    r = e["between_sd"] / np.sqrt(e["between_sd"] ** 2 + e["residual_sd"] ** 2 / k)
    assert 0.2 < r < 0.95 and c["kendall_tau"] == pytest.approx(2 / np.pi * np.arcsin(r), abs=0.03)
    assert c["range90"][0] < c["kendall_tau"] < c["range90"][1] and c == ceiling_by_simulation(y, sims=400, seed=0)
    # the observed shape: fixed true values t (the shrunk means); E tau = mean over pairs of 2 Phi(|dt| / sd) - 1
    t = (y.mean(1) - y.mean()) * np.sqrt(1 - 1 / e["F"])
    gaps = np.abs(t[:, None] - t[None, :])[np.triu_indices(n, 1)]
    expected = np.mean(2 * norm.cdf(gaps / np.sqrt(2 * e["residual_sd"] ** 2 / k)) - 1)
    assert ceiling_by_simulation(y, 400, 0, "observed")["kendall_tau"] == pytest.approx(expected, abs=0.03)
    flat = y - y.mean(1, keepdims=True)
    none = ceiling_by_simulation(flat, sims=10)
    assert none["kendall_tau"] is None and none["undefined"] == "no between-order variance"


def test_paired_bootstrap_compares_two_rankers_on_the_same_orders():
    rng = np.random.default_rng(4)
    truth = rng.normal(size=12)
    a, b = truth + rng.normal(scale=0.5, size=12), truth + rng.normal(scale=1.5, size=12)
    p = paired_bootstrap(a, b, truth, resamples=200, seed=5)
    assert p["difference"] == pytest.approx(kendalltau(a, truth).statistic - kendalltau(b, truth).statistic)
    draws = np.random.default_rng(5)
    diffs = []
    for _ in range(200):  # the same orders for both rankers in each resample
        idx = draws.integers(0, 12, 12)
        diffs.append(kendalltau(a[idx], truth[idx]).statistic - kendalltau(b[idx], truth[idx]).statistic)
    assert p["resamples"] == 200 and p["ci95"] == pytest.approx(np.percentile(diffs, [2.5, 97.5]))
    assert paired_bootstrap(a, a, truth, 50)["ci95"] == [0, 0]  # paired: a ranker against itself never differs
    assert paired_bootstrap(truth, -truth, truth, 50) == {"difference": pytest.approx(2), "ci95": pytest.approx([2, 2]),
                                                          "resamples": 50}
    assert paired_bootstrap(np.ones(12), b, truth) is None


def test_rank_interval_over_resampled_seeds():
    y = np.array([[0.50, 0.10], [0.35, 0.30], [0.20, 0.42], [0.00, 0.05]])
    # order 0: mean 0.30 below 0.325 and 0.31 -> 3rd; 1st in seed 0, 3rd in seed 1; resampled seeds: both seed 0
    # (1st, p = 1/4), else 3rd (both seed 1, or one of each: the mean)
    r = rank_interval(y, 0, resamples=400, seed=0)
    assert (r["rank"], r["per_seed"], r["interval"], r["level"]) == (3, [1, 3], [1, 3], 0.9)
    assert rank_interval(y, 0, resamples=400, level=0.4)["interval"] == [3, 3]  # quantiles 0.3 and 0.7: both 3rd
    assert rank_interval(y, 3, resamples=50)["interval"] == [4, 4]
    tied = np.array([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    assert rank_interval(tied, 1, resamples=20)["rank"] == 1  # ties share the better rank
    assert rank_interval(y[:, :1], 2, resamples=20) == {"rank": 3, "per_seed": [3], "interval": [3, 3],
                                                         "level": 0.9, "resamples": 20}


def _synthetic_result():
    """A ranking result without models: 5 orders with convolution that differ only by seed noise, 5 without that
    differ clearly; rankers of each kind; the searched order among them."""
    rng = np.random.default_rng(6)
    archs = ["ccffss", "cfcfss", "ccsfsf", "fcfcgc", "cgcgcg", "ssffss", "sfsfsf", "ssssff", "gsgsgs", "fsssgs"]
    level = np.r_[np.full(5, 0.2), np.linspace(0.05, 0.15, 5)]
    seeds = level[:, None] + rng.normal(scale=0.004, size=(10, 3))
    gt = seeds.mean(1)
    scores = {"spos": gt + rng.normal(scale=0.01, size=10), "short:30": seeds[:, 0] + rng.normal(scale=0.002, size=10),
              "zc:snip": rng.normal(size=10), "rerank:2:30": -np.argsort(np.argsort(-seeds[:, 0])).astype(float)}
    kinds = {"spos": "supernet", "short:30": "short", "zc:snip": "zc", "rerank:2:30": "rerank"}
    rows = [{"arch": a, "role": "searched" if i == 2 else "x", "ground_truth": float(gt[i]), "seeds": seeds[i].tolist(),
             "seed_std": float(seeds[i].std(ddof=1)), "se": 0.001, **{n: float(s[i]) for n, s in scores.items()}}
            for i, a in enumerate(archs)]
    table = [{"ranker": n, "kind": kinds[n], "core_minutes": 1.0, "kendall_tau": kendalltau(s, gt).statistic,
              "kendall_tau_ci95": [0, 1], "spearman_rho": 0.5, "spearman_rho_ci95": [0, 1], "undefined": None,
              "kendall_tau_mixed": None, "top5_overlap": 0.4, **regret(s, gt), "budget_check": None}
             for n, s in scores.items()]
    for t in table:
        t["pick"] = archs[t["pick"]]
    return {"study": "ranking", "orders": 10, "seeds": [0, 1, 2], "supernet": "s", "size": "tiny", "rank_by": "acc",
            "mixed_orders": 3, "budget": {"steps": 1, "batch_size": 1, "lr": 1e-3, "warmup_steps": 0},
            "noise_ceiling": noise_ceiling(seeds), "noise_ceiling_mixed": None, "seed_std_median": 0.004,
            "validation": {"masked_tokens": 10, "masking": "full"}, "rankers": table, "rows": rows}, seeds


def test_reanalyse_adds_the_resolution_keys_and_the_report_follows_the_order_effect(tmp_path, monkeypatch):
    import copy

    from nni_lvbert.study import ranking_plots
    from nni_lvbert.study.reanalyse import main, reanalyse

    monkeypatch.setattr(ranking_plots, "save_figure", lambda fig, path, **kw: path.write_bytes(b"png"))
    result, seeds = _synthetic_result()
    before = copy.deepcopy(result)
    new = reanalyse(result, resamples=40)
    assert result == before  # the input is left as it was; every old key keeps its value
    assert all(new[key] == value for key, value in before.items() if key != "rankers")
    assert all({key: t[key] for key in old} == old for old, t in zip(before["rankers"], new["rankers"]))
    gt = seeds.mean(1)
    groups = {g["group"]: g for g in new["groups"]}
    assert {name: g["orders"] for name, g in groups.items()} == {"all orders": 10, "with convolution": 5,
                                                                  "without convolution": 5, "mixed": 3}
    conv = [0, 1, 2, 3, 4]
    assert groups["with convolution"]["order_effect"] == order_effect(seeds[conv])
    assert groups["with convolution"]["resolvable"] == (order_effect(seeds[conv])["p"] < 0.05)
    assert groups["without convolution"]["resolvable"] and groups["all orders"]["resolvable"]
    assert groups["with convolution"]["kendall_tau"]["spos"] == pytest.approx(
        kendalltau(np.array([r["spos"] for r in result["rows"]])[conv], gt[conv]).statistic)
    assert new["reliability"] == reliability(seeds) and new["baseline"] == "spos"
    assert new["ceiling_simulated"]["normal"] == ceiling_by_simulation(seeds, 40, 0)
    searched = new["searched_rank"]
    assert {k: searched[k] for k in ("arch", "rank", "per_seed", "interval", "level", "resamples")} == \
        {"arch": "ccsfsf", **rank_interval(seeds, 2, 40, 0)}
    assert searched["group"] == "mixed" and searched["resolvable"] == groups["mixed"]["resolvable"]
    assert searched["regret"]["value"] == pytest.approx(gt.max() - gt[2]) and searched["regret"]["ci95"][0] >= 0
    assert new["perfect_ranker"]["kendall_tau"] is not None and len(new["failed_run_sensitivity"]) == 4
    for t in new["rankers"]:
        s = np.array([r[t["ranker"]] for r in result["rows"]])
        assert t["shares_seed"] == (t["kind"] in ("short", "rerank"))
        assert t["kendall_tau_other_seeds"] == (pytest.approx(kendalltau(s, seeds[:, 1:].mean(1)).statistic)
                                                if t["shares_seed"] else None)
        if t["ranker"] == "spos":
            assert t["vs_baseline"] is None
        else:
            assert t["vs_baseline"]["difference"] == pytest.approx(
                t["kendall_tau"] - kendalltau(np.array([r["spos"] for r in result["rows"]]), gt).statistic)
        assert t["pick_rank_interval"]["rank"] == t["pick_rank"]
        tau = t["kendall_tau_hierarchical"]
        assert tau["value"] == pytest.approx(t["kendall_tau"]) and tau["resampled"] == "orders and seeds"
        assert t["regret_hierarchical"]["value"] == pytest.approx(t["regret"])
    # from a stored ranking.json alone: ranking.json and ranking.md rewritten in --out
    src = tmp_path / "study.json"
    src.write_text(json.dumps(result))
    with pytest.raises(SystemExit):  # not named ranking.json: --out is needed
        main([str(src)])
    assert main([str(src), "--out", str(tmp_path / "re"), "--resamples", "40"]) == 0
    assert json.loads((tmp_path / "re" / "ranking.json").read_text()) == json.loads(json.dumps(new))
    md = (tmp_path / "re" / "ranking.md").read_text()
    assert "0.0 is the range over the 3 splits, not an interval"[4:] in md and "perfect-ranker reference" in md
    assert "ceiling" not in md.replace("not a ceiling", "")  # named for what it is
    verdicts = {line.split("|")[1].strip(): line.split("|")[7].strip() for line in md.splitlines()
                if line.startswith("| ") and line.count("|") == 8 and "F(" in line}
    assert verdicts["without convolution"] == "order effect detectable"
    assert ("not resolvable at this budget" in verdicts["with convolution"]) == \
        (not groups["with convolution"]["resolvable"])
    assert "tau without convolution (5) |" in md
    assert ("the searched order `ccsfsf`: rank" in md) == bool(groups["mixed"]["resolvable"])
    assert ("its rank inside it is not resolvable" in md) == (not groups["mixed"]["resolvable"])


def test_a_failed_run_is_flagged_and_the_groups_are_tested_again_without_it(tmp_path, monkeypatch):
    """One seed of a convolution order stays on the plateau (0.055 against 0.2): as seed noise it hides the group's
    order effect; the group is tested again without that order, and the rankers scored without the run."""
    from nni_lvbert.study import ranking_plots
    from nni_lvbert.study.ranking import _report
    from nni_lvbert.study.reanalyse import failed_runs, reanalyse

    monkeypatch.setattr(ranking_plots, "save_figure", lambda fig, path, **kw: path.write_bytes(b"png"))
    result, seeds = _synthetic_result()
    rng = np.random.default_rng(1)
    seeds[:5] = np.linspace(0.19, 0.23, 5)[:, None] + rng.normal(scale=0.002, size=(5, 3))  # a real order effect
    seeds[3, 2] = 0.055
    for row, y in zip(result["rows"], seeds):
        row["seeds"], row["ground_truth"] = y.tolist(), float(y.mean())
    assert failed_runs(seeds) == [(3, 2)] and failed_runs(seeds[:, :2]) == []  # two seeds: no median to trust
    assert failed_runs(seeds - 7.0) == [(3, 2)]  # minus a loss: negative scores, the same runs
    assert failed_runs(2 * seeds.mean(1, keepdims=True) - seeds) == []  # far above its order's median: not failed
    new = reanalyse(result, resamples=40)
    assert new["failed_runs"] == [{"arch": "fcfcgc", "seed": 2, "score": 0.055,
                                   "order_median": pytest.approx(float(np.median(seeds[3])))}]
    groups = {g["group"]: g for g in new["groups"]}
    conv = groups["with convolution"]
    assert not conv["resolvable"]  # the failed run as noise
    assert conv["without_failed"] == {"orders": 4, "order_effect": order_effect(seeds[[0, 1, 2, 4]]),
                                      "resolvable": True}
    assert "without_failed" not in groups["without convolution"]  # no failed run there
    kept = seeds.mean(1)
    kept[3] = seeds[3, :2].mean()
    spos = np.array([r["spos"] for r in result["rows"]])
    assert new["rankers"][0]["kendall_tau_without_failed"] == pytest.approx(kendalltau(spos, kept).statistic)
    _report(new, tmp_path)
    md = (tmp_path / "ranking.md").read_text()
    assert "| with convolution, without the orders with a failed run | 4 |" in md
    assert "`fcfcgc` seed 2: 0.0550" in md and "tau with convolution (5): resolvable without its failed runs" in md
    assert reanalyse(_synthetic_result()[0], resamples=40)["failed_runs"] == []


def test_ranker_spellings_and_errors(trained, tmp_path):
    from nni_lvbert.errors import UserError
    from nni_lvbert.study.rankers import parse_rankers

    run = str(trained["run"])
    rankers = parse_rankers(["spos", f"fair={run}", "short:40", "zc:synflow", "rerank:5:300", "rerank:3:40:fair"],
                            run)
    assert [(r.name, r.kind) for r in rankers] == [("spos", "supernet"), ("fair", "supernet"), ("short:40", "short"),
                                                   ("zc:synflow", "zc"), ("rerank:5:300", "rerank"),
                                                   ("rerank:3:40:fair", "rerank")]
    assert [r.arg for r in rankers[4:]] == ["5:300:spos", "3:40:fair"]
    for bad, message in ((["zc:magic"], "unknown zero-cost proxy"), (["short:0"], "N >= 1"),
                         (["annealing"], "unknown ranker"), (["spos", "spos"], "repeat"),
                         ([f"x={tmp_path}"], "not a finished supernet run"), (["spos", "rerank:0:300"], "K >= 1"),
                         (["spos", "rerank:5"], "rerank:K:N"), (["spos", "rerank:5:300:fair"], "not a supernet"),
                         (["short:40", "rerank:5:40:short:40"], "rerank:K:N")):
        with pytest.raises(UserError, match=message):
            parse_rankers(bad, run)


def test_two_stage_ranking_reorders_only_the_first_stages_top_k():
    from nni_lvbert.study.rankers import two_stage

    first = {"a": 0.9, "b": 0.8, "c": 0.8, "d": 0.1, "e": 0.5}
    assert two_stage(first, {}, 0) == ["a", "b", "c", "e", "d"]  # ties keep their order
    second = {"a": 0.1, "b": 0.3, "c": 0.2}
    assert two_stage(first, second, 3) == ["b", "c", "a", "e", "d"]
    assert two_stage(first, {"a": 0.2, "b": 0.2}, 2) == ["a", "b", "c", "e", "d"]  # a tie keeps the first order
    assert two_stage(first, {o: 1.0 for o in first}, 5) == two_stage(first, {}, 0)


# --- end to end --------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_ranking_quick_end_to_end_and_resume(trained, tmp_path, capsys):
    out = tmp_path / "rank"
    args = ["study", "ranking", "--supernet", str(trained["run"]), "--quick", "--out", str(out), "--no-progress",
            "--rankers", "spos", "short:10", "zc:synflow", "rerank:2:10", "--json"]
    code, stdout, err = run_cli(args, capsys)
    assert code == 0, err
    res = json.loads((out / "ranking.json").read_text())
    roles = [r["role"] for r in res["rows"]]
    assert len(roles) == 5 and {"bert", "dynamicconv"} <= set(roles)  # 3 stratified + 2 baselines
    assert "lvbert-small does not fit" in err and "sandwich does not fit" in err  # 6 slots: too few
    assert res["seeds"] == [0, 1] and res["validation"]["masking"] == "full"
    assert res["validation"]["requested_tokens"] == 4096  # --quick scores on a part of the split
    for row in res["rows"]:
        assert len(row["seeds"]) == 2 and row["ground_truth"] == pytest.approx(np.mean(row["seeds"]))
    mixed = [row["seeds"] for row in res["rows"] if "s" in row["arch"] and "c" in row["arch"]]
    assert res["mixed_orders"] == len(mixed)
    assert res["noise_ceiling_mixed"] == (noise_ceiling(mixed) if len(mixed) >= 3 else None)
    assert [t["ranker"] for t in res["rankers"]] == ["spos", "short:10", "zc:synflow", "rerank:2:10"]
    two = res["ranker_details"]["rerank:2:10"]  # the spos top 2 re-ranked by the short:10 models (no new training)
    spos = sorted(res["rows"], key=lambda r: -r["spos"])
    top = sorted(spos[:2], key=lambda r: -r["short:10"])
    assert [r["arch"] for r in sorted(res["rows"], key=lambda r: -r["rerank:2:10"])] == \
        [r["arch"] for r in top + spos[2:]]
    assert two["k"] == 2 and set(two["runs"]) <= set(res["ranker_details"]["short:10"]["runs"])
    truth = [r["ground_truth"] for r in res["rows"]]
    for t in res["rankers"]:
        scores = [r[t["ranker"]] for r in res["rows"]]
        if t["kendall_tau"] is not None:
            assert t["kendall_tau"] == pytest.approx(kendalltau(scores, truth).statistic)
        assert t["core_minutes"] > 0 and 0 <= t["top5_overlap"] <= 1 and t["regret"] >= 0
        # the budget check: short:N against the ground truth's models of the same seed (seed 0), for short:N only
        check = t["budget_check"]
        assert (check is not None) == (t["ranker"] == "short:10")
        if check and check["kendall_tau"] is not None:
            assert check["steps"] == 10 and check["seed"] == 0
            assert check["kendall_tau"] == pytest.approx(kendalltau(scores, [r["seeds"][0] for r in res["rows"]])
                                                         .statistic)
            # its yardstick: seed 0 against seed 1 at the ground truth's budget
            seed_tau = kendalltau(*zip(*[r["seeds"] for r in res["rows"]])).statistic
            assert check["seed_to_seed_tau"] == (None if np.isnan(seed_tau) else pytest.approx(seed_tau))
            other = kendalltau(scores, [r["seeds"][1] for r in res["rows"]]).statistic  # two seeds: the other one
            assert check["kendall_tau_other_seeds"] == (None if np.isnan(other) else pytest.approx(other))
    assert "budget check: `short:10` against the ground truth's seed-0 models" in (out / "ranking.md").read_text()
    # what the ground truth resolves (reanalyse): seed-0 rankers against seed 1 alone, the order effect per group
    for t in res["rankers"]:
        other = kendalltau([r[t["ranker"]] for r in res["rows"]], [r["seeds"][1] for r in res["rows"]]).statistic
        assert t["shares_seed"] == (t["ranker"] in ("short:10", "rerank:2:10"))
        assert t["kendall_tau_other_seeds"] == (pytest.approx(other) if t["shares_seed"] and not np.isnan(other)
                                                else None)
        assert t["pick_rank_interval"]["rank"] == t["pick_rank"]
        tau = t["kendall_tau_hierarchical"]
        assert tau["value"] == pytest.approx(t["kendall_tau"]) and tau["resampled"] == "orders and seeds"
        assert t["regret_hierarchical"]["value"] == pytest.approx(t["regret"])
        assert (t["vs_baseline"] is None) == (t["ranker"] == "spos")
    assert res["groups"][0]["group"] == "all orders" and res["groups"][0]["orders"] == 5
    assert "## Order effect and perfect-ranker reference per group" in (out / "ranking.md").read_text()
    short = res["ranker_details"]["short:10"]
    assert short["steps"] == 10 and all(json.loads((out / "models" / r.split("/")[-1] / "options.json").read_text())
                                        ["max_steps"] == 10 for r in short["runs"])
    models = sorted(p.name for p in (out / "models").glob("*/meta.json"))
    assert len(list((out / "models").glob("*-mlm-seed*/meta.json"))) == 5 * 2 + 5  # ground truth + short:10
    assert (out / "ranking.png").stat().st_size > 5000 and (out / "ranking-scatter.png").is_file()
    assert (out / "ranking-truth.png").stat().st_size > 5000
    assert "split-half agreement" in (out / "ranking.md").read_text()
    printed = json.loads(stdout.strip().splitlines()[-1])
    assert printed["orders"] == 5 and set(printed["rankers"]) == {"spos", "short:10", "zc:synflow", "rerank:2:10"}

    stamps = {p: p.stat().st_mtime_ns for p in (out / "models").glob("*/meta.json")}
    code, _, err = run_cli(["study", "ranking", "--out", str(out), "--resume", "--no-progress"], capsys)
    assert code == 0, err
    again = json.loads((out / "ranking.json").read_text())
    assert again["rows"] == res["rows"] and "scoring" not in err  # nothing re-drawn, retrained or re-scored
    assert {p: p.stat().st_mtime_ns for p in (out / "models").glob("*/meta.json")} == stamps and models
    scored = sorted((out / "models").glob("*/scores/*.json"))  # each model's metrics kept beside it
    truth = json.loads((out / "ground_truth.json").read_text())["models"]
    short = json.loads((out / "rankers" / "short-10.json").read_text())["metrics"]
    assert len(scored) == len(truth) + len(short) == 15
    for p in scored:
        kept, model = json.loads(p.read_text())["metrics"], p.parents[1].name
        assert kept == ({k: truth[model][k] for k in kept} if model in truth else short[model.split("-")[0]])
    code, _, err = run_cli(["study", "ranking", "--supernet", str(trained["run"]), "--quick", "--models",
                            str(out / "models"), "--out", str(tmp_path / "again"), "--rankers", "short:10"], capsys)
    assert code == 0 and "validation batches" not in err, err  # another study on the store: all models scored
    assert json.loads((tmp_path / "again" / "ranking.json").read_text())["rows"] == [
        {k: v for k, v in row.items() if k not in ("spos", "zc:synflow", "rerank:2:10")} for row in res["rows"]]
    code, _, err = run_cli(["study", "ranking", "--out", str(out), "--resume", "--rankers", "zc:synflow", "spos"],
                           capsys)  # another set of rankers: nothing retrained or re-scored, kept for the next resume
    assert code == 0 and "scoring" not in err, err
    code, _, err = run_cli(["study", "ranking", "--out", str(out), "--resume", "--no-progress"], capsys)
    fewer = json.loads((out / "ranking.json").read_text())
    assert code == 0 and [t["ranker"] for t in fewer["rankers"]] == ["zc:synflow", "spos"], err
    assert fewer["rankers"] == [t for name in ("zc:synflow", "spos") for t in res["rankers"] if t["ranker"] == name]
    assert {p: p.stat().st_mtime_ns for p in (out / "models").glob("*/meta.json")} == stamps
    code, _, err = run_cli(["study", "ranking", "--out", str(out), "--resume", "--num-archs", "5"], capsys)
    assert code == 2 and "contradicts" in one_error_line(err)
    code, _, err = run_cli(args, capsys)  # the same command again: refused, nothing overwritten
    assert code == 2 and "not empty" in one_error_line(err)


def test_ranking_bad_input_is_one_line(trained, tmp_path, capsys):
    out = tmp_path / "x"
    for extra, message in ((["--rankers", "zc:magic"], "unknown zero-cost proxy"),
                           (["--no-baselines", "--num-archs", "2"], "at least 3"),
                           (["--num-seeds", "0"], "--num-seeds")):
        code, _, err = run_cli(["study", "ranking", "--supernet", str(trained["run"]), "--out", str(out), *extra],
                               capsys)
        assert code == 2 and message in one_error_line(err) and not out.exists(), err


def test_orders_of_a_study_include_baselines_and_the_searched_order(tmp_path):
    from nni_lvbert.config import load_space
    from nni_lvbert.study.ranking import standalone_specs, study_orders

    (tmp_path / "best_arch.json").write_text(json.dumps({"arch": "ssssssssssssssssssssssss"}))
    orders = study_orders(load_space("lvbert"), 8, 0, searched=str(tmp_path))
    roles = [r for _, r in orders]
    assert roles[8:] == ["bert", "dynamicconv", "sandwich", "lvbert-small", "searched"]
    assert orders[-1][0] == Arch.parse("s" * 24)
    specs = standalone_specs(orders[:2], [0, 1], size="tiny", cfg={}, budget=None, data="d", data_seed=0)
    assert [(s.arch, s.seed) for _, s in specs] == [(orders[0][0].compact, 0), (orders[1][0].compact, 0),
                                                    (orders[0][0].compact, 1), (orders[1][0].compact, 1)]


def test_report_of_a_one_seed_study_with_an_undefined_tau(tmp_path, monkeypatch):
    """One seed (the early answer from the seed-0 models): no noise ceiling, no seed spread; a ranker whose scores
    are all equal reads 'n/a (...)' in the table and the plot titles, never 'undefined n/a'."""
    from nni_lvbert.study import ranking, ranking_plots

    titles = []
    monkeypatch.setattr(ranking_plots, "save_figure",
                        lambda fig, path, **kw: titles.extend(ax.get_title() for ax in fig.axes))
    rows = [{"arch": a, "role": r, "ground_truth": g, "seeds": [g], "seed_std": None, "se": 0.01, "flat": 0.1}
            for a, r, g in (("ss", "bert", 0.2), ("cc", "dynamicconv", 0.3), ("sc", "uniform random", 0.25))]
    table = [{"ranker": "flat", "kind": "zc", "core_minutes": 0.01, "kendall_tau": None, "kendall_tau_ci95": None,
              "spearman_rho": None, "spearman_rho_ci95": None, "undefined": "constant scores on one side",
              "kendall_tau_mixed": None, "top5_overlap": 1.0, "regret": 0.1, "pick": "ss", "pick_rank": 3}]
    result = {"orders": 3, "seeds": [0], "supernet": "s", "size": "tiny", "rank_by": "acc", "mixed_orders": 1,
              "budget": {"steps": 1, "batch_size": 1, "lr": 1e-3, "warmup_steps": 0}, "noise_ceiling": None,
              "seed_std_median": None, "validation": {"masked_tokens": 10, "masking": "full"}, "rankers": table,
              "rows": rows}
    ranking._report(result, tmp_path)
    md = (tmp_path / "ranking.md").read_text()
    assert "n/a (one seed)" in md and "| flat | 0.0 | n/a n/a |" not in md and "undefined" not in md
    assert "flat: τ n/a (constant scores on one side)" in titles
