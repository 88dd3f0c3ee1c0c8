"""Options are values: one frozen options object per command, changed only by making a new one
(`dataclasses.replace`); the pipeline derives its stages' options from its own."""
from __future__ import annotations

import argparse
import dataclasses

import pytest

COMMANDS = [["supernet", "train"], ["supernet", "few-shot"], ["pretrain"], ["iot", "train"], ["search", "run"],
            ["run"], ["finetune"], ["glue"], ["study", "ranking"], ["study", "search"], ["study", "downstream"],
            ["study", "iot"], ["data", "prepare"], ["export"], ["info"], ["iot", "eval"], ["search", "score"],
            ["search", "latency-table"], ["search", "nnictl"], ["search", "export"]]


def _options_class(command):
    from nni_lvbert.cli import build_parser

    parser = build_parser()
    for name in command:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    return parser.get_default("options_cls")


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_commands_options_are_frozen(command):
    cls = _options_class(command)
    assert cls.__dataclass_params__.frozen
    for f in dataclasses.fields(cls):  # nested groups too (search's EvolutionConfig)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            assert type(default).__dataclass_params__.frozen, f.name


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
