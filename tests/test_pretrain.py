"""`lvbert pretrain` end to end (tiny): outputs, Hugging Face directories, exact resume after kill -9, refusals,
the `lvbert run --pretrain` stage. The objective's pieces: test_pretrain_objectives.py."""
import json
import math
from pathlib import Path

import pytest
import torch

from nni_lvbert.cli import main
from tests.conftest import kill9_mid_training, one_error_line, sigint_mid_training
from tests.test_pretrain_objectives import batch_for


def pretrain_args(out, cache_dir, *extra, steps=6, arch="csfgsf", objective="electra"):
    # --lr 2e-3 (tiny MLM's; ELECTRA's tiny preset is 5e-4): at 5e-4 a 6-step discriminator has validation logits
    # near 0, so a resumed run's precision (defined only with a positive prediction) can appear in one run only
    return ["pretrain", "--out", str(out), "--arch", arch, "--size", "tiny", "--objective", objective,
            "--max-docs", "120", "--cache-dir", str(cache_dir), "--max-steps", str(steps), "--batch-size", "8",
            "--val-every", "3", "--val-batches", "2", "--ckpt-every", "2", "--warmup-steps", "2", "--lr", "2e-3",
            "--no-progress", *extra]


@pytest.fixture(scope="module")
def electra_run(tmp_path_factory, cache_dir):
    out = tmp_path_factory.mktemp("pretrain") / "electra"
    assert main(pretrain_args(out, cache_dir, "--sop", "--dropout", "0.1")) == 0
    return out


def test_mlm_batches_without_sop_are_the_supernets(electra_run):
    from nni_lvbert.data import MLMDataModule
    from nni_lvbert.pretrain.data import PretrainDataModule

    data = json.loads((electra_run / "meta.json").read_text())["data"]["path"]
    a = next(iter(MLMDataModule(data, batch_size=4, seed=2).train_dataloader()))
    b = next(iter(PretrainDataModule(data, objective="mlm", sop=False, data_seed=0, batch_size=4,
                                     seed=2).train_dataloader()))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) if torch.is_tensor(a[k]) else a[k] == b[k] for k in a)


def load_objective(run):
    from safetensors.torch import load_model

    from nni_lvbert.config import ModelConfig
    from nni_lvbert.pretrain.objectives import build_objective

    meta = json.loads((run / "meta.json").read_text())
    cfg = ModelConfig.from_dict(json.loads((run / "model_config.json").read_text()))
    model = build_objective(meta["objective"], cfg, meta["arch"], sop=meta["sop"],
                            generator_fraction=meta["options"]["generator_fraction"] or 0.25)
    load_model(model, str(run / "pretrain.safetensors"))
    return model.eval(), cfg


def test_electra_run_outputs_and_hf_directories(electra_run):
    from transformers import AutoModelForMaskedLM, AutoModelForPreTraining

    import nni_lvbert  # noqa: F401  (registers the Auto classes)

    meta = json.loads((electra_run / "meta.json").read_text())
    assert meta["steps"] == 6 and meta["objective"] == "electra" and meta["sop"] and meta["arch"] == "csfgsf"
    assert [v["step"] for v in meta["validation"]] == [3, 6]
    for key in ("val_gen_mlm_acc", "val_disc_loss", "val_disc_acc", "val_disc_auc", "val_sop_acc", "val_loss"):
        assert key in meta["final"], key
    assert meta["generator_config"]["hidden_size"] == 16
    for f in ("options.json", "arch.json", "generator_config.json", "pretrain.safetensors", "pretrain_curve.png",
              "checkpoints/last.ckpt", "logs/csv/metrics.csv", "hf/config.json", "hf-generator/model.safetensors"):
        assert (electra_run / f).is_file(), f
    model, cfg = load_objective(electra_run)
    disc = AutoModelForPreTraining.from_pretrained(electra_run / "hf").eval()
    gen = AutoModelForMaskedLM.from_pretrained(electra_run / "hf-generator").eval()
    assert type(disc).__name__ == "LVBertForPreTraining" and type(gen).__name__ == "LVBertForMaskedLM"
    assert disc.config.layer_types == ["dc", "sa", "ff", "glu", "sa", "ff"] and gen.config.hidden_size == 16
    batch = batch_for(cfg)
    args = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    real = args[1].bool()  # the HF models skip padding (layers/rows.py), the project's do not: real tokens only
    with torch.no_grad():
        close(disc(*args).logits[real], model.disc_head(model.discriminator.encode(*args))[real])
        close(gen(*args).logits[real], model.generator.head(model.generator.encode(*args))[real])
    roles = [json.loads((electra_run / d / "lvbert.json").read_text())["role"] for d in ("hf", "hf-generator")]
    assert "discriminator" in roles[0] and "generator" in roles[1]


