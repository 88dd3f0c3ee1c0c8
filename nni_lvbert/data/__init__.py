"""Data pipeline: embedded corpus or any `datasets` corpus -> WordPiece tokenizer -> packed, masked, cached splits;
the fixed validation batches every score is computed on (validation.py) and the offline `wiki-pairs` task
(wiki_pairs.py, `lvbert data wiki-pairs`).

Exports are resolved lazily so `lvbert --help` (which imports `nni_lvbert.data.cli`) does not import datasets,
transformers or Lightning.
"""
from __future__ import annotations

_EXPORTS = {
    "prepare": "pipeline",
    "PreparedData": "pipeline",
    "check_vocab": "tokenizer",
    "check_max_length": "tokenizer",
    "load_tokenizer": "tokenizer",
    "resolve_corpus": "corpus",
    "MLMDataModule": "datamodule",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
