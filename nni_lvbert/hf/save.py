"""The one writer of Hugging Face model directories (`lvbert export`, and `lvbert pretrain` later).

    config.json            LVBertConfig (model_type "lvbert", layer_types, every size field) + auto_map
    model.safetensors      the weights (`save_pretrained`; the tied MLM decoder is not stored twice)
    tokenizer.json, tokenizer_config.json, ...   the PreTrainedTokenizerFast the model was trained with
    configuration_lvbert.py, modeling_lvbert.py  the bundled code (`trust_remote_code=True`, no nni_lvbert needed)
    lvbert.json            where the model came from (architecture, source run, version)

The directory is written in a temp directory beside it and renamed into place, so a failure or a kill leaves
nothing half-written; a non-empty directory is refused unless `overwrite`.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..atomic import atomic_directory
from ..errors import UserError
from ..rundir import check_output_dir

PROVENANCE = "lvbert.json"


def save_hf_model(model_or_state, cfg=None, types=None, tokenizer_dir=None, out_dir=None, *, overwrite: bool = False,
                  provenance: dict | None = None) -> Path:
    """Write `out_dir` as a Hugging Face model directory; returns its path.

    model_or_state: an `LVBertPreTrainedModel` (any head, saved as it is; `cfg`/`types` may be None), or the
    project's MLM model / its state dict (`embeddings.*`, `layers.<i>.*` or `shared.<type>.*`, `head.*`: a fixed
    model or a frozen supernet, also as written before `shared.<type>`), saved as `LVBertForMaskedLM` with the ModelConfig `cfg` and layer order `types`.
    tokenizer_dir: a PreTrainedTokenizerFast directory whose vocabulary matches the model's.
    """
    from .bundle import auto_map
    from .modeling_lvbert import LVBertPreTrainedModel

    if out_dir is None or tokenizer_dir is None:
        raise UserError("save_hf_model needs a tokenizer directory and an output directory")
    out = Path(out_dir)
    check_model_dir(out, overwrite)
    if isinstance(model_or_state, LVBertPreTrainedModel):
        model = model_or_state
        if types is not None and list(types) != list(model.config.layer_types):
            raise UserError(f"the model's layer order {model.config.layer_types} is not {list(types)}")
    else:
        if cfg is None or types is None:
            raise UserError("saving a project model or state dict needs its ModelConfig and layer order")
        from .convert import to_hf_masked_lm

        model = to_hf_masked_lm(model_or_state, cfg, types)
    tokenizer = _checked_tokenizer(tokenizer_dir, model.config)

    with atomic_directory(out) as tmp:  # an existing (empty, or --overwrite) `out` is replaced only once complete
        _write(tmp, model, tokenizer, auto_map(), provenance)
    return out


def check_model_dir(out: Path, overwrite: bool) -> None:
    """Refuse a non-empty output directory unless `overwrite` (and a file in its place)."""
    out = Path(out)
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UserError(f"output directory {out} is not empty; pass --overwrite to replace it")
    check_output_dir(out, resume=False, overwrite=overwrite, resume_marker="config.json", what="output directory")


def _write(directory: Path, model, tokenizer, auto_map: dict, provenance: dict | None) -> None:
    from .. import __version__
    from ..config import LETTER_OF
    from .bundle import write_bundle

    config = model.config
    had = getattr(config, "auto_map", None)
    config.auto_map = auto_map  # so `trust_remote_code=True` finds the bundled classes
    try:
        model.save_pretrained(str(directory))
    finally:
        if had is None:
            del config.auto_map
        else:
            config.auto_map = had
    tokenizer.save_pretrained(str(directory))
    write_bundle(directory)
    info = {"model_class": type(model).__name__, "arch": "".join(LETTER_OF[t] for t in config.layer_types),
            "layer_types": list(config.layer_types), "nni_lvbert_version": __version__, **(provenance or {})}
    (directory / PROVENANCE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


def _checked_tokenizer(tokenizer_dir, config):
    """The PreTrainedTokenizerFast of `tokenizer_dir`, refused (one line) when it does not fit the model."""
    from ..safeio import load_tokenizer_dir

    tok = load_tokenizer_dir(tokenizer_dir, fix="give the tokenizer the model was trained with")
    if len(tok) != config.vocab_size:
        raise UserError(f"tokenizer {tokenizer_dir} has {len(tok)} tokens but the model has a vocabulary of "
                        f"{config.vocab_size}: use the tokenizer it was trained with")
    if tok.pad_token_id != config.pad_token_id:
        raise UserError(f"tokenizer {tokenizer_dir} pads with id {tok.pad_token_id} but the model with "
                        f"{config.pad_token_id}")
    if tok.mask_token is None:
        raise UserError(f"tokenizer {tokenizer_dir} has no mask token (fill-mask needs one)")
    return tok
