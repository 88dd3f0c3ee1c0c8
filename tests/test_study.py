"""`lvbert study ranking | search | downstream`: statistics, selection, and each sub-study end to end in --quick mode
on a tiny 6-slot supernet (tests/conftest.py's builder, trained long enough that candidates score differently)."""
from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy.stats import kendalltau, spearmanr

from nni_lvbert.study.search import summarize
from nni_lvbert.study.stats import rank_correlations
from tests.conftest import one_error_line, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def trained(study_supernet):
    return study_supernet


# --- pieces ------------------------------------------------------------------------------------------------------
def test_rank_correlations_are_scipys_with_bootstrap_intervals():
    rng = np.random.default_rng(3)
    x = rng.normal(size=14)
    y = x + rng.normal(scale=0.7, size=14)
    r = rank_correlations(x, y, resamples=300, seed=1)
    assert r["kendall_tau"] == pytest.approx(kendalltau(x, y).statistic)
    assert r["spearman_rho"] == pytest.approx(spearmanr(x, y).statistic)
    for name in ("kendall_tau", "spearman_rho"):
        lo, hi = r[f"{name}_ci95"]
        assert -1 <= lo <= hi <= 1
    assert r["kendall_tau_ci95"][0] > 0  # strongly related pairs: the interval excludes 0
    assert rank_correlations(x, y, resamples=300, seed=1) == r  # seeded
    for constant in (np.zeros(14), [0.053136637066743056] * 14):  # the second: numpy's std of it is not 0
        flat = rank_correlations(x, constant)
        assert flat["kendall_tau"] is None and flat["spearman_rho"] is None and flat["undefined"]
    with pytest.raises(Exception, match="at least 3"):
        rank_correlations([1, 2], [2, 1])


def test_a_model_being_trained_by_another_study_is_waited_for_not_trained_twice(tmp_path, monkeypatch):
    import threading
    import time

    from nni_lvbert.standalone import store as common
    from nni_lvbert.standalone.store import Standalone, store_lock, train_standalone
    from nni_lvbert.study.common import Budget

    spec = Standalone(arch="sfsf", objective="mlm", size="tiny", model_config={}, budget=Budget(1, 1e-3, 0, 1),
                      data=str(tmp_path), seed=0, data_seed=0)
    path = tmp_path / spec.dirname()
    held = threading.Event()

    def other_study():
        with store_lock(tmp_path / f".{spec.dirname()}.lock"):
            held.set()
            time.sleep(0.5)
            path.mkdir()
            (path / "meta.json").write_text("{}")

    monkeypatch.setattr(common, "_train", lambda *a: pytest.fail("trained a model another study had finished"))
    thread = threading.Thread(target=other_study)
    thread.start()
    held.wait(5)
    assert train_standalone(spec, tmp_path) == path
    thread.join()


def test_an_interrupted_model_resumes_in_a_store_that_moved(tiny, tmp_path):
    """A model store moved (or copied to another machine) resumes its interrupted models from their run directories
    alone: no path the store had when they started is needed."""
    import shutil

    from nni_lvbert.standalone.store import Standalone, train_all
    from nni_lvbert.study.common import Budget
    from tests.conftest import tiny_config

    spec = Standalone(arch="csfs", objective="mlm", size="tiny", budget=Budget(4, 1e-3, 1, 8),
                      model_config=tiny_config(vocab_size=tiny["data"].vocab_size).to_dict(),
                      data=str(tiny["data"].path), seed=0, data_seed=0)
    first = tmp_path / "a"
    [run] = train_all([("m", spec)], first, progress=False)
    (run / "meta.json").unlink()  # as if killed after its last checkpoint
    shutil.move(str(first), str(tmp_path / "b"))
    [moved] = train_all([("m", spec)], tmp_path / "b", progress=False)
    meta = json.loads((moved / "meta.json").read_text())
    assert moved.parent == tmp_path / "b" and meta["steps"] == 4 and meta["run_dir"] == str(moved)


