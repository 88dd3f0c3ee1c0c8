"""The suite's own machinery (tests/suite.py): the costliest files named for xdist's order exist, and a shared
fixture directory is built once per session."""
from pathlib import Path

from tests.suite import SLOW_FIRST, built_once


def test_every_file_named_to_run_first_exists():
    here = Path(__file__).resolve().parent
    assert len(set(SLOW_FIRST)) == len(SLOW_FIRST)
    assert [name for name in SLOW_FIRST if not (here / name).is_file()] == []


def test_a_shared_directory_is_built_once(tmp_path_factory):
    calls = []

    def build(root):
        calls.append(root)
        (root / "made").write_text("once")

    first = built_once(tmp_path_factory, "suite-setup-check", build)
    again = built_once(tmp_path_factory, "suite-setup-check", build)
    assert first == again and len(calls) == 1 and (first / "made").read_text() == "once"
