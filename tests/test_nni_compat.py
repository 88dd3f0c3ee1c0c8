"""Each workaround in nni_lvbert/nni_compat/ still does what it claims, and the NNI 3.0 internals it relies on are
still there. After an NNI upgrade run this file first: a failure names the workaround to revisit (see its comment
block in nni_compat/ for what to check and how to drop it)."""
from __future__ import annotations

import inspect
import os
import pickle
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from nni_lvbert import nni_compat
from nni_lvbert.config import SpaceSpec
from nni_lvbert.search import nnictl
from nni_lvbert.search import strategy as search_strategy
from nni_lvbert.supernet import strategy as supernet_strategy
from tests.conftest import tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")
SPEC = SpaceSpec(name="tiny4", slots=4, candidates=["dc", "sa", "ff", "glu"], size="tiny")


def mutated_space(seed: int = 0, **cfg):
    from nni_lvbert.space import LVBertSpace

    torch.manual_seed(seed)
    space = LVBertSpace(SPEC, tiny_config(initializer_range=0.5, **cfg))
    supernet_strategy.SeededRandomOneShot().mutate_model(space)
    return space.eval()


@pytest.mark.parametrize("module, heavy", [("nni_lvbert.nni_compat", ("nni", "torch")), ("nni_lvbert.cli", ("nni",))])
def test_importing_it_imports_no_nni(module, heavy):
    """The CLI installs the warning filter before anything imports NNI; nni_compat itself stays light."""
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_not_a_module_warning_is_filtered_and_nni_still_emits_it():
    from nni.nas.nn.pytorch import layers

    assert "is found to be not a nn.Module" in inspect.getsource(layers.generate_stub_file), \
        "NNI no longer emits the warning: drop NOT_A_MODULE_WARNING (and pyproject's filterwarnings line)"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        nni_compat.ignore_nni_import_warnings()
        warnings.warn("<class 'torch.nn.parameter.Buffer'> is found to be not a nn.Module, which is unexpected.",
                      RuntimeWarning)
    assert seen == []


# ------------------------------------------------------------------------------------------------ NasExperiment
def test_weights_only_serializer_is_installed_and_refuses_pickled_objects(tmp_path, monkeypatch):
    from nni.nas.experiment.experiment import NasExperiment
    from nni.nas.utils import serializer

    # what it replaces: NNI loads experiment checkpoints through the default serializer, TorchSerializer's `.torch`
    assert "get_default_serializer().load(" in inspect.getsource(NasExperiment.load_checkpoint)
    assert serializer.TorchSerializer.suffix == nni_compat.WeightsOnlyTorchSerializer.suffix
    monkeypatch.setattr(serializer, "_default_serializer", None)
    nni_compat.use_weights_only_serializer()
    ours = serializer.get_default_serializer()
    assert isinstance(ours, nni_compat.WeightsOnlyTorchSerializer)
    nni_compat.use_weights_only_serializer()
    assert serializer.get_default_serializer() is ours

    state = {"version": 1, "strategy": {"history": [("a", 0.5)], "t": torch.arange(3)}, "engine": {}}
    ours.save(state, tmp_path / "state.ckpt")
    calls = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(k) or real_load(*a, **k))
    back = ours.load(tmp_path / "state.ckpt")
    assert calls == [{"weights_only": True}]
    assert back["strategy"]["history"] == [("a", 0.5)] and torch.equal(back["strategy"]["t"], torch.arange(3))
    torch.save({"x": Path("anything")}, str(tmp_path / "evil.ckpt") + ".torch")  # an arbitrary pickled object
    with pytest.raises(pickle.UnpicklingError):
        ours.load(tmp_path / "evil.ckpt")
    with pytest.raises(FileNotFoundError):  # what NasExperiment.load_checkpoint treats as "no checkpoint"
        ours.load(tmp_path / "missing.ckpt")


def test_quiet_nni_logging_drops_only_the_misleading_checkpoint_warning():
    import logging

    import nni.nas.oneshot.pytorch.strategy as oneshot

    assert nni_compat.NO_CHECKPOINT_CALLBACK in inspect.getsource(oneshot)  # the message NNI logs at each start
    logger = logging.getLogger(oneshot.__name__)
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.WARNING)  # the filter is tested, not a level an earlier search left on "nni.nas"
    try:
        nni_compat.quiet_nni_logging()
        nni_compat.quiet_nni_logging()
        assert logger.filters.count(nni_compat._DROP_NO_CHECKPOINT_CALLBACK) == 1
        logger.warning(nni_compat.NO_CHECKPOINT_CALLBACK)
        logger.warning("Mutation hook on %s didn't return a BaseSuperNetModule.", "x")
        logger.info("an INFO line")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert seen == ["Mutation hook on x didn't return a BaseSuperNetModule."]
    assert logging.getLogger("nni").level >= logging.WARNING


