"""A supernet run directory (a `RunDir` of kind "supernet") and the `Supernet` value search and IOT load from it.

    supernet.safetensors   weights of the mutated (one-shot) space; loading never unpickles anything
    options.json           the options of `lvbert supernet train` (what --resume continues with)
    space.yaml, model_config.json, tokenizer/, meta.json, checkpoints/last.ckpt, logs/   (see nni_lvbert.rundir)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import ModelConfig, SpaceSpec
from ..rundir import RunDir

WEIGHTS = "supernet.safetensors"
REQUIRED = (WEIGHTS, "space.yaml", "model_config.json", "meta.json")


@dataclass
class Supernet:
    """A trained supernet: the mutated NNI space holding the weights (eval mode), its space, config and meta."""

    space: object
    spec: SpaceSpec
    cfg: ModelConfig
    meta: dict
    run: RunDir

    @property
    def path(self) -> Path:
        return self.run.path


def supernet_dir(path) -> RunDir:
    """A finished supernet run directory (one clear line when it is not one); reads no weights, imports no NNI."""
    run = RunDir(path, "supernet")
    run.require(REQUIRED)
    return run


def load_supernet(path) -> Supernet:
    """The trained supernet in `path` (a supernet or IOT run directory). Uses safetensors only."""
    from ..space import LVBertSpace
    from .strategy import SeededRandomOneShot

    run = supernet_dir(path)
    spec, cfg, meta = run.spec, run.cfg, run.meta
    space = LVBertSpace(spec, cfg)
    SeededRandomOneShot().mutate_model(space)
    run.load_weights(space, WEIGHTS, "its space.yaml/model_config.json")
    return Supernet(space.eval(), spec, cfg, meta, run)
