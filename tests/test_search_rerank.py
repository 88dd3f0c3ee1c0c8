"""Two-stage search: `lvbert search run --rerank K --rerank-steps N` re-ranks the K best distinct orders by short
stand-alone pre-training, records both stages in best_arch.json and resumes after kill -9 without retraining."""
from __future__ import annotations

import json

import pytest

from nni_lvbert.search.rerank import top_distinct
from tests.conftest import kill9_when, one_error_line, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")
SMALL = ["--population", "6", "--iterations", "2", "--topk", "3", "--crossover", "3", "--mutation", "3",
         "--val-tokens", "1024", "--no-progress"]


def test_top_distinct_keeps_each_order_once_best_first():
    records = [{"arch": a, "score": s} for a, s in (("aa", 0.1), ("bb", 0.5), ("aa", 0.7), ("cc", 0.5), ("dd", 0.2))]
    assert [r["arch"] for r in top_distinct(records, 3)] == ["aa", "bb", "cc"]  # ties: the first evaluated first
    assert [r["score"] for r in top_distinct(records, 10)] == [0.7, 0.5, 0.5, 0.2]


@pytest.mark.parametrize("steps,warmup", [(300, 30), (4000, 200), (5, 0)])
def test_a_short_budget_keeps_the_schedule_with_warmup_at_most_a_tenth(steps, warmup):
    from nni_lvbert.search.rerank import budget_for
    from nni_lvbert.study.common import Budget

    full = Budget(steps=1500, lr=1e-3, warmup_steps=200, batch_size=32)
    assert full.shortened(steps) == Budget(steps=steps, lr=1e-3, warmup_steps=warmup, batch_size=32)
    tiny = budget_for("tiny", steps)  # --rerank's budget: the pre-training preset, shortened by the same rule
    assert tiny.steps == steps and tiny.warmup_steps <= steps // 10


def test_rerank_bad_values_are_one_line(tiny, tmp_path, capsys):
    for extra, message in ((["--rerank", "-1"], "--rerank must be"), (["--rerank", "2", "--rerank-steps", "0"],
                                                                       "--rerank-steps must be")):
        code, _, err = run_cli(["search", "run", "--supernet", str(tiny["run"]), "--out", str(tmp_path / "x"),
                                *SMALL, *extra], capsys)
        assert code == 2 and message in one_error_line(err) and not (tmp_path / "x").exists()


@pytest.mark.slow
def test_rerank_records_both_stages_and_resumes_after_kill9(tiny, tmp_path, capsys):
    args = ["search", "run", "--supernet", str(tiny["run"]), *SMALL, "--rerank", "3", "--rerank-steps", "6"]
    out = tmp_path / "a"
    code, _, err = run_cli([*args, "--out", str(out)], capsys)
    assert code == 0, err
    best = json.loads((out / "best_arch.json").read_text())
    history = [json.loads(x) for x in (out / "history.jsonl").read_text().splitlines()]
    top = top_distinct(history, 3)
    rr = best["rerank"]
    assert [c["arch"] for c in rr["candidates"]] == [r["arch"] for r in top]
    assert [c["inherited"] for c in rr["candidates"]] == [r["score"] for r in top]
    assert best["stage1"]["arch"] == top[0]["arch"] and best["stage1"]["score"] == top[0]["score"]
    pick = max(rr["candidates"], key=lambda c: (c["mlm_acc"], c["inherited"]))
    assert best["compact"] == rr["pick"] == pick["arch"] and best["score"] == pick["inherited"]
    assert rr["steps"] == 6 and rr["core_minutes"] > 0 and all(c["mlm_acc_se"] > 0 for c in rr["candidates"])
    runs = sorted((out / "rerank").glob("*/meta.json"))
    assert len(runs) == 3 and all(json.loads(p.read_text())["steps"] == 6 for p in runs)

    # kill -9 once the first re-ranked model is finished, then --resume: the same answer, nothing retrained
    killed = tmp_path / "b"

    def one_model_done():
        done = list((killed / "rerank").glob("*/meta.json")) if (killed / "rerank").is_dir() else []
        return len(done) if 1 <= len(done) < 3 else None

    assert kill9_when([*args, "--out", str(killed)], one_model_done, timeout=400) is not None
    assert not (killed / "best_arch.json").exists()
    first = {p: p.stat().st_mtime_ns for p in (killed / "rerank").glob("*/meta.json")}
    code, _, err = run_cli(["search", "run", "--out", str(killed), "--resume", "--no-progress"], capsys)
    assert code == 0, err
    again = json.loads((killed / "best_arch.json").read_text())
    # the same picks and scores (to float rounding: the killed run trained its first model in another process)
    assert again["compact"] == best["compact"] and again["rerank"]["candidates"] == [
        {**{k: pytest.approx(v, rel=1e-6) if isinstance(v, float) else v for k, v in c.items()},
         "core_minutes": c2["core_minutes"]} for c, c2 in zip(rr["candidates"], again["rerank"]["candidates"])]
    assert all(p.stat().st_mtime_ns == t for p, t in first.items())  # finished models were not retrained