# ---------------------------------------------------------------------------------------------- trial reporting
def test_trial_reporter_bypasses_the_engine_channel():
    import nni.trial
    from nni.nas.evaluator.evaluator import Evaluator
    from nni.runtime.trial_command_channel import get_default_trial_command_channel, set_default_trial_command_channel

    source = inspect.getsource(Evaluator.mock_runtime)  # what TrialReporter undoes
    assert "set_default_trial_command_channel(" in source and "nni.trial._params" in source

    class Channel:
        def __init__(self):
            self.sent = []

        def send_metric(self, **kw):
            self.sent.append(kw)

    before, before_params = get_default_trial_command_channel(), nni.trial._params
    outer, inner = Channel(), Channel()
    try:
        set_default_trial_command_channel(outer)
        nni.trial._params = {"parameter_id": 7, "parameters": {}}
        reporter = nni_compat.TrialReporter()
        set_default_trial_command_channel(inner)
        nni.trial._params = {"parameter_id": 0, "parameters": None}
        reporter.intermediate(0.5)
        reporter.final(0.6)
        assert [(m["type"], m["parameter_id"]) for m in outer.sent] == [("PERIODICAL", 7), ("FINAL", 7)]
        assert inner.sent == [] and get_default_trial_command_channel() is inner
    finally:
        set_default_trial_command_channel(before)
        nni.trial._params = before_params
    assert not nni_compat.in_nni_trial()  # "STANDALONE" outside nnictl


# ------------------------------------------------------------------------------------------------------ tuner
def test_dispatcher_patch_targets_exist_and_patching_is_idempotent():
    from nni.runtime import msg_dispatcher as md

    for name in ("handle_add_customized_trial", "handle_trial_end", "is_created_in_previous_exp",
                 "get_previous_param", "recover_parameter_id"):
        assert callable(getattr(md.MsgDispatcher, name, None)), f"MsgDispatcher.{name} is gone: revisit " \
            "watch_resumed_trials"
    nni_compat.watch_resumed_trials()
    patched = md.MsgDispatcher.handle_trial_end
    nni_compat.watch_resumed_trials()
    assert md.MsgDispatcher.handle_trial_end is patched and md.MsgDispatcher._lvbert_watches_resumed
    # tests/test_tuner_resume.py drives the patched dispatcher end to end


# ------------------------------------------------------------------------------------------------------ nnictl
def test_trial_database_is_read_with_nnis_own_schema(tmp_path):
    import nni_node

    js = (Path(nni_node.__path__[0]) / "core" / "sqlDatabase.js").read_text()
    schema = js.split("const createTables = `", 1)[1].split("`;", 1)[0]  # the manager's own CREATE TABLEs
    (tmp_path / "db").mkdir()
    con = sqlite3.connect(tmp_path / "db" / "nni.sqlite")
    con.executescript(schema)
    arch = {"layer00": "dc", "layer01": "sa"}
    other, third = {"layer00": "ff", "layer01": "ff"}, {"layer00": "sa", "layer01": "dc"}
    con.executemany("INSERT INTO TrialJobEvent (timestamp, trialJobId, event, data) VALUES (?, ?, ?, ?)", [
        (1, "A", "WAITING", '{"parameter_id": 0, "parameters": {"layer00": "dc", "layer01": "sa"}}'),
        (2, "A", "SUCCEEDED", None),
        (3, "B", "WAITING", '{"parameter_id": 1, "parameters": "{\\"layer00\\": \\"ff\\", \\"layer01\\": \\"ff\\"}"}'),
        (4, "C", "RUNNING", '{"parameter_id": 2, "parameters": {"layer00": "sa", "layer01": "dc"}}'),
        (5, "B", "RUNNING", '{"parameter_id":1,"parameter_source":"resumed","parameters":{"layer00":"ff","layer01":"ff"}}'),
    ])
    # A's and B's metrics carry no parameter id (their trials' own is used); C ran parameter 0 (NNI's local training
    # service gave it another trial's parameters): its metric says so, and that is what C's score belongs to
    con.executemany("INSERT INTO MetricData (trialJobId, parameterId, type, data) VALUES (?, ?, ?, ?)",
                    [("A", None, "PERIODICAL", '"0.1"'), ("A", "", "FINAL", '"{\\"default\\": 0.25}"'),
                     ("B", None, "FINAL", "0.5"), ("C", "0", "FINAL", "0.75")])
    con.execute("INSERT INTO ExperimentProfile (params, revision) VALUES (?, ?)", ('{"trialCommand": "x"}', 1))
    con.commit()
    con.close()
    params, finals, config = nnictl.read_trial_db(tmp_path)
    assert params == {"0": arch, "1": other, "2": third}
    assert finals == {"A": ("0", {"default": 0.25}), "B": ("1", 0.5), "C": ("0", 0.75)}
    assert config == {"trialCommand": "x"}


