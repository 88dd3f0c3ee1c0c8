"""Arch spellings, named references and bad input through `lvbert info`."""
import json

import pytest

from nni_lvbert.arch import LVBERT_SMALL, named_arch, parse_arch, sandwich, to_compact, to_dict
from nni_lvbert.cli import main
from nni_lvbert.config import SpaceSpec, load_space
from nni_lvbert.errors import UserError

SPACE = load_space("lvbert")


def test_spellings_agree(tmp_path):
    compact = "ccsffscffsccsfcfscfcssfs"
    d = to_dict(parse_arch(compact, SPACE))
    assert d["layer00"] == "dc" and d["layer02"] == "sa" and d["layer03"] == "ff" and len(d) == 24
    f = tmp_path / "a.json"
    f.write_text(json.dumps(d))
    best = tmp_path / "best_arch.json"
    best.write_text(json.dumps({"arch": d, "score": 0.3}))
    for spelling in [compact, d, LVBERT_SMALL, "lvbert-small", str(f), str(best), json.dumps(d), parse_arch(compact, SPACE)]:
        assert to_compact(parse_arch(spelling, SPACE)) == compact


def test_named_references():
    assert named_arch("bert", 24) == "sf" * 12
    assert named_arch("dynamicconv", 24) == "cf" * 12
    assert named_arch("sandwich", 24) == "s" * 6 + "sf" * 6 + "f" * 6 == sandwich(24, 6)
    assert named_arch("sandwich2", 8) == "sssfsfff"
    small = named_arch("lvbert-small", 24)
    assert small.count("c") == small.count("s") == small.count("f") == 8
    assert named_arch("bert", 6) == "sfsfsf"


@pytest.mark.parametrize("bad,msg", [
    ("ccsx" * 6, "unknown layer letter"),
    ("ccsf", "has 4 slots"),
    ('{"layer00": "dc"', "not valid JSON"),
    ('{"layer00": "conv"}', "keys"),
    ({f"layer{i:02d}": "xx" for i in range(24)}, "unknown layer type"),
    ("missing_file.json", "not found"),
    ("lvbert-small", "not in space"),
])
def test_bad_arch_raises_clear_error(bad, msg):
    space = SpaceSpec(name="sa-ff", slots=24, candidates=["sa", "ff"]) if msg == "not in space" else SPACE
    with pytest.raises(UserError, match=msg):
        parse_arch(bad, space)


def test_named_arch_needs_right_slot_count():
    with pytest.raises(UserError, match="not defined for 5 slots"):
        parse_arch("bert", SpaceSpec(name="odd", slots=5))


@pytest.mark.parametrize("argv,msg", [
    (["info", "--arch", "ccsq"], "unknown layer letter"),
    (["info", "--arch", "ccsf"], "has 4 slots"),
    (["info", "--arch", "g" * 24, "--space", "dc-sa-ff"], "not in space"),
    (["info", "--arch", "bert", "--size", "huge"], "unknown size"),
    (["info", "--arch", "bert", "--space", "nope"], "unknown search space"),
    (["info", "--arch", "{oops"], "not valid JSON"),
])
def test_cli_bad_input_one_line_nonzero(capsys, argv, msg):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and msg in err and len(err.splitlines()) == 1


def test_cli_info_json(capsys):
    assert main(["info", "--arch", "bert", "--size", "small", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["arch"] == "sf" * 12
    assert round(out["params"]["backbone"] / 1e6, 1) == 9.5


def test_space_files_load():
    for name, cands in [("lvbert", ["dc", "sa", "ff", "glu"]), ("sa-ff", ["sa", "ff"]), ("dc-ff", ["dc", "ff"]),
                        ("dc-sa", ["dc", "sa"]), ("dc-sa-ff", ["dc", "sa", "ff"])]:
        spec = load_space(name)
        assert spec.slots == 24 and spec.candidates == cands


def test_bad_space_file(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("slots: 4\ncandidates: [sa, conv]\n")
    with pytest.raises(UserError, match="candidates must be"):
        load_space(f)
