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
from nni_lvbert.study.orders import STRATA, composition, is_mixed, stratified_orders
from nni_lvbert.study.stats import noise_ceiling, regret, top_overlap
from tests.conftest import one_error_line, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")
TYPES = ("dc", "sa", "ff", "glu")


@pytest.fixture(scope="module")
def trained(study_supernet):
    return study_supernet


# --- orders ------------------------------------------------------------------------------------------------------
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
    from nni_lvbert.modeling import FixedMLM
    from nni_lvbert.search.scorer import SupernetScorer
    from nni_lvbert.search.validation import load_val_batches, model_accuracy, model_metrics

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
    short = res["ranker_details"]["short:10"]
    assert short["steps"] == 10 and all(json.loads((out / "models" / r.split("/")[-1] / "options.json").read_text())
                                        ["max_steps"] == 10 for r in short["runs"])
    models = sorted(p.name for p in (out / "models").glob("*/meta.json"))
    assert len(list((out / "models").glob("*-mlm-seed*/meta.json"))) == 5 * 2 + 5  # ground truth + short:10
    assert (out / "ranking.png").stat().st_size > 5000 and (out / "ranking-scatter.png").is_file()
    assert (out / "ranking-truth.png").stat().st_size > 5000
    assert "noise ceiling" in (out / "ranking.md").read_text()
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
