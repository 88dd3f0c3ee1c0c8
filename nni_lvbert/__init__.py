"""nni-lvbert: search BERT backbones by layer variety (LV-BERT) with Microsoft NNI.

Importing the package makes transformers' Auto* factories know model_type "lvbert" (nni_lvbert.hf.hook), without
importing transformers or torch here: `lvbert --help` stays fast.

The Python API for NNI users (docs/guide/python-api.md) is this module's public names (`__all__`), each imported on
first use (module `__getattr__`), so `import nni_lvbert` stays cheap:

- `build_space`, `LVBertSpace`, `load_space`, `load_size`: the NNI ModelSpace at a size, from a space name or YAML
- `prepare_data`, `PreparedData`, `MLMDataModule`: the data and its Lightning DataModule
- `MLMModule`: the LightningModule of NNI's `Lightning` evaluator (masked-LM loss; val_mlm_acc is the metric)
- `SeededRandomOneShot`: SPOS with paths a function of (seed, step): reproducible, resumable, DDP-consistent
- `run_experiment`, `check_strategy`: `NasExperiment(...).run()` with the project's NNI 3.0 fixes
- `Arch`, `best_arch_json`, `write_best_arch`, `fixed_model`, `export_model_dir`, `load_supernet`: what a search
  exported, as best_arch.json, a fixed model and a Hugging Face directory with the supernet's weights
"""

__version__ = "0.1.0"

import importlib

from .hf.hook import install as _install_hf_hook

_install_hf_hook()

# public name -> the module that defines it (its attribute of the same name unless given as "module:attribute")
_PUBLIC = {
    "build_space": "api", "check_strategy": "api", "run_experiment": "api", "best_arch_json": "api",
    "write_best_arch": "api", "fixed_model": "api", "export_model_dir": "api",
    "LVBertSpace": "space", "load_space": "config", "load_size": "config", "Arch": "arch",
    "prepare_data": "data.pipeline:prepare", "PreparedData": "data.pipeline", "MLMDataModule": "data.datamodule",
    "MLMModule": "supernet.lightning_module", "SeededRandomOneShot": "supernet.strategy",
    "load_supernet": "supernet.rundir",
}
__all__ = sorted(_PUBLIC)  # noqa: PLE0605  (a list: the public names, one table above)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'nni_lvbert' has no attribute {name!r}")
    module, _, attribute = _PUBLIC[name].partition(":")
    value = getattr(importlib.import_module(f".{module}", __name__), attribute or name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))