def test_mlm_run_with_type_sharing(tmp_path, cache_dir):
    from transformers import AutoModelForMaskedLM

    import nni_lvbert  # noqa: F401

    out = tmp_path / "mlm"
    assert main(pretrain_args(out, cache_dir, "--sharing", "type", steps=3, arch="sfsf", objective="mlm")) == 0
    meta = json.loads((out / "meta.json").read_text())
    assert "val_mlm_acc" in meta["final"] and not (out / "hf-generator").exists()
    model, cfg = load_objective(out)
    assert model.mlm.layers[0] is model.mlm.layers[2]
    hf = AutoModelForMaskedLM.from_pretrained(out / "hf").eval()
    assert hf.config.sharing == "type"
    batch = batch_for(cfg)
    args = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    real = args[1].bool()
    with torch.no_grad():
        close(hf(*args).logits[real], model.mlm(*args).logits[real])


def test_an_interrupted_run_resumes_after_it_moved_and_its_model_config_file_is_gone(tiny, tmp_path):
    """A model store's run resumes after the store moved and took its --model-config file along: a resumed run
    reads its own model_config.json when the file it was started with is gone."""
    import shutil

    config = tmp_path / "shape.json"
    config.write_text(json.dumps({"hidden_size": 32, "embedding_size": 32, "ff_size": 64, "num_heads": 2,
                                  "max_length": 32}))
    first = tmp_path / "a" / "run"
    assert main(["pretrain", "--arch", "csfs", "--size", "tiny", "--objective", "mlm", "--data",
                 str(tiny["data"].path), "--model-config", str(config), "--max-steps", "4", "--batch-size", "8",
                 "--val-every", "4", "--val-batches", "1", "--ckpt-every", "2", "--warmup-steps", "1",
                 "--no-progress", "--out", str(first)]) == 0
    (first / "meta.json").unlink()  # as if killed after its last checkpoint
    moved = tmp_path / "b" / "run"
    shutil.move(str(first.parent), str(moved.parent))
    config.unlink()
    assert main(["pretrain", "--out", str(moved), "--resume", "--no-progress"]) == 0
    assert json.loads((moved / "meta.json").read_text())["steps"] == 4
    assert json.loads((moved / "model_config.json").read_text())["hidden_size"] == 32