def test_nnictl_output_and_manifest():
    from nni.experiment import launcher
    from nni.tools.nnictl.config_utils import Experiments

    assert "Experiment ID:" in inspect.getsource(launcher)
    assert callable(Experiments.get_all_experiments)
    assert nni_compat.experiment_id_in("INFO: Creating experiment, Experiment ID: ab12cd34\n") == "ab12cd34"
    assert nni_compat.experiment_id_in("Connect to port 8080 success, experiment id is xy9, status") == "xy9"
    assert nni_compat.experiment_id_in("ERROR: port in use") is None



def test_a_manager_less_experiment_keeps_its_manifest_entry_in_its_workdir(tmp_path, monkeypatch):
    """NNI lists every in-process NasExperiment in the user's nnictl experiment list (the workaround's reason, so it
    fails here once NNI stops); under manifest_in the entry, start and stop, is in the run's own directory."""
    from types import SimpleNamespace

    from nni.nas.experiment import NasExperiment
    from nni.tools.nnictl.config_utils import Experiments

    nni_compat.use_pid_file_lock()
    home, work = tmp_path / "home", tmp_path / "work"
    monkeypatch.setattr(Experiments.__init__, "__defaults__", (str(home),))  # the user's list, here a temp one

    def exp(i):
        config = SimpleNamespace(experiment_name=None, experiment_working_directory=str(work))
        return SimpleNamespace(id=i, config=config)

    NasExperiment._start_without_nni_manager(exp("plain"))
    assert list(Experiments().get_all_experiments()) == ["plain"]
    with nni_compat.manifest_in(work):
        NasExperiment._start_without_nni_manager(exp("ours"))
        NasExperiment._stop_without_nni_manager(exp("ours"))
    assert list(Experiments().get_all_experiments()) == ["plain"]
    assert Experiments(str(work)).get_all_experiments()["ours"]["status"] == "STOPPED"
    NasExperiment._stop_without_nni_manager(exp("plain"))  # patched only while active
    assert Experiments().get_all_experiments()["plain"]["status"] == "STOPPED"


def test_experiment_list_lock_keeps_nnis_protocol_without_filelock(tmp_path):
    from nni.tools.nnictl import common_utils
    from nni.tools.nnictl.config_utils import Experiments

    # what the workaround replaces: Experiments() takes get_file_lock(), which builds SimplePreemptiveLock per call
    assert "get_file_lock(" in inspect.getsource(Experiments.__init__)
    assert "SimplePreemptiveLock(" in inspect.getsource(common_utils.get_file_lock)
    nni_compat.use_pid_file_lock()
    assert isinstance(common_utils.get_file_lock(str(tmp_path / "f")), nni_compat.PidFileLock)

    def within(seconds, fn):  # a lock that never counts as held polls forever: fail instead of hanging
        done = []
        t = threading.Thread(target=lambda: done.append(fn()), daemon=True)
        t.start()
        t.join(seconds)
        assert done, f"{fn} did not return within {seconds} s"
        return done[0]

    home = tmp_path / "nni-home"
    within(20, lambda: Experiments(home_dir=str(home)).add_experiment("ab12", 8080, 0, "local", "x"))
    assert within(20, lambda: Experiments(home_dir=str(home)).get_all_experiments())["ab12"]["port"] == 8080
    assert not list(home.glob(".experiment.lock.*"))  # released

    # NNI's protocol: a holder writes <lock>.<pid>; others wait while it is fresh and ignore it once stale
    lock_file = str(tmp_path / "x.lock")
    theirs = Path(lock_file + ".999999999")
    theirs.touch()
    lock = nni_compat.PidFileLock(lock_file, stale=2, poll=0.01)
    waiter = threading.Thread(target=lock.acquire, daemon=True)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and not lock.is_locked
    os.utime(theirs, (time.time() - 10,) * 2)
    waiter.join(5)
    assert not waiter.is_alive() and lock.is_locked and Path(lock.own).is_file()
    with lock:  # re-entrant
        assert lock.is_locked
    assert lock.is_locked
    theirs.unlink()
    other = nni_compat.PidFileLock(lock_file, stale=2, poll=0.01)
    other.own = lock_file + ".12345"  # another process
    waiter = threading.Thread(target=other.acquire, daemon=True)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and not other.is_locked  # ours is held and fresh
    lock.release()
    assert not lock.is_locked and not Path(lock.own).exists()
    waiter.join(5)
    assert other.is_locked
    other.release()
    assert not list(tmp_path.glob("x.lock.*"))


