"""The package's architecture (issue 52): the import-linter contracts in pyproject.toml hold (layers from the CLI
down to errors, the stage CLIs independent, no import cycle in any package), and every top-level module is in a
layer, so a new module cannot escape the layered contract by being in none."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import nni_lvbert

if sys.version_info < (3, 11):  # the dev extra installs import-linter on 3.11+ only (its own requirement)
    pytest.skip("import-linter needs Python 3.11", allow_module_level=True)
import tomllib

ROOT = Path(__file__).resolve().parents[1]
LINT = ("import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}


def test_import_contracts_are_kept():
    # a subprocess: import-linter puts the working directory on sys.path and configures logging
    done = subprocess.run([sys.executable, "-c", LINT], cwd=ROOT, capture_output=True, text=True, timeout=300)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    assert "3 kept, 0 broken" in report, report


def test_every_top_level_module_is_in_one_layer():
    package = Path(nni_lvbert.__file__).parent
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    modules |= {p.parent.name for p in package.glob("*/__init__.py")}
    layers = [name.strip() for layer in _contracts()["layers"]["layers"] for name in layer.split("|")]
    assert len(layers) == len(set(layers)), "a module is in two layers"
    assert sorted(modules - set(layers)) == [], "add the new top-level modules to a layer in pyproject.toml"
    assert sorted(set(layers) - modules) == [], "a layer names a module that no longer exists"
