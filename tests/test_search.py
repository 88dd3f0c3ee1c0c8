"""Search: Algorithm 1, its NNI strategy and tuner adapters, the in-process scorer, outputs, resume, bad input, nnictl.

Everything runs on a tiny supernet (hidden 32, 6 slots, ~500-token vocabulary) built by tests/conftest.py (the shared `tiny` fixture).
The nnictl tests are in test_search_nnictl.py.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from nni_lvbert.arch import Arch
from nni_lvbert.errors import UserError
from nni_lvbert.search.algorithm import Algorithm1, ConstraintError, EvolutionConfig
from tests.conftest import SLOTS, build_tiny_supernet, run_cli

REPO = Path(__file__).resolve().parent.parent
TYPES = ["dc", "sa", "ff", "glu"]
SMALL = ["--population", "6", "--iterations", "3", "--topk", "3", "--crossover", "3", "--mutation", "3",
         "--val-tokens", "1024", "--no-progress"]  # budget 6 + 2 * 6 = 18


pytestmark = pytest.mark.usefixtures("one_thread")


def choices(slots=SLOTS, values=TYPES):
    return {f"layer{i:02d}": list(values) for i in range(slots)}


def synthetic_score(arch: dict) -> float:
    """A deterministic landscape with a unique optimum: weights per (slot, type) plus a small hash term."""
    w = {"dc": 0.3, "sa": 0.5, "ff": 0.1, "glu": 0.2}
    s = sum(w[v] * (1 + 0.1 * i) for i, v in enumerate(arch.values()))
    return s + (hash(tuple(arch.values())) % 1000) * 1e-7


def drive(algo: Algorithm1, score=synthetic_score, on_generation=None):
    """Run an algorithm to the end; returns [(generation, arch dict)] in hand-out order."""
    out = []
    while True:
        batch = algo.ask_all()
        if not batch:
            assert algo.finished
            return out
        gen = algo.generation
        if on_generation:
            on_generation(gen, batch, list(algo.topk))
        for arch in batch:
            out.append((gen, arch))
            algo.tell(arch, score(arch))


# ----------------------------------------------------------------------------------------------- Algorithm 1
def test_budget_accounting_matches_the_paper():
    cfg = EvolutionConfig()
    assert cfg.budget == 50 + 19 * 50 == 1000
    assert cfg.iteration_of(0) == cfg.iteration_of(49) == 0
    assert cfg.iteration_of(50) == 1 and cfg.iteration_of(999) == 19
    assert EvolutionConfig(population=5, iterations=1).budget == 5
    with pytest.raises(UserError, match="budget is 0"):
        EvolutionConfig(iterations=0).validate()
    with pytest.raises(UserError, match="budget is 0"):
        EvolutionConfig(population=0).validate()


def test_algorithm1_populations_operators_topk_and_best():
    cfg = EvolutionConfig(population=20, iterations=6, topk=5, crossover=10, mutation=10, mutation_prob=0.1)
    algo = Algorithm1(choices(8), cfg, seed=3)
    topk_before: dict[int, list] = {}
    order = drive(algo, on_generation=lambda g, batch, topk: topk_before.setdefault(g, topk))
    archs = [tuple(a.values()) for _, a in order]
    assert len(archs) == cfg.budget == 120 and len(set(archs)) == 120  # never the same candidate twice
    sizes = [sum(1 for g, _ in order if g == n) for n in range(cfg.iterations)]
    assert sizes == [20, 10 + 10, 20, 20, 20, 20]
    scores = {tuple(a.values()): synthetic_score(a) for _, a in order}
    for gen in range(1, cfg.iterations):
        parents = topk_before[gen]
        # the top-k used to breed generation `gen` is the best k of everything scored before it
        earlier = [tuple(a.values()) for g, a in order if g < gen]
        assert parents == sorted(earlier, key=lambda a: (-scores[a], a))[: cfg.topk]
        kids = [tuple(a.values()) for g, a in order if g == gen]
        kinds = [algo.origin[k][0] for k in kids]
        assert kinds.count("crossover") + kinds.count("random") >= 10 and "mutation" in kinds
        for kid in kids:
            kind, *src = algo.origin[kid]
            if kind == "crossover":
                a, b = src
                assert a in parents and b in parents and a != b
                assert all(kid[s] in (a[s], b[s]) for s in range(8))
            elif kind == "mutation":
                assert src[0] in parents and kid != src[0]
    best_arch, best_score = algo.best()
    assert best_score == max(scores.values()) and scores[tuple(best_arch.values())] == best_score


def test_mutation_rate_and_crossover_mixing():
    algo = Algorithm1(choices(24), EvolutionConfig(mutation_prob=0.1), seed=0)
    parent = tuple(["dc"] * 24)
    changed = np.mean([sum(c != "dc" for c in algo.mutate(parent)) / 24 for _ in range(3000)])
    assert abs(changed - 0.1 * 3 / 4) < 0.01  # re-drawn with p, to one of 4 values
    a, b = tuple(["dc"] * 24), tuple(["sa"] * 24)
    from_b = np.mean([algo.crossover(a, b).count("sa") / 24 for _ in range(2000)])
    assert abs(from_b - 0.5) < 0.02


def test_algorithm1_is_seeded_and_resumable_from_its_state_dict():
    cfg = EvolutionConfig(population=8, iterations=4, topk=3, crossover=4, mutation=4)
    full = [tuple(a.values()) for _, a in drive(Algorithm1(choices(), cfg, seed=7))]
    assert full == [tuple(a.values()) for _, a in drive(Algorithm1(choices(), cfg, seed=7))]
    assert full != [tuple(a.values()) for _, a in drive(Algorithm1(choices(), cfg, seed=8))]
    algo = Algorithm1(choices(), cfg, seed=7)
    first = []
    for _ in range(13):  # stop in the middle of generation 1, with one candidate handed out but not told
        arch = algo.ask()
        first.append(tuple(arch.values()))
        algo.tell(arch, synthetic_score(arch))
    algo.ask()
    state = json.loads(json.dumps(algo.state_dict()))
    again = Algorithm1(choices(), cfg, seed=7)
    again.load_state_dict(state)
    rest = [tuple(a.values()) for _, a in drive(again)]
    assert first + rest == full
    with pytest.raises(UserError, match="other evolution settings"):
        Algorithm1(choices(), cfg, seed=8).load_state_dict(state)


def test_constraints_filter_candidates_and_impossible_constraints_fail_clearly():
    no_sa_first = lambda arch: arch["layer00"] != "sa"
    cfg = EvolutionConfig(population=10, iterations=3, topk=3, crossover=5, mutation=5)
    algo = Algorithm1(choices(), cfg, seed=0, accept=no_sa_first)
    order = drive(algo)
    assert len(order) == cfg.budget and all(a["layer00"] != "sa" for _, a in order)
    with pytest.raises(ConstraintError, match="no architecture satisfying the constraints"):
        Algorithm1(choices(), EvolutionConfig(max_rejections=500), accept=lambda a: False).ask()


def test_small_space_is_exhausted_without_duplicates():
    algo = Algorithm1(choices(2, ["dc", "sa"]), EvolutionConfig(population=3, iterations=5, topk=2, crossover=2,
                                                                mutation=2), seed=0)
    archs = [tuple(a.values()) for _, a in drive(algo)]
    assert sorted(archs) == sorted(set(archs)) and len(archs) == 4  # 2^2 architectures, each once


def test_tuner_adapter_runs_the_same_algorithm_under_concurrency():
    import nni

    from nni_lvbert.search.tuner import LVBertEvolutionTuner

    kw = {"population": 6, "iterations": 3, "topk": 2, "crossover": 2, "mutation": 3}
    reference = [tuple(a.values()) for _, a in drive(Algorithm1(choices(), EvolutionConfig(**kw), seed=5))]
    tuner = LVBertEvolutionTuner(seed=5, **kw)
    tuner.update_search_space({k: {"_type": "choice", "_value": v} for k, v in choices().items()})
    sent, running, next_id = [], {}, [0]

    def callback(pid, params):
        sent.append(tuple(params.values()))
        running[pid] = params

    def request(n):
        ids = list(range(next_id[0], next_id[0] + n))
        next_id[0] += n
        params = tuner.generate_multiple_parameters(ids, st_callback=callback)
        for pid, p in zip(ids, params):
            sent.append(tuple(p.values()))
            running[pid] = p

    request(4)  # 4 concurrent trials
    while running:
        pid = min(running)
        params = running.pop(pid)
        tuner.receive_trial_result(pid, params, {"default": synthetic_score(params)})
        tuner.trial_end(pid, True)
        request(1)  # the manager asks for a new trial whenever one ends
    assert sent == reference  # same candidates, same order, nothing lost at the generation barriers
    with pytest.raises(nni.NoMoreTrialError):
        tuner.generate_parameters(999)


# -------------------------------------------------------------------------------------------- supernet
def test_scores_are_inherited_weights_without_copying_the_supernet(tiny, scorer, monkeypatch):
    from nni_lvbert.data.validation import model_accuracy
    from nni_lvbert.search.trial import load_candidate
    from nni_lvbert.supernet.rundir import load_supernet

    ptrs = {n: p.data_ptr() for n, p in scorer.space.named_parameters()}
    deep = []
    monkeypatch.setattr(copy, "deepcopy", lambda *a, **k: deep.append(1))
    archs = ["csfgcs", "ssffgg", "gggggg"]
    got = [scorer.score(a) for a in archs]
    monkeypatch.undo()
    assert not deep and {n: p.data_ptr() for n, p in scorer.space.named_parameters()} == ptrs
    assert not scorer.space.training
    sn = load_supernet(tiny["run"])
    fresh, spec, cfg = sn.space, sn.spec, sn.cfg
    for arch, score in zip(archs, got):
        types = scorer.parse(arch)
        frozen = fresh.freeze({f"layer{i:02d}": t for i, t in enumerate(types)}).eval()
        assert model_accuracy(frozen, scorer.batches) == pytest.approx(score, abs=1e-6)
        fixed = load_candidate(tiny["run"], types, spec, cfg)  # the nnictl trial's model
        assert model_accuracy(fixed, scorer.batches) == pytest.approx(score, abs=1e-6)
    assert 0.0 < max(got) <= 1.0


def test_trial_loads_shared_layer_weights(tiny, tmp_path):
    """sharing='type' (ALBERT): the weight file keeps one copy per layer type; the trial still finds it."""
    from nni_lvbert.data.validation import model_accuracy
    from nni_lvbert.search.scorer import SupernetScorer
    from nni_lvbert.search.trial import load_candidate

    run = build_tiny_supernet(tmp_path / "shared", tiny["data"], steps=0, sharing="type", initializer_range=0.5)
    scorer = SupernetScorer(run, val_tokens=512, batch_size=32)
    spec, cfg = scorer.spec, scorer.cfg
    for arch in ("csfgcs", "gggsss"):
        types = scorer.parse(arch)
        assert model_accuracy(load_candidate(run, types, spec, cfg), scorer.batches) == scorer.score(arch)


def test_prefix_cache_gives_identical_scores_with_less_work(tiny):
    from nni_lvbert.search.scorer import SupernetScorer

    algo = Algorithm1(choices(), EvolutionConfig(population=10, iterations=3, topk=3, crossover=5, mutation=5), seed=1)
    cached = SupernetScorer(tiny["run"], val_tokens=1024, batch_size=32, prefix_cache=True)
    naive = SupernetScorer(tiny["run"], val_tokens=1024, batch_size=32, prefix_cache=False)
    diffs = []

    def score(arch):
        a, b = cached.score(list(arch.values())), naive.score(list(arch.values()))
        diffs.append(abs(a - b))
        return a

    drive(algo, score)
    assert len(diffs) == 30 and max(diffs) <= 1e-6
    assert cached.slots_computed < naive.slots_computed == 30 * SLOTS
    n = cached.computed
    cached.score("csfgcs")
    cached.score("csfgcs")
    assert cached.computed <= n + 1  # an architecture is never computed twice


def test_strategies_under_nas_experiment(scorer, tmp_path):
    from nni_lvbert.search.strategy import SupernetEvaluator, make_strategy, run_strategy

    cfg = EvolutionConfig(population=5, iterations=2, topk=2, crossover=2, mutation=2)
    for name in ("evolution", "regularized-evolution", "random"):
        seen = []
        # an Arch per sample
        evaluator = SupernetEvaluator(lambda arch, seen=seen: seen.append(arch) or scorer.score(arch))
        exp = run_strategy(scorer.space, make_strategy(name, cfg, seed=0), evaluator, cfg.budget,
                           tmp_path / name)
        assert len(seen) == cfg.budget == 9 and len(set(seen)) == 9, name
        best = exp.export_top_models(top_k=1, formatter="dict")[0]
        assert all(isinstance(a, Arch) for a in seen)
        assert scorer.score(best) == max(scorer.score(a) for a in seen)


# --------------------------------------------------------------------------------------------- CLI
def test_search_run_outputs(tiny, tmp_path, capsys):
    out = tmp_path / "s"
    code, stdout, _ = run_cli(["search", "run", "--supernet", str(tiny["run"]), "--search", "evolution",
                               "regularized-evolution", "random", "--out", str(out), *SMALL], capsys)
    assert code == 0, stdout
    best = json.loads((out / "best_arch.json").read_text())
    assert set(best["arch"]) == {f"layer{i:02d}" for i in range(SLOTS)}
    assert best["compact"] == "".join({"dc": "c", "sa": "s", "ff": "f", "glu": "g"}[best["arch"][k]]
                                      for k in sorted(best["arch"]))
    assert best["seed"] == 0 and best["strategy"] in ("evolution", "regularized-evolution", "random")
    assert best["supernet"]["run_dir"] == str(tiny["run"].resolve()) and best["params"]["backbone"] > 0
    assert set(best["strategies"]) == {"evolution", "regularized-evolution", "random"}
    lines = [json.loads(x) for x in (out / "history.jsonl").read_text().splitlines()]
    assert len(lines) == 3 * 18
    for name in best["strategies"]:
        mine = [r for r in lines if r["strategy"] == name]
        assert [r["index"] for r in mine] == list(range(18)) and len({r["arch"] for r in mine}) == 18
        assert [r["iteration"] for r in mine] == [0] * 6 + [1] * 6 + [2] * 6
        assert best["strategies"][name]["score"] == max(r["score"] for r in mine)
    assert best["score"] == max(r["score"] for r in lines)
    assert (out / "search_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # what the score rests on (issue 55.6): the supernet's steps, the validation tokens, the score's error, the top k
    ev = best["evidence"]
    distinct = sorted({r["arch"]: r["score"] for r in lines}.values(), reverse=True)[:10]
    assert ev["supernet_steps"] == best["supernet"]["steps"] and ev["masked_tokens"] == best["validation"][
        "masked_tokens"] and 0 < ev["score_se"] < 0.1
    assert ev["top_k_range"] == [distinct[-1], distinct[0]] and ev["top_k"] == len(distinct)
    assert ev["top_k_within_2se"] == sum(best["score"] - v <= 2 * ev["score_se"] for v in distinct) >= 1
    assert "evidence" in stdout and ev["note"] in stdout  # the summary printed says it too
    # LV-BERT §4.5: the searched architecture scaled to another size
    code, info, _ = run_cli(["info", "--arch", str(out / "best_arch.json"), "--size", "small",
                             "--space", str(tiny["space_file"]), "--json"], capsys)
    assert code == 0 and json.loads(info)["arch"] == best["compact"]
    # an existing output directory is never overwritten silently
    code, _, err = run_cli(["search", "run", "--supernet", str(tiny["run"]), "--out", str(out), *SMALL], capsys)
    assert code == 2 and "not empty" in err


def test_each_strategy_has_its_own_progress_bar_and_the_space_its_size(tiny, tmp_path, capsys):
    """Issue #41: a bar per strategy with its own budget (`random [2/2]: ... 18/18`), not one bar named after the
    first strategy counting all of them (`evolution: 26/36`); best_arch.json's space block names the size the
    supernet was trained at, not the space file's default."""
    import re

    from nni_lvbert.supernet.rundir import load_supernet

    out = tmp_path / "s"
    code, _, err = run_cli(["search", "run", "--supernet", str(tiny["run"]), "--search", "evolution", "random",
                            "--out", str(out), *[a for a in SMALL if a != "--no-progress"]], capsys)
    assert code == 0, err
    for label in ("evolution \\[1/2\\]", "random \\[2/2\\]"):
        assert re.search(label + r": +100%\|.*\| 18/18 ", err), err[-2000:]
    assert "/36 " not in err
    sn = load_supernet(tiny["run"])
    assert sn.meta["size"] != sn.spec.size  # the fixture's space file says another size than the supernet's
    best = json.loads((out / "best_arch.json").read_text())
    assert best["supernet"]["space"]["size"] == best["supernet"]["size"] == sn.meta["size"]