@pytest.mark.parametrize("found, ok", [("3.11.0", True), ("3.12.0", False), ("4.3.1", False), ("3.9.1", True)])
def test_nnictl_refuses_a_filelock_its_lock_hangs_with(monkeypatch, found, ok):
    import importlib.metadata

    from nni_lvbert.errors import UserError

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: found if name == "filelock" else real(name))
    if ok:
        nni_compat.check_nnictl_filelock()
    else:
        with pytest.raises(UserError, match=f"filelock {found}.*filelock<3.12"):
            nni_compat.check_nnictl_filelock()

# ------------------------------------------------------------------------------------- multi-trial in process
def test_sample_evaluator_and_strategy_status_internals():
    from nni.nas.space import ExecutableModelSpace
    from nni.nas.strategy import Random
    from nni.nas.strategy.base import StrategyStatus

    assert "evaluator._execute(self)" in inspect.getsource(ExecutableModelSpace.execute)
    seen = []

    class Model:
        sample = {"layer00": "sa"}  # noqa: RUF012  (a stand-in for NNI's model object)

    value = search_strategy.SampleEvaluator(lambda s: seen.append(s) or 0.75)._execute(Model())
    assert value == 0.75 and seen == [{"layer00": "sa"}]
    strategy = Random()
    assert strategy._status == StrategyStatus.EMPTY and not nni_compat.strategy_interrupted(strategy)
    strategy._status = StrategyStatus.INTERRUPTED
    assert nni_compat.strategy_interrupted(strategy)


# ---------------------------------------------------------------------------------------------------- one-shot
def test_nni_random_one_shot_is_unseeded_and_ours_is_a_function_of_seed_and_step():
    from nni.nas.oneshot.pytorch.sampling import RandomSamplingLightningModule

    space = mutated_space()
    layer = space.layers[0]
    draws = []
    for _ in range(2):  # NNI's own sampling ignores every global seed
        np.random.seed(0)
        torch.manual_seed(0)
        draws.append([layer.resample({})[layer.label] for _ in range(40)])
    assert draws[0] != draws[1], "NNI's path sampling is seeded now: revisit SeededRandomOneShot"

    for name in ("_sampling_patience", "_sampling_attempt", "supernet_modules"):
        assert hasattr(RandomSamplingLightningModule, name), f"RandomSamplingLightningModule.{name} is gone"

    class Training(torch.nn.Module):  # the evaluator's module: holds the space as `model`
        def __init__(self):
            super().__init__()
            self.model = space

    def paths(seed):
        module = supernet_strategy.SeededRandomOneShot(seed=seed).configure_oneshot_module(Training())
        return [module.sample(step, stream) for step in range(6) for stream in (0, supernet_strategy.VAL_STREAM)]

    assert paths(3) == paths(3) != paths(4)
    module = supernet_strategy.SeededRandomOneShot(seed=3).configure_oneshot_module(Training())
    path = module.activate(module.sample(5, 0))
    assert path == supernet_strategy.sample_path({f"layer{i:02d}": SPEC.candidates for i in range(4)}, 3, 5)
    assert [m._sampled for m in space.layers] == list(path.values())
    assert pickle.loads(pickle.dumps(supernet_strategy.SeededRandomOneShot(seed=9))).seed == 9  # e.g. ddp_spawn


