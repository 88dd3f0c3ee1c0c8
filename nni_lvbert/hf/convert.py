"""Between the project's models (ModelConfig + Arch) and the HF classes: the configs, and loading weights.

There is one parameter naming (`nni_lvbert/body.py`): the HF classes hold the body under `lvbert.` (transformers'
`base_model_prefix`) and their heads under their own names, the project's MLM model holds the same body at its top
and its head as `head.*`. Nothing is renamed; the only reading of other names is that of files written before the
one naming (a shared model's, or a frozen shared supernet's, slots as `layers.<i>.*`: `body.old_slot_names`).
"""
from __future__ import annotations

from ..arch import Arch
from ..body import old_slot_names
from ..errors import UserError
from .configuration_lvbert import LVBertConfig

TIED = "head.decoder.weight"  # the MLM decoder: the word embedding itself, never stored
BODY = ("embeddings", "layers", "shared")  # the body's top-level names


def hf_config(cfg, arch, **kwargs) -> LVBertConfig:
    """LVBertConfig of a ModelConfig and a layer order (anything `Arch.parse` reads: an Arch, a list of layer
    types, a compact string, a name, ...); kwargs add HF fields (num_labels, ...)."""
    return LVBertConfig.from_model_config(cfg, list(Arch.parse(arch)), **kwargs)


def model_config(config: LVBertConfig):
    """(ModelConfig, Arch) of an LVBertConfig."""
    from ..config import ModelConfig

    return ModelConfig.from_dict(config.model_config_dict()), Arch(config.check_layer_types())


def hf_state_dict(state: dict, types, sharing: str = "none", head: str = "head") -> dict:
    """The project's MLM state dict (fixed model or frozen supernet, of now or before) as the HF model's: the
    body's keys behind `lvbert.`, the head's (`head.*`, saved under `head`) as they are."""
    out: dict = {}
    types = list(types)
    for key, value in state.items():
        top, _, rest = key.partition(".")
        if top not in BODY and top != "head":
            raise UserError(f"unexpected weight {key!r}: not an LV-BERT masked-language model")
        slot = rest.partition(".")[0]
        if top == "layers" and not (slot.isdigit() and int(slot) < len(types)) or top == "shared" and slot not in types:
            raise UserError(f"weights hold {key!r} but the architecture {''.join(_letters(types))} has "
                            f"{len(types)} slots")
        out[f"lvbert.{key}" if top in BODY else f"{head}.{rest}"] = value
    if sharing == "type":
        try:
            old_slot_names(out, "lvbert.", types)
        except ValueError as e:
            raise UserError(str(e)) from None
    return out


def project_state_dict(hf_model) -> dict:
    """An `LVBertForMaskedLM` (HF) state dict as the project's MLM model holds it (no `lvbert.`, no decoder)."""
    out = dict(hf_model.lvbert.state_dict())
    out.update({f"head.{k}": v for k, v in hf_model.head.state_dict().items() if not k.startswith("decoder.")})
    return out


def load_weights(model, state: dict) -> None:
    """Load `state` (HF names) into the HF `model`; a UserError naming the first wrong shape, or what is missing
    or unexpected (the tied decoder is never stored)."""
    expected = model.state_dict()
    for name, value in state.items():
        if name in expected and tuple(expected[name].shape) != tuple(value.shape):
            raise UserError(f"weight {name} has shape {tuple(value.shape)} but the config gives "
                            f"{tuple(expected[name].shape)}")
    result = model.load_state_dict(state, strict=False)
    missing = sorted(set(result.missing_keys) - {TIED})
    if missing or result.unexpected_keys:
        detail = (f"missing {', '.join(missing[:3])}" if missing
                  else f"unexpected {', '.join(result.unexpected_keys[:3])}")
        types = model.config.layer_types
        raise UserError(f"weights do not match the architecture {''.join(_letters(types))} ({detail})")


def to_hf_masked_lm(model_or_state, cfg, types):
    """An `LVBertForMaskedLM` (eval mode) holding the weights of a project model or its state dict."""
    from .modeling_lvbert import LVBertForMaskedLM

    state = model_or_state if isinstance(model_or_state, dict) else model_or_state.state_dict()
    types = list(Arch.parse(types))
    model = LVBertForMaskedLM(hf_config(cfg, types))
    load_weights(model, hf_state_dict(state, types, cfg.sharing))
    return model.eval()


def to_project_model(hf_model):
    """The project's `nni_lvbert.modeling.FixedMLM` with the weights of an HF `LVBertForMaskedLM`."""
    from ..modeling import FixedMLM

    cfg, arch = model_config(hf_model.config)
    model = FixedMLM(cfg, arch)
    model.load_state_dict(project_state_dict(hf_model))
    return model.eval()


def _letters(types) -> list[str]:
    from ..config import LETTER_OF

    return [LETTER_OF.get(t, "?") for t in types]
