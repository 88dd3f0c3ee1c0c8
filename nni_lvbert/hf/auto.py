"""Registration with transformers' Auto* factories (model_type "lvbert").

Two steps, because their costs differ by seconds: the config needs only transformers' configuration code, the
model classes need `transformers.modeling_utils` (about 3 s to import on 2 busy cores). `nni_lvbert.hf.hook`
takes each step when the matching Auto module is loaded, so a process that only tokenizes pays for neither.
"""
from __future__ import annotations

# Auto factory -> model class (names in modeling_lvbert): what register() registers and what auto_map names.
AUTO_CLASS_NAMES = {
    "AutoModel": "LVBertModel",
    "AutoModelForMaskedLM": "LVBertForMaskedLM",
    "AutoModelForPreTraining": "LVBertForPreTraining",
    "AutoModelForSequenceClassification": "LVBertForSequenceClassification",
    "AutoModelForTokenClassification": "LVBertForTokenClassification",
    "AutoModelForQuestionAnswering": "LVBertForQuestionAnswering",
}

_done = {"config": False, "models": False}


def register(models: bool = True) -> None:
    """Register LVBertConfig with AutoConfig and (models=True) every model class with its Auto factory.
    Idempotent; safe to call again after a partial (config-only) registration."""
    from transformers.models.auto.configuration_auto import AutoConfig

    from .configuration_lvbert import LVBertConfig

    if not _done["config"]:
        AutoConfig.register(LVBertConfig.model_type, LVBertConfig, exist_ok=True)
        _done["config"] = True
    if models and not _done["models"]:
        from transformers.models.auto import modeling_auto

        from . import modeling_lvbert

        for auto_name, class_name in AUTO_CLASS_NAMES.items():
            getattr(modeling_auto, auto_name).register(LVBertConfig, getattr(modeling_lvbert, class_name),
                                                       exist_ok=True)
        _done["models"] = True


def registered() -> dict:
    """{"config": bool, "models": bool}: what has been registered in this process."""
    return dict(_done)
