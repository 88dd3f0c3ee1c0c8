"""The Arch value (every spelling, equality, hashing, round trips), named references and bad input through
`lvbert info`."""
import json

import pytest

from nni_lvbert.arch import LVBERT_SMALL, Arch, named_arch, parse_arch, sandwich, to_compact, to_dict
from nni_lvbert.cli import main
from nni_lvbert.config import SpaceSpec, load_space
from nni_lvbert.errors import UserError

SPACE = load_space("lvbert")


COMPACT = "ccsffscffsccsfcfscfcssfs"  # = lvbert-small = LVBERT_SMALL's digits
TYPES = [{"c": "dc", "s": "sa", "f": "ff", "g": "glu"}[ch] for ch in COMPACT]
DICT = {f"layer{i:02d}": t for i, t in enumerate(TYPES)}


def spelling(kind: str, tmp_path):
    if kind == "json-file":
        (tmp_path / "a.json").write_text(json.dumps(DICT))
        return str(tmp_path / "a.json")
    if kind == "best_arch.json":
        (tmp_path / "best_arch.json").write_text(json.dumps({"arch": DICT, "compact": COMPACT, "score": 0.3}))
        return str(tmp_path / "best_arch.json")
    return {"dict": DICT, "best-dict": {"arch": DICT}, "compact": COMPACT, "compact-padded": f"  {COMPACT}\n",
            "digits": LVBERT_SMALL, "name": "lvbert-small", "json-text": json.dumps(DICT), "list": TYPES,
            "tuple": tuple(TYPES), "arch": Arch(TYPES)}[kind]


@pytest.mark.parametrize("kind", ["dict", "best-dict", "compact", "compact-padded", "digits", "name", "json-text",
                                  "json-file", "best_arch.json", "list", "tuple", "arch"])
def test_arch_parses_every_spelling_to_one_value(kind, tmp_path):
    value = spelling(kind, tmp_path)
    arch = Arch.parse(value, SPACE)
    assert type(arch) is Arch and arch == Arch(TYPES) and hash(arch) == hash(Arch(TYPES))
    assert arch.types == tuple(TYPES) and arch.compact == str(arch) == COMPACT and arch.dict == DICT
    assert parse_arch(value, SPACE) == arch and to_compact(arch) == COMPACT and to_dict(arch) == DICT
    if kind == "arch":
        assert Arch.parse(value, SPACE) is value  # an Arch of the space passes through as it is


