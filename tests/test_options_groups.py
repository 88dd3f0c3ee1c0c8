"""The hardware and data option groups: one value each inside a training command's options (`opts.hardware`,
`opts.inputs`), flat wherever a user or a file sees them (flags, --config, --print-config, options.json)."""
from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from nni_lvbert.errors import UserError
from nni_lvbert.rundir import RunDir

# options.json of a tiny supernet run as nni-lvbert wrote it before the groups were values of their own
# (`to_dict(SupernetOptions(...).resolve())`, the hardware and data options at the top level)
LEGACY = {
    "out": "RUN", "resume": False, "overwrite": False, "progress": True, "accelerator": "cpu", "devices": "1",
    "num_nodes": 1, "ddp_strategy": None, "precision": "32-true", "num_workers": 1, "compile": None, "data": None,
    "corpus": ["c.txt"], "tokenizer": "tok", "cache_dir": "cache", "max_docs": 9, "val_fraction": 0.2,
    "data_seed": 2, "size": "tiny", "seed": 0, "lr": 0.002, "warmup_steps": 100, "max_steps": 7, "batch_size": 32,
    "dropout": 0.0, "weight_decay": 0.0, "val_every": 250, "val_batches": 20, "ckpt_every": 100,
    "model_summary": True, "hpo": {}, "space": "lvbert", "sharing": None, "sampling": "spos", "warm_start": None,
    "fix": None, "record_paths": False}


def _legacy_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "options.json").write_text(json.dumps({**LEGACY, "out": str(run)}))
    return run


def test_a_run_stored_with_flat_options_resumes_with_its_hardware_and_data(tmp_path):
    from nni_lvbert.options import to_dict
    from nni_lvbert.supernet.train import SupernetOptions
    from nni_lvbert.train_options import DataOptions, HardwareOptions

    run = _legacy_run(tmp_path)
    opts = RunDir(run, "supernet").begin(SupernetOptions(out=str(run), resume=True))
    assert opts.hardware == HardwareOptions(accelerator="cpu", precision="32-true", num_workers=1)
    assert opts.inputs == DataOptions(corpus=["c.txt"], tokenizer="tok", cache_dir="cache", max_docs=9,
                                      val_fraction=0.2, data_seed=2)
    stored = to_dict(opts)
    assert list(stored) == list(LEGACY)  # the same keys in the same order
    assert stored == {**LEGACY, "out": str(run), "resume": True}


def test_hardware_may_change_on_resume_and_data_may_not(tmp_path):
    from nni_lvbert.supernet.train import SupernetOptions

    run = _legacy_run(tmp_path)
    # from the command line (given) and from the API (differs from the default): the new hardware is taken
    cli = SupernetOptions.flat(out=str(run), resume=True, devices="2", given=["resume", "devices"])
    api = SupernetOptions.flat(out=str(run), resume=True, num_workers=3)
    for opts, (devices, workers) in ((cli, ("2", 1)), (api, ("1", 3))):
        resumed = RunDir(run, "supernet").begin(opts)
        assert (resumed.hardware.devices, resumed.hardware.num_workers, resumed.hardware.precision) == (
            devices, workers, "32-true")
        assert resumed.inputs.corpus == ["c.txt"] and resumed.max_steps == 7
    with pytest.raises(UserError, match=r"--max-docs 5 contradicts .* \(max_docs 9\)"):
        RunDir(run, "supernet").begin(SupernetOptions.flat(out=str(run), resume=True, max_docs=5))
    same = RunDir(run, "supernet").begin(SupernetOptions.flat(out=str(run), resume=True, max_docs=9))
    assert same.inputs.max_docs == 9


