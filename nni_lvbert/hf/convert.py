"""Between the project's model (ModelConfig + Arch, `embeddings.* / layers.<i>.* / head.*`) and the HF classes.

Parameter names differ only by a prefix: the HF encoder lives under `lvbert.` (its `base_model_prefix`), the MLM
head keeps its name, and with `sharing="type"` a type's one module is saved once as `lvbert.shared.<type>.*`
(the project's state dict repeats it under every slot of that type).
"""
from __future__ import annotations

from ..arch import Arch
from ..errors import UserError
from .configuration_lvbert import LVBertConfig

TIED = "head.decoder.weight"  # the MLM decoder: the word embedding itself, never stored


def hf_config(cfg, arch, **kwargs) -> LVBertConfig:
    """LVBertConfig of a ModelConfig and a layer order (anything `Arch.parse` reads: an Arch, a list of layer
    types, a compact string, a name, ...); kwargs add HF fields (num_labels, ...)."""
    return LVBertConfig.from_model_config(cfg, list(Arch.parse(arch)), **kwargs)


def model_config(config: LVBertConfig):
    """(ModelConfig, Arch) of an LVBertConfig."""
    from ..config import ModelConfig

    return ModelConfig.from_dict(config.model_config_dict()), Arch(config.check_layer_types())


def hf_state_dict(state: dict, types, sharing: str = "none") -> dict:
    """The project's MLM state dict (fixed model or frozen supernet) renamed for `LVBertForMaskedLM`."""
    import torch

    out: dict = {}
    for key, value in state.items():
        top, _, rest = key.partition(".")
        if top == "embeddings":
            name = f"lvbert.{key}"
        elif top == "layers":
            index, _, param = rest.partition(".")
            if not index.isdigit() or int(index) >= len(types):
                raise UserError(f"weights hold {key!r} but the architecture has {len(types)} slots")
            slot = types[int(index)] if sharing == "type" else index
            name = f"lvbert.{'shared' if sharing == 'type' else 'layers'}.{slot}.{param}"
        elif top == "head":
            name = key
        else:
            raise UserError(f"unexpected weight {key!r}: not an LV-BERT masked-language model")
        if name in out and not torch.equal(out[name], value):
            raise UserError(f"weights of the shared {types[int(index)]} layer differ between slots ({key})")
        out[name] = value
    return out


def project_state_dict(hf_model) -> dict:
    """The inverse of hf_state_dict: an `LVBertForMaskedLM` (HF) state dict in the project's names."""
    enc = hf_model.lvbert
    out = {f"embeddings.{k}": v for k, v in enc.embeddings.state_dict().items()}
    for i, layer in enumerate(enc.slots()):
        out.update({f"layers.{i}.{k}": v for k, v in layer.state_dict().items()})
    out.update({f"head.{k}": v for k, v in hf_model.head.state_dict().items() if not k.startswith("decoder.")})
    return out


def to_hf_masked_lm(model_or_state, cfg, types):
    """An `LVBertForMaskedLM` (eval mode) holding the weights of a project model or its state dict."""
    from .modeling_lvbert import LVBertForMaskedLM

    state = model_or_state if isinstance(model_or_state, dict) else model_or_state.state_dict()
    types = list(Arch.parse(types))
    model = LVBertForMaskedLM(hf_config(cfg, types))
    renamed = hf_state_dict(state, types, cfg.sharing)
    expected = model.state_dict()
    for name, value in renamed.items():
        if name in expected and tuple(expected[name].shape) != tuple(value.shape):
            raise UserError(f"weight {name} has shape {tuple(value.shape)} but the config gives "
                            f"{tuple(expected[name].shape)}")
    result = model.load_state_dict(renamed, strict=False)
    missing = sorted(set(result.missing_keys) - {TIED})
    if missing or result.unexpected_keys:
        detail = (f"missing {', '.join(missing[:3])}" if missing
                  else f"unexpected {', '.join(result.unexpected_keys[:3])}")
        raise UserError(f"weights do not match the architecture {''.join(_letters(types))} ({detail})")
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
