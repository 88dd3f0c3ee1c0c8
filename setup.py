"""The package layout the wheel needs beyond pyproject.toml (which holds everything else).

The search spaces and the nnictl experiment folder are top-level folders of the repository (`search_spaces/`,
`experiments/`: users find and edit them there, `nnictl create --config experiments/search.yml`), and the wheel
ships them inside the package as `nni_lvbert/search_spaces/` and `nni_lvbert/experiments/`, where
`nni_lvbert/resources.py` finds them once installed.
"""
from setuptools import find_packages, setup

RESOURCES = {"nni_lvbert.search_spaces": "search_spaces", "nni_lvbert.experiments": "experiments"}

setup(packages=find_packages(include=["nni_lvbert", "nni_lvbert.*"]) + list(RESOURCES), package_dir=RESOURCES)
