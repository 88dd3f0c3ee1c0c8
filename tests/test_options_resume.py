"""--resume compares what an option means, not how it was typed (issue 55, item 1): the command a user ran, with
up-arrow and `--resume` added, resumes; a real difference is one line naming both values."""
from __future__ import annotations

import json

import pytest

from nni_lvbert.arch import parse_arch
from nni_lvbert.cli import main
from nni_lvbert.options import to_dict
from nni_lvbert.pretrain.train import PretrainOptions
from nni_lvbert.supernet.train import SupernetOptions
from tests.conftest import one_error

ARCH = "fccfgfcccgsssfsggcsgfcgc"


def _run_dir(tmp_path, opts) -> str:
    run = tmp_path / "run"
    run.mkdir()
    (run / "options.json").write_text(json.dumps(to_dict(opts.resolve())))
    return str(run)


def _resumed(capsys, argv: list[str]) -> str:
    assert main([*argv, "--resume", "--print-config"]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_a_data_directory_with_a_trailing_slash_is_the_same_directory(tmp_path, capsys):
    data = tmp_path / "prepared"
    data.mkdir()
    run = _run_dir(tmp_path, SupernetOptions.flat(out="x", size="tiny", data=str(data)))
    for spelling in (f"{data}/", str(data), f"{tmp_path}/./prepared"):
        assert "max_steps: 1500" in _resumed(capsys, ["supernet", "train", "--data", spelling, "--out", run])
    other = tmp_path / "other"
    other.mkdir()
    one_error(capsys, main(["supernet", "train", "--data", f"{other}/", "--out", run, "--resume", "--print-config"]),
              f"--data {other}/ contradicts {run} (data {data})")


def test_an_arch_given_as_its_best_arch_json_is_the_compact_arch_it_holds(tmp_path, capsys):
    best = tmp_path / "best_arch.json"
    best.write_text(json.dumps({"arch": parse_arch(ARCH).dict, "compact": ARCH}))
    run = _run_dir(tmp_path, PretrainOptions(out="x", size="tiny", arch=ARCH))
    assert f"arch: {best}" in _resumed(capsys, ["pretrain", "--arch", str(best), "--out", run])  # as given
    assert f"arch: {ARCH}" in _resumed(capsys, ["pretrain", "--arch", ARCH, "--out", run])
    other = tmp_path / "other_arch.json"
    other.write_text(json.dumps({"arch": parse_arch("s" * len(ARCH)).dict}))
    one_error(capsys, main(["pretrain", "--arch", str(other), "--out", run, "--resume", "--print-config"]),
              f"--arch {other} contradicts {run} (arch {ARCH})")


def test_a_named_arch_is_compared_at_the_stored_arch_slot_count(tmp_path, capsys):
    run = _run_dir(tmp_path, PretrainOptions(out="x", size="tiny", arch="sf" * 6))
    assert "arch: bert" in _resumed(capsys, ["pretrain", "--arch", "bert", "--out", run])
    one_error(capsys, main(["pretrain", "--arch", "dynamicconv", "--out", run, "--resume", "--print-config"]),
              f"--arch dynamicconv contradicts {run} (arch sfsfsfsfsfsf)")


def test_a_size_preset_value_given_again_is_the_same_value(tmp_path, capsys):
    run = _run_dir(tmp_path, SupernetOptions(out="x", size="tiny"))
    assert "max_steps: 1500" in _resumed(capsys, ["supernet", "train", "--max-steps", "1500", "--out", run])
    one_error(capsys, main(["supernet", "train", "--max-steps", "9", "--out", run, "--resume", "--print-config"]),
              f"--max-steps 9 contradicts {run} (max_steps 1500)")


@pytest.mark.parametrize("before, now, differ", [
    ({"data": "d", "seed": 1}, {"data": "d/", "seed": 1}, []),
    ({"data": "d", "seed": 1}, {"data": "e", "seed": 2}, ["data", "seed"]),
    ({"strategies": ["random"]}, {"strategies": ["random", "evolution"]}, ["strategies"]),
])
def test_stored_settings_are_compared_as_resume_compares(before, now, differ):
    from nni_lvbert.resume import differing

    assert differing(before, now) == differ