@pytest.mark.slow
def test_same_seed_same_result_and_resume_does_not_rescore(tiny, tmp_path, capsys, monkeypatch):
    from nni_lvbert.search import scorer as scorer_mod

    args = ["search", "run", "--supernet", str(tiny["run"]), "--search", "evolution", "random", *SMALL]
    assert run_cli([*args, "--out", str(tmp_path / "a")], capsys)[0] == 0
    assert run_cli([*args, "--out", str(tmp_path / "b"), "--seed", "0"], capsys)[0] == 0
    hist = lambda d: [(r["strategy"], r["arch"], r["score"]) for r in map(json.loads, (tmp_path / d / "history.jsonl").read_text().splitlines())]
    best = lambda d: json.loads((tmp_path / d / "best_arch.json").read_text())
    assert hist("a") == hist("b") and best("a")["compact"] == best("b")["compact"]
    # NNI's manifest entries of the two in-process experiments are kept in the run, not the user's nnictl list
    manifest = json.loads((tmp_path / "a" / "nni" / ".experiment").read_text())
    assert len(manifest) == 2 and all(e["status"] == "STOPPED" for e in manifest.values())

    computed = []
    original = scorer_mod.SupernetScorer.score

    def counting(self, arch):
        before = self.computed
        value = original(self, arch)
        if self.computed > before:
            computed.append(arch)
            if len(computed) == 11:  # interrupt in the middle of evolution's second generation
                raise KeyboardInterrupt
        return value

    monkeypatch.setattr(scorer_mod.SupernetScorer, "score", counting)
    code, _, err = run_cli([*args, "--out", str(tmp_path / "c")], capsys)
    assert code == 130 and not (tmp_path / "c" / "best_arch.json").exists()
    # one line, all it needs: the candidate being scored and the command
    assert err.strip().splitlines()[-1] == (f"interrupted at candidate 11; continue with: lvbert search run --out "
                                            f"{tmp_path / 'c'} --resume")
    first = len(computed)
    code, _, _ = run_cli([*args, "--out", str(tmp_path / "c"), "--resume"], capsys)
    assert code == 0
    assert hist("c") == hist("a") and best("c")["compact"] == best("a")["compact"]
    done, interrupted, resumed = computed[:first - 1], computed[first - 1], computed[first:]
    assert resumed[0] == interrupted  # only the candidate cut off mid-scoring is scored again
    assert len({tuple(a) for a in done + resumed}) == len(done) + len(resumed)
    assert len(done) + len(resumed) == len({r[1] for r in hist("a")})  # = an uninterrupted search's work
    code, _, err = run_cli([*args, "--out", str(tmp_path / "c"), "--resume", "--seed", "1"], capsys)
    assert code == 2 and "--seed 1 contradicts" in err and "(seed 0)" in err
    # the run directory alone is enough to resume (a finished search: nothing is scored again)
    n = len(computed)
    code, _, _ = run_cli(["search", "run", "--out", str(tmp_path / "c"), "--resume", "--no-progress"], capsys)
    assert code == 0 and len(computed) == n and best("c")["compact"] == best("a")["compact"]