def test_two_studies_on_one_store_split_the_models_between_them(tmp_path, monkeypatch):
    import threading
    import time

    from nni_lvbert.standalone import store as common
    from nni_lvbert.standalone.store import Standalone, train_all
    from nni_lvbert.study.common import Budget

    specs = [(arch, Standalone(arch=arch, objective="mlm", size="tiny", model_config={},
                               budget=Budget(1, 1e-3, 0, 1), data=str(tmp_path), seed=0, data_seed=0))
             for arch in ("sfsf", "ffss", "cccc", "sccs")]
    trained = []

    def fake_train(spec, path, store, progress, resume, overwrite):
        trained.append((threading.current_thread().name, spec.arch))
        time.sleep(0.3)
        path.mkdir()
        (path / "meta.json").write_text("{}")

    monkeypatch.setattr(common, "_train", fake_train)
    results = {}
    studies = [threading.Thread(target=lambda n=n: results.__setitem__(n, train_all(specs, tmp_path, False)),
                                name=f"study{n}") for n in range(2)]
    for t in studies:
        t.start()
    for t in studies:
        t.join()
    assert sorted(a for _, a in trained) == sorted(a for a, _ in specs)  # each model trained once
    assert {who for who, _ in trained} == {"study0", "study1"}  # by both studies
    assert results[0] == results[1] == [tmp_path / s.dirname() for _, s in specs]


def test_stand_alone_trainings_print_no_model_summary(tmp_path, monkeypatch):
    from pytorch_lightning.callbacks import ModelSummary

    from nni_lvbert.pretrain import train
    from nni_lvbert.standalone.store import Standalone, train_standalone
    from nni_lvbert.study.common import Budget
    from nni_lvbert.train_options import TrainOptions
    from nni_lvbert.trainer import build_trainer

    seen = []
    monkeypatch.setattr(train, "train_pretrain", lambda opts: seen.append(opts.model_summary))
    spec = Standalone(arch="sfsf", objective="mlm", size="tiny", model_config={}, budget=Budget(1, 1e-3, 0, 1),
                      data=str(tmp_path), seed=0, data_seed=0)
    train_standalone(spec, tmp_path / "models", progress=False)
    assert seen == [False]  # a table per model would drown a study's log
    for summary in (True, False):
        opts = TrainOptions.flat(max_steps=1, batch_size=1, val_every=1, val_batches=1, ckpt_every=1, accelerator="cpu",
                                 progress=False, model_summary=summary)
        trainer, _ = build_trainer(tmp_path / "t", opts)
        assert any(isinstance(c, ModelSummary) for c in trainer.callbacks) == summary


def test_electra_studies_take_the_tiny_electra_lr():
    from nni_lvbert.pretrain.train import PretrainOptions
    from nni_lvbert.study.downstream import DownstreamOptions

    electra = DownstreamOptions(objective="electra").budget()
    assert electra.lr == PretrainOptions(size="tiny", objective="electra").resolved("lr") == 5e-4
    assert DownstreamOptions().budget().lr == 2e-3 and DownstreamOptions(objective="electra", lr=1e-3).budget().lr == 1e-3
    assert DownstreamOptions(objective="electra", quick=True).budget() == DownstreamOptions(quick=True).budget()


def test_search_summary_counts_wins_and_ties():
    def seed(e, r, q):
        return {"evolution": {"best": e, "best_arch": "a", "top10": [e - 0.1, e]},
                "regularized-evolution": {"best": r, "best_arch": "b", "top10": [r - 0.1, r]},
                "random": {"best": q, "best_arch": "c", "top10": [q - 0.1, q]}}

    s = summarize({0: seed(0.5, 0.4, 0.3), 1: seed(0.5, 0.5, 0.2), 2: seed(0.1, 0.6, 0.2)},
                  ["evolution", "regularized-evolution", "random"], None)
    res = s["results"]
    assert res["evolution"]["wins"] == 1.5 and res["regularized-evolution"]["wins"] == 1.5
    assert res["random"]["wins"] == 0
    assert sum(r["wins"] for r in res.values()) == 3
    assert res["random"]["evolution_minus_this"]["evolution_better"] == 2
    assert res["evolution"]["curve_max"] == [0.4, 0.5]


