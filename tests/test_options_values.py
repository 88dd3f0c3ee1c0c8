"""Options are values: one frozen options object per command, changed only by making a new one
(`dataclasses.replace`); the pipeline derives its stages' options from its own."""
from __future__ import annotations

import dataclasses

import pytest


def _options_classes() -> dict[str, type]:
    """Every command's options class, by its words (`supernet train`), walking the parser: new commands too."""
    from nni_lvbert.argcheck import commands
    from nni_lvbert.cli import build_parser

    return {" ".join(words): parser.get_default("options_cls") for words, parser, _ in commands(build_parser())
            if parser.get_default("options_cls") is not None}


def test_every_commands_options_are_frozen():
    classes = _options_classes()
    assert {"supernet train", "run", "search nnictl", "study ranking", "finetune"} <= set(classes)
    for command, cls in classes.items():
        assert cls.__dataclass_params__.frozen, command
        for f in dataclasses.fields(cls):  # nested groups too (search's EvolutionConfig)
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if dataclasses.is_dataclass(default):
                assert type(default).__dataclass_params__.frozen, (command, f.name)


def test_an_option_cannot_be_assigned_only_replaced():
    from nni_lvbert.supernet.train import SupernetOptions

    opts = SupernetOptions(max_steps=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.size = "tiny"
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.evolution = None  # not a field either: a frozen value takes no new attributes
    changed = dataclasses.replace(opts, size="tiny")
    assert (changed.size, changed.max_steps, opts.size) == ("tiny", 3, None)


def test_tuner_parameters_make_new_options(monkeypatch):
    import nni

    from nni_lvbert.supernet.train import TUNABLE, SupernetOptions
    from nni_lvbert.training import apply_tuner_parameters

    monkeypatch.setattr(nni, "get_next_parameter", lambda: {"lr": 0.002, "max_steps": 5})
    opts = SupernetOptions(max_steps=3)
    tuned = apply_tuner_parameters(opts, TUNABLE, "supernet")
    assert (tuned.lr, tuned.max_steps, tuned.hpo) == (0.002, 5, {"lr": 0.002, "max_steps": 5})
    assert (opts.lr, opts.max_steps, opts.hpo) == (None, 3, {})  # the options given are left as they were


def test_tuner_parameters_reach_an_option_group(monkeypatch):
    """IOT's tunable tau and c1 live in its `method` group: a tuner sets them by their flat names."""
    import nni

    from nni_lvbert.iot.method import IOTMethod
    from nni_lvbert.iot.train import HPO_KEYS, IOTOptions
    from nni_lvbert.training import apply_tuner_parameters

    monkeypatch.setattr(nni, "get_next_parameter", lambda: {"tau": 2, "c1": 0.0, "lr": 0.001})
    tuned = apply_tuner_parameters(IOTOptions(), HPO_KEYS, "IOT")
    assert (tuned.method, tuned.lr) == (IOTMethod(tau=2.0, c1=0.0), 0.001)
    assert isinstance(tuned.method.tau, float)


def test_resumed_iot_orders_are_dropped_from_new_options(tmp_path):
    """--resume with the orders the run has: the options returned no longer give them (the stored ones rule)."""
    import yaml

    from nni_lvbert.config import load_space
    from nni_lvbert.iot.orders import resolve_orders
    from nni_lvbert.iot.rundir import save_orders
    from nni_lvbert.iot.train import IOTOptions, _check_resumed_orders
    from nni_lvbert.rundir import RunDir

    run = RunDir(tmp_path / "iot", "IOT")
    run.path.mkdir()
    spec = load_space("lvbert")
    run.write_text("space.yaml", yaml.safe_dump(spec.to_dict(), sort_keys=False))
    orders, source = resolve_orders(spec, block="sa,ff,dc", m=2)
    save_orders(run, orders, source)
    given = IOTOptions(out=str(run.path), resume=True, block="sa,ff,dc", m=2, given=["block", "m", "resume"])
    checked = _check_resumed_orders(given)
    assert checked.given == ["resume"] and given.given == ["block", "m", "resume"]
    api = _check_resumed_orders(dataclasses.replace(given, given=None))
    assert (api.block, api.m, given.block) == (None, None, "sa,ff,dc")


def test_pipeline_stages_derive_their_options_from_the_pipelines(tmp_path):
    """Each stage takes the pipeline's option groups as they are (no field listed by hand), as `lvbert run` built
    them before: the same values, so runs it stored resume."""
    from nni_lvbert.options import get_option, replace_options
    from nni_lvbert.pipeline import PipelineOptions, pretrain_options, search_options, supernet_options
    from nni_lvbert.pretrain.train import PretrainOptions
    from nni_lvbert.search.algorithm import EvolutionConfig
    from nni_lvbert.search.run import SearchOptions
    from nni_lvbert.supernet.train import SupernetOptions
    from nni_lvbert.train_options import DataOptions, HardwareOptions

    data = {"corpus": ["c.txt"], "tokenizer": "tok", "cache_dir": "cache", "max_docs": 9, "val_fraction": 0.2,
            "data_seed": 2}
    hardware = {"accelerator": "cpu", "devices": "2", "num_nodes": 1, "ddp_strategy": "ddp", "precision": "32-true",
                "num_workers": 1, "compile": "inductor"}
    search = {"strategies": ["random"], "evolution": EvolutionConfig(population=4, iterations=2), "rerank": 2,
              "rerank_steps": 5, "max_latency_ms": 3.0, "latency_table": "t.json", "pareto": True}
    opts = PipelineOptions.flat(out=str(tmp_path), space="lvbert", size="tiny", seed=3, **data, **hardware, **search,
                                progress=False, supernet_max_steps=7, val_every=2, objective="mlm",
                                pretrain_max_steps=8, given=["size", "seed"])
    sn = supernet_options(opts, tmp_path, resume=True)
    assert sn == SupernetOptions.flat(out=str(tmp_path / "supernet"), space="lvbert", size="tiny", seed=3, **data,
                                      **hardware, progress=False, max_steps=7, val_every=2, resume=True,
                                      overwrite=False)
    se = search_options(opts, tmp_path, resume=False)
    assert se == SearchOptions(supernet=str(tmp_path / "supernet"), seed=3, out=str(tmp_path / "search"), **search,
                               progress=False, resume=False, overwrite=True)
    pt = pretrain_options(opts, tmp_path, "ssff", resume=False)
    assert pt == PretrainOptions.flat(out=str(tmp_path / "pretrain"), arch="ssff", size="tiny", objective="mlm",
                                      seed=3, **data, **hardware, max_steps=8, progress=False, resume=False,
                                      overwrite=True)
    assert pretrain_options(opts, tmp_path, "ssff", resume=True).arch is None  # the stored arch rules
    for child in (sn, se, pt):
        assert child.given is None  # what the pipeline was given is not what the stage was given
    for child in (sn, pt):  # the groups themselves, value for value: what replace(child, **group) leaves as it is
        for group in (DataOptions, HardwareOptions):
            values = {f.name: get_option(opts, f.name) for f in dataclasses.fields(group)}
            assert replace_options(child, **values) == child
