"""Supernet training through NasExperiment + SeededRandomOneShot: outputs, determinism, resume, DDP, refusals."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nni_lvbert.cli import main
from nni_lvbert.supernet.strategy import sample_path
from tests.conftest import kill9_mid_training, sigint_mid_training

REPO = Path(__file__).resolve().parent.parent
CHOICES = {f"layer{i:02d}": ["dc", "sa", "ff", "glu"] for i in range(6)}


def test_sample_path_is_function_of_seed_and_step():
    assert sample_path(CHOICES, 0, 5) == sample_path(CHOICES, 0, 5)
    paths = {tuple(sample_path(CHOICES, 0, s).values()) for s in range(50)}
    assert len(paths) > 40  # different steps give different paths
    assert sample_path(CHOICES, 1, 5) != sample_path(CHOICES, 0, 5) or sample_path(CHOICES, 1, 6) != sample_path(CHOICES, 0, 6)
    counts = {t: 0 for t in CHOICES["layer00"]}
    for s in range(2000):
        counts[sample_path(CHOICES, 3, s)["layer00"]] += 1
    assert all(400 < c < 600 for c in counts.values()), counts  # uniform


@pytest.fixture(scope="module")
def space_file(tmp_path_factory):
    f = tmp_path_factory.mktemp("space") / "small6.yaml"
    f.write_text("name: small6\nslots: 6\ncandidates: [dc, sa, ff, glu]\nsize: tiny\n")
    return f


def train_args(run_dir, space_file, cache_dir, steps=8, *extra):
    return ["supernet", "train", "--out", str(run_dir), "--space", str(space_file), "--size", "tiny",
            "--max-docs", "120", "--cache-dir", str(cache_dir), "--max-steps", str(steps), "--batch-size", "8",
            "--val-every", "4", "--val-batches", "2", "--ckpt-every", "2", "--warmup-steps", "2", "--no-progress",
            "--record-paths", *extra]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, space_file, cache_dir):
    run = tmp_path_factory.mktemp("runs") / "a"
    assert main(train_args(run, space_file, cache_dir)) == 0
    return run


def test_run_dir_contents_and_reload(trained):
    from nni_lvbert.supernet.rundir import load_supernet

    for f in ["supernet.safetensors", "space.yaml", "model_config.json", "meta.json", "checkpoints/last.ckpt",
              "tokenizer/tokenizer.json", "logs/csv/metrics.csv"]:
        assert (trained / f).exists(), f
    meta = json.loads((trained / "meta.json").read_text())
    assert meta["steps"] == 8 and len(meta["validation"]) == 2
    assert 0.0 <= meta["final_val_mlm_acc"] <= 1.0
    sn = load_supernet(trained)
    space, spec, cfg = sn.space, sn.spec, sn.cfg
    assert spec.slots == 6 and cfg.hidden_size == 64
    ckpt = torch.load(trained / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    for name, t in space.state_dict().items():
        torch.testing.assert_close(t, ckpt["state_dict"][f"training_module._model.{name}"], rtol=0, atol=0)
    # the recorded paths are exactly the seeded sequence
    paths = json.loads((trained / "ranks" / "rank0.json").read_text())["paths"]
    choices = {f"layer{i:02d}": spec.candidates for i in range(6)}
    from nni_lvbert.arch import to_compact

    assert [p for _, p in paths] == [to_compact(list(sample_path(choices, 0, s).values())) for s in range(8)]


def test_same_seed_same_weights(trained, tmp_path, space_file, cache_dir):
    from safetensors.torch import load_file

    assert main(train_args(tmp_path / "b", space_file, cache_dir)) == 0
    a, b = load_file(trained / "supernet.safetensors"), load_file(tmp_path / "b" / "supernet.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)


def test_compiled_supernet_trains_the_eager_weights(trained, tmp_path, space_file, cache_dir, capfd):
    """--compile: every candidate block of NNI's one-shot module compiled (aot_eager: graph capture, no C++ build),
    no graph break, the seeded paths give the eager run's weights up to float rounding."""
    from safetensors.torch import load_file
    from torch._dynamo.utils import counters

    torch._dynamo.reset()  # compiled code of an earlier test would be reused: no new graphs to count
    counters.clear()
    assert main(train_args(tmp_path / "c", space_file, cache_dir, 8, "--compile", "aot_eager")) == 0
    assert "--compile aot_eager: 24 layer blocks compiled" in capfd.readouterr().err  # 6 slots x 4 candidates
    assert counters["stats"]["unique_graphs"] >= 4 and not counters["graph_break"], dict(counters["graph_break"])
    a, b = load_file(trained / "supernet.safetensors"), load_file(tmp_path / "c" / "supernet.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-5)


def test_refuses_non_empty_run_dir(trained, space_file, cache_dir, capsys):
    assert main(train_args(trained, space_file, cache_dir)) == 2
    err = capsys.readouterr().err
    assert "not empty" in err and "--resume" in err and "--overwrite" in err


def test_resume_without_checkpoint_is_clear(tmp_path, space_file, cache_dir, capsys):
    assert main(train_args(tmp_path / "none", space_file, cache_dir, 8, "--resume")) == 2
    assert "nothing to resume" in capsys.readouterr().err


def test_load_supernet_rejects_other_things(tmp_path):
    from nni_lvbert.errors import UserError
    from nni_lvbert.supernet.rundir import load_supernet

    with pytest.raises(UserError, match="not found"):
        load_supernet(tmp_path / "missing")
    with pytest.raises(UserError, match="not a finished supernet run"):
        load_supernet(tmp_path)


def _cli(*args):
    return [sys.executable, "-m", "nni_lvbert.cli", *args]


def _env():
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


@pytest.fixture(scope="module")
def trained_fair(tmp_path_factory, space_file, cache_dir):
    run = tmp_path_factory.mktemp("runs") / "fair"
    assert main(train_args(run, space_file, cache_dir, 8, "--sampling", "fair")) == 0
    return run


def test_fair_sampling_trains_every_choice_of_every_slot_once_per_step(trained_fair):
    """--sampling fair: per step 4 paths whose choices in each slot are a permutation of the 4 types (FairNAS), the
    seeded sequence of `fair_paths`, recorded in meta.json."""
    from nni_lvbert.supernet.strategy import fair_paths

    assert json.loads((trained_fair / "meta.json").read_text())["sampling"] == "fair"
    paths = json.loads((trained_fair / "ranks" / "rank0.json").read_text())["paths"]
    assert [s for s, _ in paths] == [s for s in range(8) for _ in range(4)]
    for step in range(8):
        group = [p for s, p in paths if s == step]
        for slot in range(6):
            assert sorted(p[slot] for p in group) == sorted("csfg"), (step, slot)
    choices = {f"layer{i:02d}": ["dc", "sa", "ff", "glu"] for i in range(6)}
    from nni_lvbert.arch import to_compact

    assert [p for _, p in paths] == [to_compact(list(p.values())) for s in range(8) for p in fair_paths(choices, 0, s)]
    assert fair_paths(choices, 0, 3) != fair_paths(choices, 0, 4) and fair_paths(choices, 1, 3) != fair_paths(
        choices, 0, 3)


def test_fair_paths_cover_every_choice_and_refuse_uneven_slots():
    from nni_lvbert.supernet.strategy import fair_paths

    choices = {"a": ["x", "y", "z"], "b": ["x", "y", "z"]}
    paths = fair_paths(choices, 7, 11)
    assert len(paths) == 3 and all(sorted(p[k] for p in paths) == ["x", "y", "z"] for k in choices)
    assert fair_paths(choices, 7, 11) == paths  # a function of (seed, step): a resumed run replays it
    with pytest.raises(ValueError, match="same number of choices"):
        fair_paths({"a": ["x", "y"], "b": ["x"]}, 0, 0)


@pytest.mark.slow
@pytest.mark.parametrize("sampling", ["spos", "fair"])
def test_resume_after_kill9_replays_the_uninterrupted_run(tmp_path, trained, trained_fair, space_file, cache_dir,
                                                          sampling):
    """Kill -9 mid-run, --resume, and end with the very weights and path sequence of the uninterrupted run."""
    trained = trained if sampling == "spos" else trained_fair
    run = tmp_path / "killed"
    steps = 8
    killed_at = kill9_mid_training(train_args(run, space_file, cache_dir, steps, "--ckpt-every", "1", "--sampling",
                                              sampling),
                                   run / "checkpoints" / "last.ckpt", 3, steps)
    assert killed_at is not None, "training finished before it could be killed"
    assert not (run / "supernet.safetensors").exists()
    before = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    seconds_before = before["callbacks"]["ValidationHistory"]["train_seconds"]
    # exactly the docs' resume line (docs/guide/supernet.md): every option comes from the run directory
    assert main(["supernet", "train", "--out", str(run), "--resume"]) == 0
    # the killed session's validations and time are kept (the checkpoint carries them)
    full, resumed_meta = (json.loads((d / "meta.json").read_text()) for d in (trained, run))
    assert [v["step"] for v in resumed_meta["validation"]] == [v["step"] for v in full["validation"]]
    for a_, b_ in zip(full["validation"], resumed_meta["validation"]):
        assert abs(a_["val_mlm_acc"] - b_["val_mlm_acc"]) < 1e-4
    assert seconds_before > 0 and resumed_meta["train_seconds"] > seconds_before

    from safetensors.torch import load_file

    a, b = load_file(trained / "supernet.safetensors"), load_file(run / "supernet.safetensors")
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6)
    resumed = json.loads((run / "ranks" / "rank0.json").read_text())["paths"]
    full = json.loads((trained / "ranks" / "rank0.json").read_text())["paths"]
    assert resumed and resumed == [e for e in full if e[0] >= resumed[0][0]]  # the same paths from there on
    assert resumed[0][0] >= killed_at - 1