def close(got, ref):
    """Equal up to float rounding: packed real tokens may go through other matmul blockings than the padded batch."""
    torch.testing.assert_close(got, ref, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("change,message", [
    ({"--arch": "xyzq"}, "unknown layer letter"),
    ({"--size": "huge"}, "unknown size"),
    ({"--objective": "bert"}, "unknown objective"),
    ({"--arch": None}, "give the architecture"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, cache_dir, capsys, change, message):
    args = pretrain_args(tmp_path / "out", cache_dir)
    for flag, value in change.items():
        i = args.index(flag)
        args[i:i + 2] = [] if value is None else [flag, value]
    assert main(args) == 2
    assert message in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_bad_combinations(tmp_path, cache_dir, capsys):
    out = tmp_path / "out"
    assert main(pretrain_args(out, cache_dir, "--generator-fraction", "0.5", objective="mlm")) == 2
    assert "--generator-fraction apply(ies) to --objective electra only" in one_error_line(capsys.readouterr().err)
    assert main(pretrain_args(out, cache_dir, "--generator-fraction", "0")) == 2
    assert "--generator-fraction must be in (0, 1]" in one_error_line(capsys.readouterr().err)
    assert main(pretrain_args(out, cache_dir, "--resume")) == 2
    assert "nothing to resume" in one_error_line(capsys.readouterr().err)
    assert not out.exists()


def test_refuses_non_empty_and_contradicting_resume(electra_run, cache_dir, capsys):
    assert main(pretrain_args(electra_run, cache_dir)) == 2
    assert "not empty" in one_error_line(capsys.readouterr().err)
    assert main(["pretrain", "--out", str(electra_run), "--resume", "--objective", "mlm"]) == 2
    assert "--objective mlm contradicts" in one_error_line(capsys.readouterr().err)
    assert main(["pretrain", "--out", str(electra_run), "--resume", "--arch", "sfsfsf"]) == 2
    assert "--arch sfsfsf contradicts" in one_error_line(capsys.readouterr().err)


def test_a_run_keeps_the_preset_values_it_started_with(electra_run, monkeypatch):
    from nni_lvbert.pretrain.train import KIND, PretrainOptions
    from nni_lvbert.training import begin

    stored = json.loads((electra_run / "options.json").read_text())
    assert stored["generator_fraction"] == 0.25 and stored["lr"] == 2e-3  # the preset's value, and a given one
    assert stored["precision"] is None  # hardware options stay open: the next session's machine decides
    tiny = PretrainOptions.PRESETS["tiny-electra"]
    monkeypatch.setitem(PretrainOptions.PRESETS, "tiny-electra", {**tiny, "generator_fraction": 0.5})
    resumed = begin(PretrainOptions(out=str(electra_run), resume=True), KIND)
    assert resumed.resolved("generator_fraction") == 0.25  # a later version's preset does not reach an old run


def test_resume_refuses_data_tokenized_otherwise(electra_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "copy"
    shutil.copytree(electra_run, run)
    tok = json.loads((run / "tokenizer" / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = list(vocab)[100:102]
    vocab[a], vocab[b] = vocab[b], vocab[a]  # same tokens, other ids
    (run / "tokenizer" / "tokenizer.json").write_text(json.dumps(tok))
    before = (run / "checkpoints" / "last.ckpt").stat().st_mtime_ns
    assert main(["pretrain", "--out", str(run), "--resume"]) == 2
    assert "tokenized with another tokenizer" in one_error_line(capsys.readouterr().err)
    assert (run / "checkpoints" / "last.ckpt").stat().st_mtime_ns == before


@pytest.mark.parametrize("objective", ["electra", "mlm"])
def test_compile_trains_the_eager_weights_without_graph_breaks(objective, tmp_path, cache_dir, capsys):
    """--compile BACKEND compiles the whole objective for training steps as one graph, padded batches included
    (aot_eager here: dynamo's graph capture and AOT autograd, with no C++ build; the default inductor is for
    GPUs), its masked positions padded to a multiple of 64. MLM: the eager run's weights, up to float rounding
    (ELECTRA's Gumbel noise comes from torch.rand when compiled, from numpy's generator on an eager CPU)."""
    from safetensors.torch import load_file
    from torch._dynamo.utils import counters

    eager, compiled = tmp_path / "eager", tmp_path / "compiled"
    assert main(pretrain_args(eager, cache_dir, steps=3, objective=objective)) == 0
    torch._dynamo.reset()  # compiled code of an earlier test would be reused: no new graphs to count
    counters.clear()
    capsys.readouterr()
    assert main(pretrain_args(compiled, cache_dir, "--compile", "aot_eager", steps=3, objective=objective)) == 0
    name = {"electra": "ElectraObjective", "mlm": "MLMObjective"}[objective]
    assert f"--compile aot_eager: the whole {name} for training steps\n" in capsys.readouterr().err
    assert 1 <= counters["stats"]["unique_graphs"] <= 3  # one graph (recompiled for new shapes)
    assert not counters["graph_break"], dict(counters["graph_break"])
    if objective == "electra":
        assert json.loads((compiled / "meta.json").read_text())["steps"] == 3
        return
    a, b = load_file(eager / "pretrain.safetensors"), load_file(compiled / "pretrain.safetensors")
    assert a.keys() == b.keys()  # nn.Module.compile: parameter names unchanged
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-5)
    capsys.readouterr()
    assert main(pretrain_args(tmp_path / "bad", cache_dir, "--compile", "nonesuch")) == 2
    assert "--compile nonesuch: not a torch.compile backend" in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["kill -9", "ctrl-c"])
def test_resume_after_kill9_or_ctrl_c_ends_with_the_uninterrupted_weights(tmp_path, electra_run, cache_dir, how):
    """kill -9 (or a real SIGINT) mid-run (dropout on, SOP on), then exactly `lvbert pretrain --out D --resume` (the
    command a Ctrl-C prints): the very weights."""
    from safetensors.torch import load_file

    run = tmp_path / "killed"
    args = pretrain_args(run, cache_dir, "--sop", "--dropout", "0.1", "--ckpt-every", "1" if how == "kill -9" else "2")
    if how == "kill -9":
        killed_at = kill9_mid_training(args, run / "checkpoints" / "last.ckpt", 2, 6)
    else:
        killed_at, rc, err = sigint_mid_training(args, run / "checkpoints" / "last.ckpt", 2, 6)
        assert rc == 130 and "Traceback" not in err and "Detected KeyboardInterrupt" not in err, err[-2000:]
        step = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"]
        assert err.strip().splitlines()[-1] == (f"interrupted at step {step}; continue with: lvbert pretrain --out "
                                                f"{run} --resume")
    assert killed_at is not None, "training finished before it could be killed"
    assert not (run / "meta.json").exists()
    assert main(["pretrain", "--out", str(run), "--resume"]) == 0
    a, b = load_file(electra_run / "pretrain.safetensors"), load_file(run / "pretrain.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6)
    va = json.loads((electra_run / "meta.json").read_text())["final"]
    vb = json.loads((run / "meta.json").read_text())["final"]
    assert va.keys() == vb.keys() and all(math.isclose(va[k], vb[k], rel_tol=1e-4, abs_tol=1e-6) for k in va)


@pytest.mark.slow
def test_lvbert_run_pretrain_stage(tmp_path, cache_dir, capsys):
    out = tmp_path / "run"
    args = ["run", "--out", str(out), "--size", "tiny", "--max-docs", "120", "--cache-dir", str(cache_dir),
            "--supernet-max-steps", "4", "--population", "4", "--iterations", "2", "--topk", "2", "--crossover", "2",
            "--mutation", "2", "--no-progress", "--json", "--objective", "electra", "--pretrain-max-steps", "3"]
    assert main([*args[:-4], "--objective", "gan"]) == 2
    assert "--objective must be one of" in one_error_line(capsys.readouterr().err)
    assert not out.exists()
    assert main(args) == 0
    stdout = capsys.readouterr().out  # Lightning also prints there
    summary = json.loads(stdout.strip().splitlines()[-1])
    best = json.loads((out / "search" / "best_arch.json").read_text())
    meta = json.loads((out / "pretrain" / "meta.json").read_text())
    assert meta["arch"] == best["compact"] and meta["steps"] == 3 and meta["objective"] == "electra"
    assert Path(summary["hf"]).joinpath("config.json").is_file() and summary["hf_generator"]


def test_presets_per_size_and_objective():
    """ELECTRA's tiny preset trains at a quarter of MLM's lr (the discriminator does not learn at 2e-3); the other
    values of tiny, and every paper size, are the same for both objectives."""
    from nni_lvbert.pretrain.train import PretrainOptions

    def resolved(**kw):
        opts = PretrainOptions(**kw)
        return {k: opts.resolved(k) for k in ("lr", "max_steps", "batch_size", "warmup_steps", "generator_fraction")}

    electra, mlm = resolved(size="tiny", objective="electra"), resolved(size="tiny", objective="mlm")
    assert electra["lr"] == 5e-4 and mlm["lr"] == 2e-3
    assert {k: v for k, v in electra.items() if k != "lr"} == {k: v for k, v in mlm.items() if k != "lr"}
    assert resolved(size="small", objective="electra") == resolved(size="small", objective="mlm")
    assert resolved(size="base", objective="electra")["lr"] == 2e-4
    assert resolved(size="tiny", objective="electra", lr=1e-3)["lr"] == 1e-3  # a given value wins


def test_optimizers_are_fused_only_on_gpus():
    """Fused AdamW (one kernel) when every parameter is on a GPU; on the CPU torch's default, as before."""
    from nni_lvbert.supernet.lightning_module import MLMModule

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    module = MLMModule(lr=1e-3, warmup_steps=1, max_steps=2)
    module.set_model(model)
    opt = module.configure_optimizers()["optimizer"]
    assert opt.defaults["fused"] is None and all(g.get("fused") is None for g in opt.param_groups)
    from nni_lvbert.trainer import adamw  # fine-tuning's optimizer too

    assert adamw([{"params": list(model.parameters())}], lr=1e-3).defaults["fused"] is None


def test_a_run_shorter_than_val_every_still_ends_with_a_validation(tmp_path, cache_dir):
    """--max-steps 4 with --val-every 3: a last validation at step 4 (the final weights), so meta.json's `final`,
    the curve and the printed result are never empty (once `"final": {}` with empty axes)."""
    out = tmp_path / "short"
    assert main(pretrain_args(out, cache_dir, steps=4, objective="mlm")) == 0
    meta = json.loads((out / "meta.json").read_text())
    assert [h["step"] for h in meta["validation"]] == [3, 4]
    assert meta["final"]["step"] == 4 and 0 <= meta["final"]["val_mlm_acc"] <= 1
