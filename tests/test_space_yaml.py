"""A user's space YAML (`--space PATH`) is checked key by key: each mistake is one clear line naming the file and
the key, and a good file loads (issue 55.4)."""
from __future__ import annotations

import pytest

from nni_lvbert.config import SPACE_KEYS, load_space
from nni_lvbert.errors import UserError


@pytest.mark.parametrize(("text", "message"), [
    ("name: x\nslot: 12\ncandidates: [dc, sa]\n", "unknown key(s) slot"),
    ("slots: twelve\n", "slots must be a positive integer, got 'twelve'"),
    ("slots: 0\n", "slots must be a positive integer, got 0"),
    ("slots: true\n", "slots must be a positive integer, got True"),
    ("candidates: dc, sa\n", "candidates must be a non-empty list of layer types"),
    ("candidates: []\n", "candidates must be a non-empty list of layer types"),
    ("candidates: [dc, conv]\n", "candidates must be layer types from dc, sa, ff, glu; unknown layer type(s) conv"),
    ("candidates: [dc, dc]\n", "duplicate candidates"),
    ("size: huge\n", "size must be one of"),
    ("name: [a]\n", "name must be a string"),
    ("- dc\n- sa\n", "must hold a YAML mapping"),
    ("slots: [\n", "is not valid YAML"),
])
def test_a_malformed_space_yaml_is_one_line_naming_the_mistake(tmp_path, text, message):
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        load_space(str(path))
    line = str(err.value)
    assert message in line and "\n" not in line


def test_a_good_space_yaml_loads_with_its_defaults(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("slots: 12\ncandidates: [sa, dc, glu]\nsize: tiny\ndescription: my own\n")
    spec = load_space(str(path))
    assert (spec.name, spec.slots, spec.candidates, spec.size) == ("mine", 12, ["dc", "sa", "glu"], "tiny")
    assert set(SPACE_KEYS) == {"name", "slots", "candidates", "size", "description"}


def test_the_guides_example_space_loads_as_written(tmp_path):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "architectures.md").read_text()
    block = "#" + text.split("```yaml\n#", 1)[1].split("```", 1)[0]
    path = tmp_path / "my-space.yaml"
    path.write_text(block)
    spec = load_space(str(path))
    assert (spec.name, spec.slots, spec.candidates, spec.size) == ("my-space", 12, ["dc", "sa", "glu"], "tiny")