def test_one_shot_modules_do_not_forward_the_validation_epoch_hooks():
    from nni.nas.oneshot.pytorch.base_lightning import BaseOneShotLightningModule

    for hook in ("on_validation_epoch_start", "on_validation_epoch_end"):
        assert hook not in vars(BaseOneShotLightningModule), f"NNI forwards {hook} now: drop ours"
        assert hook in vars(supernet_strategy.SeededSamplingModule)


def test_a_mutated_space_needs_keep_already_mutated():
    from nni.nas.strategy import RandomOneShot

    space = mutated_space()
    with pytest.raises(TypeError, match="dangling mutables"):
        RandomOneShot().mutate_model(space)

    class Again(RandomOneShot):
        def default_mutation_hooks(self):
            return [nni_compat.keep_already_mutated] + super().default_mutation_hooks()

    layers = list(space.layers)
    Again().mutate_model(space)
    assert list(space.layers) == layers


def test_extend_lambda_lr_drives_the_new_group_like_the_first():
    from nni.nas.oneshot.pytorch.base_lightning import BaseOneShotLightningModule

    assert hasattr(BaseOneShotLightningModule, "configure_architecture_optimizers")
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.AdamW([a], lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (step + 1))
    for _ in range(3):
        opt.step()
        sched.step()
    opt.add_param_group({"params": [b], "lr": 0.4})
    nni_compat.extend_lambda_lr(sched, opt)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.1 / 4, 0.4 / 4]) == sched.get_last_lr()
    opt.step()
    sched.step()
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.1 / 5, 0.4 / 5])
    with pytest.raises(TypeError, match="LambdaLR"):
        nni_compat.extend_lambda_lr(torch.optim.lr_scheduler.StepLR(opt, 1), opt)


# -------------------------------------------------------------------------------------- trial = in-process scorer
@pytest.mark.parametrize("sharing", ["none", "type"])
def test_trial_model_is_the_scorers_model_bit_for_bit(tmp_path, sharing):
    """The nnictl trial (NNI's public route: load_supernet + space.freeze) computes exactly what the in-process
    scorer computes (the same supernet with each slot's path set by resample)."""
    import yaml

    from nni_lvbert.arch import parse_arch, to_dict
    from nni_lvbert.rundir import RunDir
    from nni_lvbert.search.trial import load_candidate
    from nni_lvbert.supernet.rundir import WEIGHTS

    space = mutated_space(sharing=sharing)
    run = RunDir(tmp_path / "supernet", "supernet")
    run.path.mkdir()
    run.write_text("space.yaml", yaml.safe_dump(SPEC.to_dict(), sort_keys=False))
    run.write_json("model_config.json", space.config.to_dict())
    run.write_json("meta.json", {})
    run.save_weights(space, WEIGHTS)
    ids = torch.randint(5, 100, (3, 16))
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0
    for arch in ("csfg", "gggg", "sfcs"):
        types = parse_arch(arch, SPEC)
        memo = to_dict(types)
        for layer in space.layers:
            layer.resample(memo=memo)
        model = load_candidate(run.path, types)
        with torch.inference_mode():
            want, got = space.head(space.encode(ids, mask)), model.head(model.encode(ids, mask))
        assert torch.equal(got, want), arch


def test_the_any_strategy_fixes_touch_internals_that_still_exist():
    """nni_compat/strategies.py's fixes for NNI's own strategies (run end to end in tests/test_python_api.py):
    the internals each replaces are still there, and the module keeps working when a wrapper forwards nothing."""
    import pytorch_lightning as pl
    from nni.nas.evaluator import Evaluator
    from nni.nas.oneshot.pytorch.base_lightning import BaseOneShotLightningModule
    from nni.nas.strategy import ENAS, GridSearch

    assert inspect.signature(GridSearch()._grid_generator).parameters.keys() == {"model_space"}
    assert list(inspect.signature(ENAS.train_dataloader).parameters) == ["self", "train_dataloader_fn",
                                                                       "val_dataloader_fn"]
    assert "_execute" in vars(Evaluator)  # the per-trial hook fresh_evaluator_per_trial replaces
    assert BaseOneShotLightningModule.on_validation_epoch_end is pl.LightningModule.on_validation_epoch_end
    assert not nni_compat.in_multi_trial()  # outside a NasExperiment's trial
