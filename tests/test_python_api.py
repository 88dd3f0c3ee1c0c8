"""The Python face (docs/guide/python-api.md) as an NNI user meets it: the public names of `nni_lvbert` (imported from
there only), and every NNI 3.0 strategy that fits the space run through NasExperiment on the tiny space with the
project's evaluator (NNI's Lightning + MLMModule + MLMDataModule) for a few steps, then exported.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from nni.nas import strategy as nni_strategy
from nni.nas.evaluator.pytorch import Lightning, Trainer
from pytorch_lightning import Callback

import nni_lvbert
from nni_lvbert import (
    Arch,
    MLMDataModule,
    MLMModule,
    SeededRandomOneShot,
    best_arch_json,
    build_space,
    check_strategy,
    export_model_dir,
    fixed_model,
    run_experiment,
    write_best_arch,
)

pytestmark = pytest.mark.usefixtures("one_thread")
SPACE = "name: api2\nslots: 2\ncandidates: [dc, sa, ff, glu]\nsize: tiny\n"  # 16 architectures: a full grid fits
ONE_SHOT = ["SeededRandomOneShot", "RandomOneShot", "DARTS", "GumbelDARTS", "Proxyless", "ENAS"]
MULTI_TRIAL = ["Random", "RegularizedEvolution", "TPE", "GridSearch", "PolicyBasedRL"]
KWARGS = {"RegularizedEvolution": {"population_size": 2, "sample_size": 1}}


def test_public_names_are_documented_and_import_cheaply():
    assert set(nni_lvbert.__all__) >= {"build_space", "LVBertSpace", "MLMModule", "MLMDataModule", "prepare_data",
                                       "run_experiment", "best_arch_json", "export_model_dir", "SeededRandomOneShot"}
    for name in nni_lvbert.__all__:
        doc = getattr(nni_lvbert, name).__doc__
        assert doc and doc.strip(), f"nni_lvbert.{name} has no docstring"
        assert name in nni_lvbert.__doc__, f"nni_lvbert's docstring does not list {name}"
    with pytest.raises(AttributeError):
        nni_lvbert.NoSuchName  # noqa: B018
    code = "import sys, nni_lvbert; print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'nni'}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"  # the CLI's start-up: the public names load on first use


@pytest.fixture(scope="module")
def api(tiny, tmp_path_factory):
    """One data build shared by every strategy: the tiny prepared data and a 2-slot space YAML."""
    root = tmp_path_factory.mktemp("api")
    (root / "api2.yaml").write_text(SPACE)
    return {"root": root, "data": tiny["data"], "space_file": root / "api2.yaml"}


class FitEnds(Callback):
    """Records (trainer, global step) at the end of each fit: one per trial of a multi-trial strategy."""

    def __init__(self):
        self.ends = []

    def on_fit_end(self, trainer, pl_module):
        self.ends.append((id(trainer), trainer.global_step))


def evaluator(data, steps: int = 4, fits: FitEnds | None = None):
    trainer = Trainer(max_steps=steps, callbacks=[fits] if fits else None, val_check_interval=2,
                      check_val_every_n_epoch=None, limit_val_batches=1,
                      num_sanity_val_steps=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, use_distributed_sampler=False)
    return Lightning(MLMModule(lr=1e-3, warmup_steps=1, max_steps=steps), trainer,
                     datamodule=MLMDataModule(data, batch_size=8))


def make_strategy(name: str):
    if name == "SeededRandomOneShot":
        return SeededRandomOneShot(seed=0)
    return getattr(nni_strategy, name)(**KWARGS.get(name, {}))


@pytest.mark.parametrize("name", ONE_SHOT + MULTI_TRIAL)
def test_every_nni_strategy_searches_the_space_and_exports(api, tmp_path, name):
    """A few steps of each NNI 3.0 strategy on the tiny space, through NasExperiment with the project's evaluator;
    its exported best is a valid architecture, written as the best_arch.json `lvbert search run` writes."""
    space = build_space(api["space_file"], "tiny", data=api["data"])
    try:
        check_strategy(name)
    except Exception as exc:  # noqa: BLE001  (ENAS/PolicyBasedRL without tianshou 0.4: one line naming the fix)
        assert name in ("ENAS", "PolicyBasedRL") and type(exc).__name__ == "UserError", exc
        assert "\n" not in str(exc) and "pip install --no-deps tianshou==0.4.11" in str(exc)
        if name == "ENAS":  # NNI's PolicyBasedRL() itself refuses to be made without tianshou
            with pytest.raises(type(exc), match="tianshou"):
                run_experiment(space, evaluator(api["data"]), make_strategy(name), tmp_path / "nni", max_trials=2)
        return
    strategy = make_strategy(name)
    before = {k: v.clone() for k, v in space.state_dict().items()}
    fits = FitEnds()
    exp = run_experiment(space, evaluator(api["data"], fits=fits), strategy, tmp_path / "nni", max_trials=2)
    best = exp.export_top_models(top_k=1, formatter="dict")[0]
    assert sorted(best) == ["layer00", "layer01"] and set(best.values()) <= {"dc", "sa", "ff", "glu"}
    record = json.loads(write_best_arch(tmp_path / "best_arch.json", best, space, strategy=name).read_text())
    assert record["arch"] == best and Arch.parse(str(tmp_path / "best_arch.json")).dict == best
    assert record["params"]["total"] > 0 and record["backbone_flops"] > 0 and record["size"] == "tiny"
    if name in MULTI_TRIAL:  # each trial reported its validation MLM accuracy to the strategy
        metrics = [m.metric for m in strategy.list_models()]
        assert 1 <= len(metrics) <= 2 and all(isinstance(m, float) and 0 <= m <= 1 for m in metrics), metrics
        # and trained its own steps with its own Trainer (NNI's sequential engine reuses the evaluator's)
        assert len(fits.ends) == len(metrics) and len({t for t, _ in fits.ends}) == len(metrics), fits.ends
        assert all(step == 4 for _, step in fits.ends), fits.ends
        from nni_lvbert.nni_compat import in_multi_trial

        assert not in_multi_trial()  # the experiment over, nothing later in this process reports to it
    else:  # one-shot: the space was trained in place, and the exported child inherits its weights
        after = space.state_dict()
        assert any(not torch.equal(before[k], after[k]) for k in before if k in after)
        child = fixed_model(space, best)
        assert torch.equal(child.embeddings.word.weight, space.embeddings.word.weight)


def test_the_exported_child_keeps_the_supernets_weights(tiny, tmp_path):
    """export_model_dir writes what `lvbert export` writes for the same supernet and arch: the same tensors."""
    from safetensors.torch import load_file

    from nni_lvbert import load_supernet
    from nni_lvbert.cli import main

    sn = load_supernet(tiny["run"])
    arch = "cscfsg"
    ours = export_model_dir(sn.space, arch, tmp_path / "ours", sn.path / "tokenizer")
    assert main(["export", "--supernet", str(tiny["run"]), "--arch", arch, "--out", str(tmp_path / "cli")]) == 0
    a, b = load_file(ours / "model.safetensors"), load_file(tmp_path / "cli" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert best_arch_json(arch, sn.space, strategy="x")["compact"] == arch


def test_check_strategy_passes_every_other_strategy():
    for name in ONE_SHOT[1:5] + MULTI_TRIAL[:4]:
        check_strategy(make_strategy(name))