def test_ctrl_c_keeps_the_step_and_its_printed_command_ends_like_the_uninterrupted_run(tmp_path, trained, space_file,
                                                                                       cache_dir):
    """A real SIGINT mid-training: the step in progress is kept (checkpoint), one line names it and the command to
    continue (exit 130, no NNI/Lightning error lines), and that command, run as printed, ends with the uninterrupted
    run's weights."""
    import shlex

    from safetensors.torch import load_file

    run = tmp_path / "cut"
    seen, rc, err = sigint_mid_training(train_args(run, space_file, cache_dir), run / "checkpoints" / "last.ckpt", 2, 8)
    assert seen is not None, "training finished before Ctrl-C"
    assert rc == 130, err[-2000:]
    lines = err.strip().splitlines()
    step = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"]
    assert seen <= step < 8  # the checkpoint holds the step the run was in, not the one before
    assert lines[-1] == f"interrupted at step {step}; continue with: lvbert supernet train --out {run} --resume"
    assert not any(w in err for w in ("ERROR", "Traceback", "fails to be executed", "KeyboardInterrupt")), err
    assert not (run / "meta.json").exists()
    words = shlex.split(lines[-1].split("continue with: ", 1)[1])
    assert words[0] == "lvbert" and main(words[1:]) == 0
    a, b = load_file(trained / "supernet.safetensors"), load_file(run / "supernet.safetensors")
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6)


