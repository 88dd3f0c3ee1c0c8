"""Every file the package ships besides code, by name: search spaces, model sizes and the nnictl experiment folder.

In the repository they live at the top level, beside the package, where users find and edit them:
`search_spaces/` and `experiments/` (`nnictl create --config experiments/search.yml` from a checkout). The wheel
ships them inside the package, at `nni_lvbert/search_spaces/` and `nni_lvbert/experiments/` (setup.py maps the two
folders there). `resource_dir` finds them either way: the checkout's folders when this module runs from a source
checkout (an editable install), else the installed package's. They are real files: nnictl reads the configs and
search-space JSONs by path, and NNI's Node process `--require`s the bind script, so a path (not a zip member) is
what every caller needs. `lvbert init-experiment DIR` copies the experiment folder and the space YAMLs out to edit.
"""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
RESOURCE_DIRS = ("search_spaces", "experiments")  # top-level in the repository, nni_lvbert/<name> in the wheel


def resource_dir(name: str) -> Path:
    """<checkout>/<name> when the package runs from a source checkout (the source of truth), else the installed
    package's nni_lvbert/<name>."""
    checkout = PACKAGE_DIR.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / name).is_dir():
        return checkout / name
    return PACKAGE_DIR / name


# search spaces (<name>.yaml, looked up by `--space NAME`) and the model sizes (`--size NAME`)
SPACES_DIR = resource_dir("search_spaces")
SIZES_FILE = SPACES_DIR / "sizes.yaml"

# the nnictl experiment folder: configs, their search spaces and the web-UI bind script, side by side
# (the configs name the JSONs and their trial/tuner code directory relative to this folder)
EXPERIMENTS_DIR = resource_dir("experiments")
SEARCH_CONFIG = EXPERIMENTS_DIR / "search.yml"  # `lvbert search nnictl` default
SUPERNET_CONFIG = EXPERIMENTS_DIR / "supernet.yml"
IOT_CONFIG = EXPERIMENTS_DIR / "iot.yml"
STANDALONE_CONFIG = EXPERIMENTS_DIR / "standalone.yml"  # template of `lvbert study ranking|iot|downstream --nnictl DIR`
SEARCH_SPACE_JSON = EXPERIMENTS_DIR / "search_space.json"  # = `lvbert search space-json --space lvbert`
SUPERNET_SPACE_JSON = EXPERIMENTS_DIR / "supernet_space.json"
# Loaded by NNI's Node process (NODE_OPTIONS=--require): servers that listen on a bare port listen on
# $NNI_BIND_HOST (default 127.0.0.1) instead of all interfaces.
BIND_JS_FILE = EXPERIMENTS_DIR / "bind_localhost.js"
# `nnictl algo register --meta` this: configs may then say `tuner: {name: LVBertEvolution}` (NNI's registry)
TUNER_META = EXPERIMENTS_DIR / "tuner_meta.yml"
REGISTERED_TUNER = "LVBertEvolution"

EXPERIMENT_FILES = (SEARCH_CONFIG, SUPERNET_CONFIG, IOT_CONFIG, STANDALONE_CONFIG, SEARCH_SPACE_JSON,
                    SUPERNET_SPACE_JSON, BIND_JS_FILE, TUNER_META)


def space_files() -> list[Path]:
    """The shipped search-space YAMLs (sizes.yaml excluded), sorted by name."""
    return sorted(p for p in SPACES_DIR.glob("*.yaml") if p != SIZES_FILE)


def space_names() -> list[str]:
    return [p.stem for p in space_files()]
