"""`lvbert search` on bad input: one `error:` line and exit 2 (missing or foreign supernet, impossible budget or
constraints, bad arch/space, data tokenized with other ids, unavailable devices)."""
from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import SLOTS, one_error_line, run_cli
from tests.test_search import SMALL, TYPES


@pytest.mark.parametrize("case", ["missing", "other-space", "budget0", "params", "joint", "strategy"])
def test_bad_search_input(tiny, tmp_path, capsys, case):
    out = tmp_path / "out"
    supernet = str(tiny["run"])
    extra, msg = [], ""
    if case == "missing":
        supernet, msg = str(tmp_path / "nope"), "supernet directory not found"
    elif case == "other-space":
        extra, msg = ["--space", "lvbert"], "was trained on space 'tiny6'"
    elif case == "budget0":
        extra, msg = ["--iterations", "0"], "budget is 0"
    elif case == "params":
        extra, msg = ["--max-params", "1"], "no architecture of space 'tiny6' satisfies --max-params 1"
    elif case == "joint":
        from nni_lvbert.search.cost import CostModel
        from nni_lvbert.supernet.rundir import load_supernet

        sn = load_supernet(tiny["run"])
        spec, cfg = sn.spec, sn.cfg
        cost = CostModel(cfg, spec)
        # each bound alone is met by one architecture (all slots the fewest-parameter type / the cheapest type),
        # both together by none
        lean = min(TYPES, key=lambda t: cost.layer_params[t])
        cheap = min(TYPES, key=lambda t: cost.layer_flops[t])
        assert lean != cheap and min(cost.layer_params.values()) < sorted(cost.layer_params.values())[1]
        assert min(cost.layer_flops.values()) < sorted(cost.layer_flops.values())[1]
        extra = ["--max-params", str(cost.params([lean] * SLOTS)), "--max-flops", str(cost.flops([cheap] * SLOTS))]
        msg = "no architecture satisfying the constraints"
    elif case == "strategy":
        extra, msg = ["--search", "annealing"], "unknown strategy annealing"
    code, _, err = run_cli(["search", "run", "--supernet", supernet, "--out", str(out), *SMALL, *extra], capsys)
    assert code == 2 and msg in one_error_line(err)
    assert not out.exists()  # nothing evaluated: no output directory (in particular no best_arch.json)


def test_bad_arch_and_space_input(tiny, tmp_path, capsys):
    arch24 = tmp_path / "arch24.json"
    arch24.write_text(json.dumps({"arch": {f"layer{i:02d}": "dc" for i in range(24)}}))
    code, _, err = run_cli(["search", "score", "--supernet", str(tiny["run"]), "--arch", str(arch24),
                            "--val-tokens", "256"], capsys)
    assert code == 2 and "layer00..layer05 (6 slots)" in one_error_line(err)
    code, out, _ = run_cli(["search", "score", "--supernet", str(tiny["run"]), "--arch", "csfgcs",
                            "--val-tokens", "256", "--json"], capsys)
    assert code == 0 and 0 <= json.loads(out)["mlm_acc"] <= 1
    # a supernet directory that is not a finished run
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "space.yaml").write_text("name: x\nslots: 2\n")
    code, _, err = run_cli(["search", "run", "--supernet", str(broken), "--out", str(tmp_path / "o"), *SMALL], capsys)
    assert code == 2 and "not a finished supernet run" in one_error_line(err)


def test_data_tokenized_with_other_token_ids_is_refused(tiny, tmp_path, capsys):
    """Same vocabulary size and tokens, other ids: scoring would silently compare against the wrong labels."""
    import shutil

    other = tmp_path / "data"
    shutil.copytree(tiny["data"].path, other)
    tok_file = other / "tokenizer" / "tokenizer.json"
    tok = json.loads(tok_file.read_text())
    vocab = tok["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[-2:]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    tok_file.write_text(json.dumps(tok))
    meta_file = other / "meta.json"  # a consistent entry (else it is refused as damaged: its sizes are recorded)
    meta = json.loads(meta_file.read_text())
    if "files" in meta:
        meta["files"]["tokenizer/tokenizer.json"] = tok_file.stat().st_size
    meta_file.write_text(json.dumps(meta))
    code, _, err = run_cli(["search", "score", "--supernet", str(tiny["run"]), "--arch", "csfgcs",
                            "--data", str(other), "--val-tokens", "256"], capsys)
    assert code == 2 and "was tokenized with another tokenizer" in one_error_line(err)
    code, _, err = run_cli(["search", "score", "--supernet", str(tiny["run"]), "--arch", "csfgcs",
                            "--data", str(tiny["data"].path), "--val-tokens", "256"], capsys)
    assert code == 0, err


@pytest.mark.parametrize("device,msg", [("cuda:7", "sees no CUDA GPU"), ("meta", "unsupported device 'meta'"),
                                        ("gpu0", "unknown device 'gpu0'")])
def test_unavailable_device_is_one_line(tiny, tmp_path, capsys, device, msg):
    if device.startswith("cuda") and torch.cuda.is_available():
        msg = "CUDA GPU(s) are visible" if torch.cuda.device_count() <= 7 else None
    if msg is None:
        pytest.skip("this machine has 8+ GPUs")
    code, _, err = run_cli(["search", "score", "--supernet", str(tiny["run"]), "--arch", "csfgcs",
                            "--val-tokens", "256", "--device", device], capsys)
    assert code == 2 and msg in one_error_line(err)
    code, _, err = run_cli(["search", "run", "--supernet", str(tiny["run"]), "--out", str(tmp_path / "o"), *SMALL,
                            "--device", device], capsys)
    assert code == 2 and msg in one_error_line(err) and not (tmp_path / "o").exists()