def test_resume_of_a_run_stopped_before_its_first_checkpoint_starts_it_again(tmp_path, trained, space_file,
                                                                            cache_dir, capsys):
    """options.json written, no checkpoint yet (Ctrl-C in data preparation or set-up): --resume starts it from step
    0 with its stored options, saying so in one line, and ends as the uninterrupted run."""
    import shutil

    from safetensors.torch import load_file

    run = tmp_path / "early"
    run.mkdir()
    shutil.copy(trained / "options.json", run / "options.json")
    stored = json.loads((run / "options.json").read_text())
    (run / "options.json").write_text(json.dumps({**stored, "out": str(run)}))
    assert main(["supernet", "train", "--out", str(run), "--resume"]) == 0
    err = capsys.readouterr().err
    assert f"note: {run} has no checkpoints/last.ckpt yet: starting it again from the beginning" in err
    a, b = load_file(trained / "supernet.safetensors"), load_file(run / "supernet.safetensors")
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("sampling", ["spos", "fair"])
def test_ddp_two_cpu_ranks_train_same_paths(tmp_path, space_file, cache_dir, sampling):
    """Both ranks train the same path(s) each step (fair: the same 4 permutation paths, every parameter used) and
    end with the same weights."""
    run = tmp_path / "ddp"
    args = train_args(run, space_file, cache_dir, 4, "--accelerator", "cpu", "--devices", "2", "--sampling", sampling)
    res = subprocess.run(_cli(*args), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    r0 = json.loads((run / "ranks" / "rank0.json").read_text())
    r1 = json.loads((run / "ranks" / "rank1.json").read_text())
    assert r0["paths"] == r1["paths"] and len(r0["paths"]) == 4 * (4 if sampling == "fair" else 1)
    assert r0["weights_sha256"] == r1["weights_sha256"]
    from nni_lvbert.supernet.rundir import load_supernet
    from nni_lvbert.trainer import state_digest

    space = load_supernet(run).space
    assert state_digest(space) == r0["weights_sha256"]
    assert json.loads((run / "meta.json").read_text())["world_size"] == 2


def test_resume_refuses_contradicting_options_and_allows_hardware_ones(tmp_path, trained, space_file, cache_dir,
                                                                      capsys):
    """On --resume a stored option given with another value is one line naming both; --devices etc. may change."""
    import shutil

    run = tmp_path / "copy"
    shutil.copytree(trained, run)
    capsys.readouterr()
    for flag, value, stored in (("--size", "small", "size tiny"), ("--max-steps", "99", "max_steps 8"),
                                ("--seed", "3", "seed 0"), ("--lr", "0.5", "lr 0.002"),
                                ("--space", "lvbert", f"space {space_file}")):
        assert main(["supernet", "train", "--out", str(run), "--resume", flag, value]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and f"{flag} {value}" in err[0] and stored in err[0], err
    # the same value again, and options that may change between sessions, are accepted (nothing left to train)
    assert main(["supernet", "train", "--out", str(run), "--resume", "--size", "tiny", "--max-steps", "8",
                 "--devices", "1", "--accelerator", "cpu", "--no-progress"]) == 0
    stored = json.loads((run / "options.json").read_text())
    assert stored["size"] == "tiny" and stored["max_steps"] == 8 and stored["accelerator"] == "cpu"
    assert not stored["progress"]


def test_output_files_get_umask_permissions(trained):
    mask = os.umask(0)
    os.umask(mask)
    for name in ("meta.json", "options.json", "model_config.json", "space.yaml", "supernet.safetensors"):
        assert (trained / name).stat().st_mode & 0o777 == 0o666 & ~mask, name


def test_data_seed_is_not_the_training_seed(tmp_path, trained, space_file, cache_dir):
    """Supernets trained with other seeds score the same masked validation tokens (same prepared data)."""
    other = tmp_path / "seed1"
    assert main(train_args(other, space_file, cache_dir, 2, "--seed", "1")) == 0
    a, b = (json.loads((r / "meta.json").read_text())["data"] for r in (trained, other))
    assert a["path"] == b["path"] and a["settings"]["seed"] == b["settings"]["seed"] == 0
    assert main(train_args(tmp_path / "ds", space_file, cache_dir, 2, "--data-seed", "5")) == 0
    c = json.loads((tmp_path / "ds" / "meta.json").read_text())["data"]
    assert c["path"] != a["path"] and c["settings"]["seed"] == 5


def test_supernet_trains_on_prepared_data(tmp_path, trained, capsys):
    data = json.loads((trained / "meta.json").read_text())["data"]["path"]
    run = tmp_path / "d"
    assert main(["supernet", "train", "--out", str(run), "--data", data, "--space", str(trained / "space.yaml"),
                 "--size", "tiny", "--max-steps", "2", "--batch-size", "8", "--val-every", "2", "--val-batches", "1",
                 "--no-progress"]) == 0
    assert json.loads((run / "meta.json").read_text())["data"]["path"] == data
    assert main(["supernet", "train", "--out", str(tmp_path / "e"), "--data", data, "--corpus", "x.txt"]) == 2
    assert "--data gives prepared data" in capsys.readouterr().err


def test_run_state_and_figures_are_the_one_policy(tmp_path):
    """RunDir.state(): done (finished marker) > resume (resume marker) > fresh; save_figure writes atomically with
    the umask's permissions and leaves no temp file, also when drawing fails."""
    import pytest

    from nni_lvbert.atomic import pyplot, save_figure
    from nni_lvbert.rundir import RunDir

    run = RunDir(tmp_path / "r")
    assert run.state() == "fresh"
    (tmp_path / "r" / "checkpoints").mkdir(parents=True)
    (tmp_path / "r" / "checkpoints" / "last.ckpt").write_text("x")
    assert run.state() == "resume" and run.state(resume_marker="search.json") == "fresh"
    (tmp_path / "r" / "meta.json").write_text("{}")
    assert run.state() == "done" and run.state(done="best_arch.json") == "resume"
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    save_figure(fig, tmp_path / "f.png", dpi=50)
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "f.png").stat().st_mode & 0o777 == 0o666 & ~mask
    fig, ax = plt.subplots()
    with pytest.raises(ValueError):
        save_figure(fig, tmp_path / "g.png", dpi=-1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.png", "r"]


def test_a_supernet_not_ending_on_a_validation_step_validates_at_its_last_step(tmp_path, space_file, cache_dir):
    run = tmp_path / "sn"
    assert main(train_args(run, space_file, cache_dir, 6)) == 0  # validations every 4 steps: 4, then 6 at the end
    meta = json.loads((run / "meta.json").read_text())
    assert [h["step"] for h in meta["validation"]] == [4, 6]
    assert meta["final_val_mlm_acc"] == meta["validation"][-1]["val_mlm_acc"]


@pytest.mark.slow
def test_few_shot_split_warm_starts_sub_supernets_and_routes_orders(trained, tmp_path, cache_dir, capsys):
    """`supernet few-shot --split slot:2`: one sub-supernet per layer type, warm-started from the one-shot run, every
    sampled path keeping its type in slot 2; scoring and search route an order to the sub-supernet owning it."""
    from safetensors.torch import load_file

    from nni_lvbert.search.scorer import SupernetScorer, open_scorer

    out = tmp_path / "few"
    args = ["supernet", "few-shot", "--warm-start", str(trained), "--split", "slot:2", "--out", str(out),
            "--max-steps", "3", "--batch-size", "8", "--val-every", "3", "--val-batches", "1", "--ckpt-every", "3",
            "--warmup-steps", "1", "--no-progress", "--record-paths", "--cache-dir", str(cache_dir), "--json"]
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    spec = json.loads((out / "fewshot.json").read_text())
    assert spec["owners"] == {t: f"sub-{t}" for t in ("dc", "sa", "ff", "glu")} and printed["owners"] == spec["owners"]
    assert spec["total_steps"] == 8 + 4 * 3 and spec["core_minutes"] > 0
    base = load_file(trained / "supernet.safetensors")
    for choice, sub in spec["owners"].items():
        meta = json.loads((out / sub / "meta.json").read_text())
        assert meta["fixed"] == {"layer02": choice} and meta["steps"] == 3
        paths = json.loads((out / sub / "ranks" / "rank0.json").read_text())["paths"]
        assert len(paths) == 3 and all(p[2] == {"dc": "c", "sa": "s", "ff": "f", "glu": "g"}[choice] for _, p in paths)
        weights = load_file(out / sub / "supernet.safetensors")
        untrained = [k for k in base if k.startswith("layers.2.") and not k.startswith(f"layers.2.{choice}.")]
        assert untrained and all(torch.equal(weights[k], base[k]) for k in untrained)  # warm start, never trained
        assert any(not torch.equal(weights[k], base[k]) for k in base if k.startswith(f"layers.2.{choice}."))
    scorer = open_scorer(out, val_tokens=512, device="cpu", prefix_cache=False)
    for arch in ("ccsfgs", "ccffgs"):
        owner = SupernetScorer(out / f"sub-{scorer.parse(arch)[2]}", val_tokens=512, device="cpu")
        assert scorer.score(arch) == owner.score(arch)
    assert main(["supernet", "few-shot", "--out", str(out), "--resume", "--no-progress"]) == 0  # done: kept
    search = tmp_path / "search"
    assert main(["search", "run", "--supernet", str(out), "--out", str(search), "--population", "4", "--iterations",
                 "2", "--topk", "2", "--crossover", "2", "--mutation", "2", "--val-tokens", "512",
                 "--no-progress"]) == 0
    best = json.loads((search / "best_arch.json").read_text())
    assert best["supernet"]["fewshot"]["split"] == "slot:2" and best["supernet"]["steps"] == 20
