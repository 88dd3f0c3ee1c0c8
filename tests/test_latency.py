"""Latency on the user's device (issue #32): `lvbert search latency-table`, the predictor (embedding + sum of the
layers) and the search under `--max-latency-ms` with its Pareto front; bad tables and budgets get one `error:` line."""
from __future__ import annotations

import json

import pytest
import torch

from nni_lvbert.cli import main
from nni_lvbert.search.latency import FORMAT, LatencyModel, measure, pareto_front, table_key, write_table
from tests.conftest import SLOTS, free_port, one_error, run_cli
from tests.test_search import SMALL

pytestmark = pytest.mark.usefixtures("one_thread")
# synthetic milliseconds (deterministic budgets): the fastest 6-slot order is 1 + 6 * 1 = 7 ms, the slowest 31 ms
MS = {"embedding": 1.0, "head": 9.0, "dc": 5.0, "sa": 3.0, "ff": 1.0, "glu": 2.0}


def table_for(cfg, tmp_path, ms=MS, device="cpu", name="t.json"):
    """A latency table at the shape of `cfg` with the given times (measured on a tiny input, times replaced)."""
    table = measure(cfg, "tiny-test", "cpu", batch=1, seq=8, repeats=1, warmup=0)
    table.update(ms=dict(ms), device=device)
    write_table(table, tmp_path / name)
    return tmp_path / name


def test_latency_table_cli_measures_every_part_and_keys_tables(tmp_path, capsys):
    out = tmp_path / "lat.json"
    foreign = {**MS}
    content = {"format": FORMAT, "tables": {"cuda/torch-0.0": {"device": "cuda", "ms": foreign}}}
    out.write_text(json.dumps(content))
    args = ["search", "latency-table", "--size", "tiny", "--seq", "16", "--repeats", "3", "--warmup", "1",
            "--out", str(out), "--json"]
    code, stdout, _ = run_cli(args, capsys)
    shown = json.loads(stdout)
    key = table_key("cpu", torch.__version__)
    assert code == 0 and shown["key"] == key
    tables = json.loads(out.read_text())["tables"]
    assert set(tables) == {"cuda/torch-0.0", key}  # another device's table is kept
    mine = tables[key]
    assert set(mine["ms"]) == {"embedding", "head", "dc", "sa", "ff", "glu"} and min(mine["ms"].values()) > 0
    assert (mine["device"], mine["size"], mine["batch"], mine["seq"], mine["dtype"]) == ("cpu", "tiny", 1, 16,
                                                                                         "float32")
    assert mine["shape"]["hidden_size"] == 64 and mine["torch"] == torch.__version__
    # measured again with another batch: the entry of this device and torch version is replaced
    assert run_cli([*args[:-1], "--batch", "2"], capsys)[0] == 0
    assert json.loads(out.read_text())["tables"][key]["batch"] == 2
    predictor = LatencyModel(mine)
    assert predictor.predict(["dc", "sa", "sa"]) == pytest.approx(
        mine["ms"]["embedding"] + mine["ms"]["dc"] + 2 * mine["ms"]["sa"])
    # what a budget is chosen from (issue #41): the default space's orders, fastest to slowest, with percentiles
    spread = shown["orders_ms"]
    assert (spread["space"], spread["slots"]) == ("lvbert", 24)
    ms = shown["ms"]
    assert spread["fastest"] == pytest.approx(ms["embedding"] + 24 * min(ms[t] for t in ("dc", "sa", "ff", "glu")),
                                              abs=1e-3)
    assert spread["slowest"] == pytest.approx(ms["embedding"] + 24 * max(ms[t] for t in ("dc", "sa", "ff", "glu")),
                                              abs=1e-3)
    assert [spread[k] for k in ("fastest", "p10", "p25", "median", "p75", "p90", "slowest")] == sorted(
        spread[k] for k in ("fastest", "p10", "p25", "median", "p75", "p90", "slowest"))
    for bad, needle in [(["--seq", "0"], "--seq must be at least 1"), (["--size", "huge"], "unknown size 'huge'"),
                        (["--seq", "100000"], "exceeds the position table"), (["--device", "mps"], "mps")]:
        one_error(capsys, main(["search", "latency-table", "--repeats", "1", *bad]), needle)