# --- end to end (--quick) -----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_search_study_quick(trained, tmp_path, capsys):
    out = tmp_path / "search"
    code, _stdout, err = run_cli(["study", "search", "--supernet", str(trained["run"]), "--quick", "--num-seeds", "2",
                                  "--val-tokens", "2048", "--out", str(out), "--no-progress"], capsys)
    assert code == 0, err
    res = json.loads((out / "search_study.json").read_text())
    assert res["seeds"] == 2 and res["budget"] == 18
    strategies = ["evolution", "regularized-evolution", "random"]
    assert list(res["results"]) == strategies  # one series per strategy
    assert sum(r["wins"] for r in res["results"].values()) == pytest.approx(2)
    for r in res["results"].values():
        assert len(r["best_per_seed"]) == 2 and len(r["curve_mean"]) == 3
        assert all(lo <= m <= hi for lo, m, hi in zip(r["curve_min"], r["curve_mean"], r["curve_max"]))
        # the top-10 mean never drops once 10 are evaluated: from the second iteration (the first has 6 candidates,
        # the mean of its 6; the next 6 can bring that mean down as they fill the top 10)
        full = r["curve_mean"][1:]
        assert all(a <= b + 1e-12 for a, b in itertools.pairwise(full))
    for seed in (0, 1):
        best = json.loads((out / f"seed{seed}" / "best_arch.json").read_text())
        assert best["seed"] == seed and best["budget"] == 18
        assert best["score"] == max(r["best_per_seed"][seed] for r in res["results"].values())
    assert (out / "search_study.png").is_file() and "wins" in (out / "search_study.md").read_text()
    stored = json.loads((out / "options.json").read_text())  # trains no model: no stand-alone budget stored
    assert stored["max_steps"] is None and stored["lr"] is None and stored["population"] is None
    (out / "search_study.json").unlink()  # as if killed before the end: the seeds are done, the summary is not
    code, _, err = run_cli(["study", "search", "--out", str(out), "--resume", "--no-progress"], capsys)
    assert code == 0, err
    assert err.count("(done)") == 2 and json.loads((out / "search_study.json").read_text()) == res


@pytest.mark.slow
def test_downstream_quick_and_model_store_reuse(trained, tmp_path, capsys):
    store = tmp_path / "store"
    common = ["--quick", "--data", str(trained["data"].path), "--models", str(store), "--no-progress"]
    out = tmp_path / "down"
    code, _, err = run_cli(["study", "downstream", "--archs", "searched,bert", "--searched",
                            "cfsfsgcfsfsgcfsfsgcfsfsg", "--out", str(out), *common], capsys)
    assert code == 0, err
    res = json.loads((out / "downstream.json").read_text())
    assert [r["label"] for r in res["rows"]] == ["searched", "bert"]
    for r in res["rows"]:
        assert 0 <= r["mlm_acc"] <= 1 and not math.isnan(r["mlm_acc"])
        assert len(r["tasks"]["sotu-era"]["per_seed"]) == 2
        assert r["tasks"]["sotu-era"]["median"] == pytest.approx(np.median(r["tasks"]["sotu-era"]["per_seed"]))
    assert set(res["comparisons"]["tasks"]["sotu-era"]) == {"bert"}
    md = (out / "downstream.md").read_text()
    assert all(name in md for name in ("searched", "bert")) and (out / "downstream.png").is_file()
    assert len(list(store.glob("*/meta.json"))) == 2
    (out / "downstream.json").unlink()
    code, _, err = run_cli(["study", "downstream", "--out", str(out), "--resume", "--no-progress"], capsys)
    assert code == 0, err
    assert json.loads((out / "downstream.json").read_text()) == res and "finished earlier" not in err

    stamps = {p: p.stat().st_mtime_ns for p in store.glob("*/meta.json")}
    again = tmp_path / "again"
    code, _, err = run_cli(["study", "downstream", "--archs", "bert", "--pretrain-seeds", "0", "1", "--out",
                            str(again), *common], capsys)
    assert code == 0, err
    new = {p: p.stat().st_mtime_ns for p in store.glob("*/meta.json")}
    assert {p: new[p] for p in stamps} == stamps  # bert with seed 0 reused from the store ...
    assert len(new) == 3 and next(p.parent.name for p in set(new) - set(stamps)).startswith(("sfsf", "fsfs"))
    res = json.loads((again / "downstream.json").read_text())  # ... seed 1 pre-trained, each model fine-tuned
    (row,) = res["rows"]
    assert res["pretrain_seeds"] == [0, 1] and [x["seed"] for x in row["pretrain"]] == [0, 1]
    assert len({x["run"] for x in row["pretrain"]}) == 2 and "-seed1-" in row["pretrain"][1]["run"]
    assert len(row["tasks"]["sotu-era"]["per_seed"]) == 4 and set(row["tasks"]["sotu-era"]["per_pretrain_seed"]) == {"0", "1"}
    assert row["mlm_acc"] == pytest.approx(np.median([x["mlm_acc"] for x in row["pretrain"]]))
    assert all((again / "finetune" / f"bert-pretrain{p}" / "results.json").is_file() for p in (0, 1))
    assert "pre-training seeds 0, 1" in (again / "downstream.md").read_text()


