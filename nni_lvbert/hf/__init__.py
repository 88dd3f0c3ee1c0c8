"""LV-BERT as Hugging Face `transformers` models: config, model classes, Auto* registration, the model directory.

`import nni_lvbert` registers the classes with transformers' Auto* factories (`nni_lvbert.hf.hook`: at once when
transformers' Auto modules are loaded, else when they are imported), so `AutoModelForMaskedLM.from_pretrained(DIR)`
and `pipeline("fill-mask", model=DIR)` work. Without this package a saved directory loads with
`trust_remote_code=True` (it carries its code, `nni_lvbert.hf.bundle`). `save_hf_model` (`nni_lvbert.hf.save`)
writes such a directory; `lvbert export` cuts one out of a supernet run.

The names below are imported on first use, so `import nni_lvbert.hf` stays free of torch and transformers.
"""
from __future__ import annotations

import importlib

from .auto import AUTO_CLASS_NAMES, register

_LAZY = {
    "LVBertConfig": "configuration_lvbert",
    **{name: "modeling_lvbert" for name in ("LVBertPreTrainedModel", *AUTO_CLASS_NAMES.values())},
    "save_hf_model": "save",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["AUTO_CLASS_NAMES", "register", *_LAZY]  # noqa: PLE0604 (_LAZY holds the lazily loaded names)