def test_flags_fill_the_groups_and_print_config_stays_flat(tmp_path):
    from nni_lvbert.cliargs import add_options, config_yaml, options_from_args, read_config
    from nni_lvbert.iot.train import IOTData, IOTOptions
    from nni_lvbert.supernet.train import SupernetOptions

    p = argparse.ArgumentParser(prog="t")
    add_options(p, SupernetOptions)
    args = p.parse_args(["--devices", "2", "--corpus", "a.txt", "b.txt", "--max-steps", "3"])
    args.given = {"devices", "corpus", "max_steps"}
    opts = options_from_args(SupernetOptions, args)
    assert (opts.hardware.devices, opts.inputs.corpus, opts.max_steps) == ("2", ["a.txt", "b.txt"], 3)
    assert set(opts.given) == {"devices", "corpus", "max_steps"}
    text = config_yaml(SupernetOptions, args)
    assert "\ndevices: '2'\n" in text and "\ncorpus:\n- a.txt\n" in text and "hardware" not in text
    cfg = tmp_path / "c.yaml"
    cfg.write_text("hardware:\n  devices: 2\n")  # the group is not a key: its options are
    with pytest.raises(UserError, match="unknown option 'hardware'"):
        read_config(SupernetOptions, str(cfg))
    assert isinstance(IOTOptions().inputs, IOTData)  # IOT's own help for --data/--corpus/--tokenizer


def test_stages_and_children_take_the_groups_as_values():
    from nni_lvbert.options import derive, given_fields
    from nni_lvbert.pipeline import PipelineOptions
    from nni_lvbert.pretrain.train import PretrainOptions
    from nni_lvbert.train_options import HardwareOptions

    opts = PipelineOptions.flat(devices="2", compile="inductor", corpus=["c.txt"])
    child = derive(PretrainOptions, opts, (HardwareOptions,), out="x", num_workers=2)
    assert child.hardware == HardwareOptions(devices="2", compile="inductor", num_workers=2)
    assert child.inputs.corpus is None  # not derived: the group's defaults
    assert given_fields(opts) == {"devices", "compile", "corpus"}  # an API caller's: by the options' own names


@pytest.mark.parametrize("command", ["iot train", "study iot", "study iot-finetune"])
def test_iot_settings_are_one_group_in_every_iot_command(command, tmp_path):
    """`lvbert iot train`, `study iot` and `study iot-finetune` take IOT's settings as one `IOTMethod` value: the
    same flags in the same help section, flat in --print-config."""
    from nni_lvbert.cli import build_parser
    from nni_lvbert.cliargs import config_yaml, options_from_args
    from nni_lvbert.iot.method import IOTMethod

    args = build_parser().parse_args([*command.split(), "--tau", "3", "--c1", "0", "--no-gumbel"])
    opts = options_from_args(args.options_cls, args)
    assert opts.method == IOTMethod(tau=3.0, c1=0.0, gumbel=False)
    assert {"tau: 3.0", "c1: 0.0", "gumbel: false"} <= set(config_yaml(args.options_cls, args).splitlines())
    sub = build_parser()._subparsers._group_actions[0].choices
    for word in command.split():
        sub = sub[word] if isinstance(sub, dict) else sub._subparsers._group_actions[0].choices[word]
    section = next(g for g in sub._action_groups if any("--tau" in a.option_strings for a in g._group_actions))
    assert section.title == IOTMethod.GROUP
    names = [f.name for f in dataclasses.fields(IOTMethod)]
    assert [a.dest for a in section._group_actions if a.dest in names] == names


@pytest.mark.parametrize("bad, message", [({"tau": 0}, "--tau must be positive"),
                                          ({"tau_every": 0}, "--tau-every must be at least 1"),
                                          ({"c2": -1}, "--c2 must be >= 0"),
                                          ({"clamp": 0.5}, r"--clamp must be in \[0, 1/M\) = \[0, 0.25\) for M=4")])
def test_iot_settings_out_of_range_are_refused_with_the_flag(bad, message):
    from nni_lvbert.iot.method import IOTMethod

    with pytest.raises(UserError, match=message):
        IOTMethod(**bad).check(4)
