"""`lvbert study iot`: the scoring's statistics, the baseline's budget, and the whole study end to end at --quick
(with --resume training and scoring nothing again) on the tiny 6-slot study supernet."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import one_error_line, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")


def test_clustered_mean_and_standard_error_by_sequence():
    from nni_lvbert.study.iot import clustered

    # rows of sequences 0, 0, 1, 2: per sequence y = 3, 1, 0 of n = 4, 2, 2 -> mean 4/8 = 0.5;
    # var = 3/2 * ((3 - 2)^2 + (1 - 1)^2 + (0 - 1)^2) / 8^2 = 3/64 -> se = 0.2165064
    res = clustered(np.array([2.0, 1.0, 1.0, 0.0]), np.array([3.0, 1.0, 2.0, 2.0]), np.array([0, 0, 1, 2]))
    assert res["mean"] == pytest.approx(0.5) and res["se"] == pytest.approx(0.2165064, rel=1e-6)


def test_the_baselines_budget_counts_the_supernets_sequences(tmp_path):
    from nni_lvbert.errors import UserError
    from nni_lvbert.study.common import Budget
    from nni_lvbert.study.iot import standalone_budget

    budget = Budget(steps=30, lr=2e-3, warmup_steps=3, batch_size=8)
    assert standalone_budget(budget, "iot", str(tmp_path), {}) == (budget, None)  # the supernet's count unknown
    (tmp_path / "options.json").write_text(json.dumps({"batch_size": 16}))
    alone, before = standalone_budget(budget, "total", str(tmp_path), {"steps": 300})
    assert before == 4800 and alone.steps == 30 + 600 and alone.batch_size == 8 and alone.lr == budget.lr
    assert standalone_budget(budget, "iot", str(tmp_path), {"steps": 300}) == (budget, 4800)  # known: reported
    (tmp_path / "options.json").unlink()
    with pytest.raises(UserError, match="--equal-tokens iot"):
        standalone_budget(budget, "total", str(tmp_path), {"steps": 300})


@pytest.mark.slow
def test_iot_study_quick_end_to_end_and_resume(study_supernet, tmp_path, capsys):
    out = tmp_path / "iot"
    args = ["study", "iot", "--supernet", str(study_supernet["run"]), "--block", "sa,ff,dc", "--quick",
            "--equal-tokens", "iot", "--out", str(out), "--no-progress", "--json"]
    code, stdout, err = run_cli(args, capsys)
    assert code == 0, err
    res = json.loads((out / "iot.json").read_text())
    for key in ("orders", "per_seed", "mean", "goal", "seeds", "budget", "standalone_budget", "m", "settings",
                "auxiliary_losses", "validation", "sequences"):
        assert key in res, key
    assert res["seeds"] == [0] and res["m"] == 2 and len(res["orders"]) == 2  # quick: one seed, M = 2
    assert res["settings"]["c1"] == 0.1 and res["auxiliary_losses"] == {"L_D": True, "L_S": True}
    assert res["validation"]["masking"] == "full" and res["sequences"]["iot"] == 30 * 8
    # the fixture's supernet keeps no options.json: its sequence count is unknown, and the report does not say 0
    assert res["sequences"]["supernet"] is None and "sequences before" not in (out / "iot.md").read_text()
    for p in res["per_seed"]:
        orders = [o["mean"] for o in p["orders"]]
        assert p["oracle"]["mean"] >= p["routed"]["mean"] - 1e-12
        assert all(p["oracle"]["mean"] >= acc - 1e-12 for acc in orders)
        assert p["best_shared"]["mean"] == max(orders)
        assert p["routed_minus_best_shared"]["mean"] == pytest.approx(p["routed"]["mean"] - max(orders))
        assert sum(p["usage"]) == pytest.approx(1.0) and 0 <= p["agreement"] <= 1
        assert all(p[k]["se"] > 0 for k in ("routed", "oracle", "oracle_crossfit", "random_at_usage"))
        assert p["oracle"]["mean"] >= p["oracle_crossfit"]["mean"] - 1e-12  # in-sample: an upper bound
        assert p["routed_minus_random_at_usage"]["mean"] == pytest.approx(
            p["routed"]["mean"] - p["random_at_usage"]["mean"])
        assert len(p["best_shared_heldout"]["arch"]) == 2 and p["best_shared_heldout"]["mean"] <= max(orders)
        assert set(p["standalone"]) == set(res["orders"])  # the baseline: every order stand-alone, same seed
        for s in p["standalone"].values():
            assert s["routed_minus_this"]["mean"] == pytest.approx(p["routed"]["mean"] - s["mean"])
        assert p["core_minutes"]["iot"] > 0 and all(v > 0 for v in p["core_minutes"]["standalone"].values())
    goal = res["goal"]
    assert goal["baseline"] in res["orders"] and isinstance(goal["met"], bool)
    d = goal["routed_minus_standalone"]
    assert goal["met"] == (d["mean"] > 2 * d["se"])
    assert d["se_seeds"] is None and d["se"] == d["se_validation"] > 0  # one seed: the validation error alone
    assert res["mean"]["baseline_core_minutes"] > 0 and res["mean"]["iot_core_minutes"] > 0
    md = (out / "iot.md").read_text()
    assert "goal" in md and "c1 (L_D) 0.1" in md and (out / "iot.png").stat().st_size > 5000
    assert json.loads(stdout.strip().splitlines()[-1])["goal"] == goal
    runs = sorted((out / "iot").glob("*/meta.json")) + sorted((out / "models").glob("*/meta.json"))
    assert len(runs) == 1 + 2
    stamps = {p: p.stat().st_mtime_ns for p in runs}

    code, _, err = run_cli(["study", "iot", "--out", str(out), "--resume", "--no-progress"], capsys)
    assert code == 0, err
    assert "stand-alone MLM training" not in err and "scoring" not in err and "Trainer.fit" not in err
    assert {p: p.stat().st_mtime_ns for p in runs} == stamps
    assert json.loads((out / "iot.json").read_text())["per_seed"] == res["per_seed"]
    code, _, err = run_cli(args, capsys)  # the same command again: refused, nothing overwritten
    assert code == 2 and "not empty" in one_error_line(err)

    # the per-seed units alone (as a repository keeps them) resume a study into a new directory: nothing trained
    units = out / "units"
    assert sorted(p.name for p in units.iterdir()) == ["seed0.json", "seed0.npz"]
    base = args[:-4]  # without --out OUT --no-progress --json
    code, _, err = run_cli([*base, "--out", str(tmp_path / "again"), "--units", str(units), "--no-progress"], capsys)
    assert code == 0, err
    assert "Trainer.fit" not in err and "scoring" not in err and "unit finished" in err
    assert json.loads((tmp_path / "again" / "iot.json").read_text())["per_seed"] == res["per_seed"]
    code, _, err = run_cli([*base, "--out", str(tmp_path / "other"), "--units", str(units), "--c1", "0.2",
                            "--no-progress"], capsys)  # a unit made with other settings is refused, not mixed in
    assert code == 2 and "other settings (settings)" in one_error_line(err, alone=False)


def test_iot_study_bad_input_is_one_line(study_supernet, tmp_path, capsys):
    run = str(study_supernet["run"])
    for extra, message in ((["--block", "sa,ff,dc"], "--equal-tokens iot"),  # the fixture has no options.json
                           (["--block", "sa,ff,dc", "--num-seeds", "0"], "--num-seeds"),
                           (["--block", "sa,ff,dc", "--equal-tokens", "iot", "--clamp", "0.6"], "--clamp"),
                           (["--block", "sa,ff,dc", "--orders", "sfcsfc", "cccccc"], "one source")):
        code, _, err = run_cli(["study", "iot", "--supernet", run, "--quick", "--out", str(tmp_path / "x"), *extra],
                               capsys)
        assert code == 2 and message in one_error_line(err, alone=False), err
        assert not (tmp_path / "x").exists()
    code, _, err = run_cli(["study", "iot", "--out", str(tmp_path / "y")], capsys)
    assert code == 2 and "--supernet" in one_error_line(err, alone=False)


def test_stored_iot_artefacts_render_the_same_report(tmp_path):
    """Every stored `study iot` result (docs/study/iot*.json) renders its stored .md again, byte for byte: the report
    reads artefacts written before the cross-fitted statistics as well as after."""
    from pathlib import Path

    from nni_lvbert.study.iot_report import report

    stored = [p for p in sorted((Path(__file__).parents[1] / "docs" / "study").glob("iot*.json")) if json.loads(p.read_text()).get("study") == "iot"]
    assert len(stored) >= 6
    for path in stored:
        report(json.loads(path.read_text()), tmp_path)
        assert (tmp_path / "iot.md").read_text() == path.with_suffix(".md").read_text(), path