@pytest.mark.parametrize("candidates,slots", [(("dc", "sa", "ff", "glu"), 6), (("dc", "sa"), 7), (("sa", "ff", "glu"), 5)])
def test_order_percentiles_are_those_of_every_order(candidates, slots):
    """latency-table's percentiles, summed over layer counts, are those of listing every order of the space."""
    import itertools
    import math

    from nni_lvbert.config import SpaceSpec
    from nni_lvbert.search.latency import QUANTILES, order_quantiles

    every = sorted(MS["embedding"] + sum(MS[t] for t in order) for order in itertools.product(candidates, repeat=slots))
    want = {name: every[max(0, math.ceil(q * len(every)) - 1)] for name, q in QUANTILES.items()}
    assert order_quantiles(MS, SpaceSpec(name="s", slots=slots, candidates=list(candidates))) == want


def test_pareto_front_keeps_only_undominated_points():
    points = [{"arch": a, "score": s, "predicted_ms": ms} for a, s, ms in
              [("a", 0.5, 10), ("b", 0.4, 12), ("c", 0.6, 15), ("d", 0.3, 8), ("e", 0.6, 20), ("a", 0.5, 10)]]
    assert [p["arch"] for p in pareto_front(points)] == ["d", "a", "c"]


def test_search_under_a_latency_budget_with_pareto_front(tiny, tmp_path, capsys):
    from nni_lvbert.supernet.rundir import load_supernet

    table = table_for(load_supernet(tiny["run"]).cfg, tmp_path)
    out = tmp_path / "s"
    budget = 16.0  # e.g. ffffff (7 ms) and gggggg (13) pass, cccccc (31) and ssssss (19) do not
    code, stdout, _ = run_cli(["search", "run", "--supernet", str(tiny["run"]), "--out", str(out), *SMALL,
                               "--max-latency-ms", str(budget), "--latency-table", str(table), "--pareto", "--json"],
                              capsys)
    assert code == 0, stdout
    history = [json.loads(x) for x in (out / "history.jsonl").read_text().splitlines()]
    predictor = LatencyModel({"ms": MS})
    assert len(history) == 18
    for r in history:
        assert r["predicted_ms"] == pytest.approx(predictor.predict(r["arch_dict"][k] for k in sorted(r["arch_dict"])))
        assert r["predicted_ms"] <= budget
    best = json.loads((out / "best_arch.json").read_text())
    constraints = best["constraints"]
    assert constraints["max_latency_ms"] == budget and constraints["rejected_over_latency"] > 0
    assert constraints["predicted_ms"] <= budget and constraints["latency_key"].startswith("cpu/")
    pareto = json.loads((out / "pareto.json").read_text())
    front = pareto["front"]
    assert front and pareto["evaluated"] == len({r["arch"] for r in history})
    assert [p["predicted_ms"] for p in front] == sorted(p["predicted_ms"] for p in front)
    assert [p["score"] for p in front] == sorted(p["score"] for p in front)  # slower only when better
    for r in history:  # nothing evaluated beats a point of the front on both axes
        assert not any(r["score"] > p["score"] and r["predicted_ms"] < p["predicted_ms"] for p in front)
    assert max(p["score"] for p in front) == best["score"]
    assert (out / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_latency_refusals(tiny, tmp_path, capsys):
    """One `error:` line, nothing written: a table of another size or device, a budget no order meets, a budget
    without a table, --pareto without a table, a file that is no table; `lvbert run` refuses before training."""
    from nni_lvbert.config import load_size
    from nni_lvbert.supernet.rundir import load_supernet

    cfg = load_supernet(tiny["run"]).cfg
    good = table_for(cfg, tmp_path)
    other_size = table_for(load_size("tiny"), tmp_path, name="tiny.json")
    gpu_only = table_for(cfg, tmp_path, device="cuda", name="gpu.json")
    junk = tmp_path / "junk.json"
    junk.write_text("{}")
    torn = tmp_path / "torn.json"
    torn.write_text(json.dumps({"format": FORMAT, "tables": {"cpu/torch-0": {"device": "cpu", "ms": {}}}}))
    search = ["search", "run", "--supernet", str(tiny["run"]), "--out", str(tmp_path / "out"), *SMALL]
    for extra, needle in [
        (["--latency-table", str(other_size), "--max-latency-ms", "50"], "was measured at size 'tiny-test'"),
        (["--latency-table", str(gpu_only), "--max-latency-ms", "50"], "not on cpu"),
        (["--latency-table", str(good), "--max-latency-ms", "6.5"],
         "no architecture of space 'tiny6' satisfies --max-latency-ms 6.5: the fastest is predicted at 7.000 ms"),
        (["--latency-table", str(good), "--max-latency-ms", "6.5"],  # the 4**6 orders of MS: p25 15 ms, median 17
         "a quarter of the orders are under 15 ms, half under 17 ms"),
        (["--latency-table", str(other_size), "--max-latency-ms", "50"],  # the fixture's shape is no named size
         "no size of sizes.yaml has that shape"),
        (["--max-latency-ms", "50"], "--max-latency-ms needs --latency-table"),
        (["--pareto"], "--pareto needs --latency-table"),
        (["--latency-table", str(junk)], "is not a latency table"),
        (["--latency-table", str(torn)], "its cpu entry lacks batch, device, ms, seq, shape, size, torch"),
        (["--latency-table", str(tmp_path / "none.json"), "--max-latency-ms", "9"], "latency table not found"),
    ]:
        one_error(capsys, main([*search, *extra]), needle)
        assert not (tmp_path / "out").exists()
    assert f"hidden_size 64 vs {cfg.hidden_size}" in one_error(
        capsys, main([*search, "--latency-table", str(other_size)]))
    # lvbert run: the table is checked against --size before the supernet trains
    out = tmp_path / "pipeline"
    code = main(["run", "--out", str(out), "--space", str(tiny["space_file"]), "--size", "small",
                 "--latency-table", str(other_size), "--max-latency-ms", "50", "--no-progress"])
    one_error(capsys, code, "was measured at size 'tiny-test'", "hidden_size 64 vs 256",  # the command to measure
              f"measure it with `lvbert search latency-table --size small --device cpu --batch 1 --seq 8 --threads "
              f"{torch.get_num_threads()} --out {other_size}`")  # it, with the size it needs (not `--size ...`)
    assert not out.exists()
    # the nnictl search: checked before nnictl starts (trials score on the CPU without --trial-gpus)
    code = main(["search", "nnictl", "--supernet", str(tiny["run"]), "--port", str(free_port()),
                 "--latency-table", str(gpu_only), "--max-latency-ms", "50"])
    one_error(capsys, code, "not on cpu")


def test_nnictl_tuner_rejects_orders_over_the_budget(tiny, tmp_path):
    from nni_lvbert.arch import Arch
    from nni_lvbert.search.tuner import LVBertEvolutionTuner
    from nni_lvbert.supernet.rundir import load_supernet

    table = table_for(load_supernet(tiny["run"]).cfg, tmp_path)
    tuner = LVBertEvolutionTuner(population=4, iterations=1, supernet=str(tiny["run"]), max_latency_ms=14,
                                 latency_table=str(table))
    fast, slow = Arch(["ff"] * SLOTS), Arch(["dc"] * SLOTS)  # 7 and 31 ms
    assert tuner.accept(fast.dict) and not tuner.accept(slow.dict)