def test_arch_is_an_immutable_hashable_sequence():
    import dataclasses

    arch = Arch.parse(COMPACT, SPACE)
    assert len(arch) == 24 and list(arch) == TYPES and arch[0] == "dc" and arch[-1] == "sa"
    assert arch.letters == tuple(COMPACT) and arch.count("dc") == 8 and "glu" not in arch
    prefix = arch[:3]  # a prefix is an Arch of fewer slots (the prefix cache's key)
    assert type(prefix) is Arch and prefix == ["dc", "dc", "sa"] and prefix.compact == "ccs"
    # equal to (and hashed as) the same types in a list or tuple; never equal to a spelling
    assert arch == TYPES and TYPES == arch and arch == tuple(TYPES) and hash(arch) == hash(tuple(TYPES))
    assert arch != COMPACT and arch != DICT and arch != TYPES[:-1] and arch != Arch(TYPES[::-1])
    assert {arch: 1}[Arch(list(TYPES))] == 1 and len({arch, Arch(TYPES), Arch.parse(DICT, SPACE)}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        arch.types = ()
    a, b, c = Arch(["dc", "sa"]), Arch(["dc", "sa", "ff"]), Arch(["sa", "dc"])
    assert sorted([c, b, a]) == [a, b, c]  # lexicographic by types: neighbours share prefixes
    assert repr(arch) == f"Arch({COMPACT!r})"
    with pytest.raises(TypeError):
        json.dumps(arch)  # on disk an arch is always spelled out: .compact or .dict
    with pytest.raises(TypeError, match="use Arch.parse"):
        Arch(COMPACT)


def test_arch_round_trips():
    arch = Arch.parse(COMPACT, SPACE)
    assert Arch.parse(arch.compact, SPACE) == arch and Arch.parse(arch.dict, SPACE) == arch
    assert Arch.parse(json.loads(json.dumps(arch.dict)), SPACE) == arch
    assert Arch.from_dict(arch.dict) == arch and Arch(list(arch)) == arch and Arch(arch) == arch
    for text in ("sf" * 12, "g" * 24, "cfgs" * 6):
        assert Arch.parse(text, SPACE).compact == text
    with pytest.raises(UserError, match="keys layer00..layer02"):
        Arch.from_dict({"layer00": "dc", "layer01": "sa", "layer03": "ff"})


def test_an_arch_is_checked_against_the_space():
    arch = Arch.parse("lvbert-small", SPACE)
    with pytest.raises(UserError, match="not in space"):
        Arch.parse(arch, SpaceSpec(name="sa-ff", slots=24, candidates=["sa", "ff"]))
    with pytest.raises(UserError, match="has 24 slots"):
        Arch.parse(arch, SpaceSpec(name="short", slots=6))
    with pytest.raises(UserError, match="unknown layer type"):
        Arch.parse(Arch(["dc", "conv"]), SpaceSpec(name="two", slots=2))
    with pytest.raises(UserError, match="cannot read an architecture from int"):
        Arch.parse(3, SPACE)


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


@pytest.mark.parametrize("name,lower", [("BERT", "bert"), ("Sandwich4", "sandwich4"), ("LVBERT-small", "lvbert-small"),
                                        ("DynamicConv", "dynamicconv"), (" Bert ", "bert")])
def test_named_archs_match_in_any_case(name, lower):
    assert parse_arch(name, SPACE) == parse_arch(lower, SPACE) == parse_arch(name)  # without a space: 24 slots
    assert named_arch(name, 24) == named_arch(lower, 24)


@pytest.mark.parametrize("value", ["runs/quickstart/search/best_arch.jsn", "best_arch.jsn", "arch.yaml",
                                   "runs/quickstart/search", "nope/ccsf"])
def test_an_arch_that_looks_like_a_path_is_a_missing_file(value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for space in (SPACE, None):
        with pytest.raises(UserError, match=f"^arch file not found: {value}$"):
            parse_arch(value, space)


def test_a_missing_arch_file_suggests_its_neighbour_and_a_directory_its_best_arch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    search = tmp_path / "runs" / "q" / "search"
    search.mkdir(parents=True)
    (search / "best_arch.json").write_text(json.dumps({"arch": {f"layer{i:02d}": "sa" for i in range(24)}}))
    with pytest.raises(UserError, match=r"not found: runs/q/search/best_arch\.jsn \(did you mean "
                                        r"runs/q/search/best_arch\.json\?\)"):
        parse_arch("runs/q/search/best_arch.jsn", SPACE)
    for value in ("runs/q/search", "runs/q/search/"):
        with pytest.raises(UserError, match="is a directory; pass runs/q/search/best_arch.json"):
            parse_arch(value, SPACE)
    with pytest.raises(UserError, match="runs/q is a directory; give the JSON file in it"):
        parse_arch("runs/q", SPACE)
    assert parse_arch("runs/q/search/best_arch.json", SPACE).compact == "s" * 24
    (tmp_path / "ccsf").mkdir()  # a directory named like letters leaves the letters alone
    assert parse_arch("ccsf", SpaceSpec(name="four", slots=4)).compact == "ccsf"


@pytest.mark.parametrize("word,near", [("Bertt", "bert"), ("sandwhich4", "sandwich4"), ("lvbert_small", "lvbert-small"),
                                       ("dynamicconvv", "dynamicconv"), ("Sandwitch", "sandwich")])
def test_an_unknown_name_lists_the_named_archs_with_a_did_you_mean(word, near):
    with pytest.raises(UserError) as exc:
        parse_arch(word, SPACE)
    message = str(exc.value)
    assert f"unknown arch {word!r} (did you mean {near}" in message and "unknown layer letter" not in message
    assert "bert, dynamicconv, sandwich, sandwichK, lvbert-small" in message


def test_bad_letters_still_say_so_and_list_the_named_archs():
    for word in ("xyzq", "csfgcz", "sa,ff,dc"):
        with pytest.raises(UserError, match="unknown layer letter") as exc:
            parse_arch(word, SPACE)
        assert "named arch (any case): bert, dynamicconv, sandwich, sandwichK, lvbert-small" in str(exc.value)
    four = SpaceSpec(name="four", slots=4)  # lowercase letter words are orders, not misspelled names
    assert [parse_arch(v, four).compact for v in ("ccsf", "0012", "csfg", "gggg")] == ["ccsf", "ccsf", "csfg", "gggg"]
    assert parse_arch("sf" * 200).compact == "sf" * 200  # longer than a file name may be


def test_cli_arch_mistakes_are_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for arch, needle in [("runs/quickstart/search/best_arch.jsn", "error: arch file not found: "
                                                                  "runs/quickstart/search/best_arch.jsn"),
                         ("Bertt", "(did you mean bert?)")]:
        assert main(["info", "--arch", arch]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, err
    assert main(["info", "--arch", "BERT", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["arch"] == "sf" * 12


def test_version_is_printed_fast_without_torch():
    import subprocess
    import sys
    from importlib.metadata import version

    code = ("import sys\nfrom nni_lvbert.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit as e:\n"
            "    print('exit', e.code, sorted({'torch', 'nni', 'lightning'} & set(sys.modules)))")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert got.stdout.splitlines() == [f"lvbert {version('nni-lvbert')}", "exit 0 []"], got


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


def test_arch_and_algorithm1_stay_pure():
    """Algorithm 1 carries Arch values without importing torch or NNI (it is driven by both NNI adapters)."""
    import subprocess
    import sys

    code = "import sys, nni_lvbert.search.algorithm; print(sorted({'torch', 'nni'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "[]"