def test_scores_on_an_explicit_cpu_device_equal_auto(tiny, scorer):
    from nni_lvbert.search.scorer import SupernetScorer

    cpu = SupernetScorer(tiny["run"], val_tokens=2048, batch_size=32, device="cpu")
    assert str(cpu.device) == "cpu" and cpu.stats()["device"] == "cpu"
    for arch in ("csfgcs", "ssssss", "gfcgfc"):
        assert cpu.score(arch) == pytest.approx(scorer.score(arch), abs=1e-6)


def test_the_offspring_follow_the_population_unless_given(tiny, tmp_path, capsys):
    """Issue 55.5: --population 10 --iterations 3 is 10 + 2 x (5 + 5) = 30 evaluations (LV-BERT's P/2 each), not
    110; the default population keeps 25 + 25; given N_cro / N_mut stay; the budget is printed before the search."""
    from nni_lvbert.search.algorithm import EvolutionConfig

    assert (EvolutionConfig().crossover, EvolutionConfig().mutation, EvolutionConfig().budget) == (25, 25, 1000)
    assert EvolutionConfig(population=10, iterations=3).budget == 30
    assert EvolutionConfig(population=7, iterations=2).budget == 7 + 3 + 4
    assert EvolutionConfig(population=10, iterations=3, crossover=25).budget == 10 + 2 * (25 + 5)
    out = tmp_path / "s"
    code, _, err = run_cli(["search", "run", "--supernet", str(tiny["run"]), "--search", "random", "--population",
                            "4", "--iterations", "2", "--topk", "2", "--out", str(out)], capsys)
    assert code == 0, err
    assert "search budget per strategy: P + (T-1)(N_cro + N_mut) = 4 + 1 x (2 + 2) = 8 evaluations" in err
    assert len((out / "history.jsonl").read_text().splitlines()) == 8
    assert json.loads((out / "best_arch.json").read_text())["budget"] == 8