def test_compare_with_several_pretraining_seeds():
    from nni_lvbert.study.downstream import _row, compare

    def seeds(accs, scores):
        return [{"seed": i, "run": f"r{i}", "mlm_acc": a, "disc_auc": None, "tasks": {"t": s}}
                for i, (a, s) in enumerate(zip(accs, scores))]

    a = _row("searched", "cc", 10, seeds([0.30, 0.32], [[60, 61], [59, 62]]))
    b = _row("bert", "ss", 10, seeds([0.20, 0.21], [[61, 58], [60, 57]]))
    assert a["tasks"]["t"]["per_seed"] == [60, 61, 59, 62] and a["tasks"]["t"]["median"] == 60.5
    assert a["tasks"]["t"]["per_pretrain_seed"] == {"0": 60.5, "1": 60.5} and a["mlm_acc"] == pytest.approx(0.31)
    comp = compare([a, b])
    assert comp["tasks"]["t"]["bert"] == {"diff_median": 1.5, "beyond_seed_spread": False}  # ranges overlap
    assert comp["mlm"]["bert"]["beyond_seed_spread"] and comp["mlm"]["bert"]["diff_median"] == pytest.approx(0.105)
    assert "mlm" not in compare([_row("x", "cc", 1, seeds([0.3], [[1]])), _row("y", "ss", 1, seeds([0.2], [[2]]))])


def test_study_bad_input_is_one_line(trained, tmp_path, capsys):
    out = tmp_path / "x"
    code, _, err = run_cli(["study", "downstream", "--quick", "--archs", "searched,bert", "--out", str(out)], capsys)
    assert code == 2 and "--searched" in one_error_line(err) and not out.exists()
    code, _, err = run_cli(["study", "search", "--supernet", str(trained["run"]), "--search", "annealing",
                            "--out", str(out)], capsys)
    assert code == 2 and "unknown strategy annealing" in one_error_line(err) and not out.exists()
    code, _, err = run_cli(["study", "ranking", "--supernet", str(tmp_path / "nope"), "--out", str(out)], capsys)
    assert code == 2 and "not found" in one_error_line(err) and not out.exists()
    code, _, err = run_cli(["study", "downstream", "--quick", "--archs", "bert", "--objective", "xlnet",
                            "--out", str(out)], capsys)
    assert code == 2 and "unknown objective" in one_error_line(err) and not out.exists()
    code, _, err = run_cli(["study", "downstream", "--quick", "--archs", "bert", "--pretrain-seeds", "1", "1",
                            "--out", str(out)], capsys)
    assert code == 2 and "listed twice in --pretrain-seeds" in one_error_line(err) and not out.exists()
    bad = tmp_path / "bad.json"
    bad.write_text('{"hidden_size": 32, "bogus": 1}')
    for config, message in ((tmp_path / "nope.json", "not found"), (bad, "unknown model config keys: bogus")):
        code, _, err = run_cli(["pretrain", "--arch", "bert", "--size", "tiny", "--model-config", str(config),
                                "--out", str(out)], capsys)
        assert code == 2 and message in one_error_line(err) and not out.exists()


def test_result_files_show_paths_relative_to_the_working_directory_or_home(tmp_path, monkeypatch):
    from nni_lvbert.study.common import shown_path, shown_stats

    home, work = tmp_path / "home", tmp_path / "work"
    (work / "runs" / "sn").mkdir(parents=True)
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    assert shown_path(work / "runs" / "sn") == "runs/sn" and shown_path("runs/sn") == "runs/sn"
    assert shown_path(home / ".cache" / "d") == "~/.cache/d" and shown_path("~/x") == "~/x"
    assert shown_path(tmp_path / "elsewhere") == str((tmp_path / "elsewhere").resolve())
    assert shown_stats({"data": str(home / "d"), "tokens": 3}) == {"data": "~/d", "tokens": 3}
