"""The Hugging Face model directories of a pre-training run, written by the project's one writer
(`nni_lvbert.hf.save_hf_model`: config.json, model.safetensors, tokenizer, bundled code, lvbert.json).

    RUN/hf/             MLM: the model (LVBertForMaskedLM). ELECTRA: the discriminator (LVBertForPreTraining):
                        the encoder to fine-tune (AutoModelForSequenceClassification etc. load it, new head)
    RUN/hf-generator/   ELECTRA: the generator (LVBertForMaskedLM; its word/position/segment embeddings and
                        embedding LayerNorm are the discriminator's): fill-mask

The SOP classifier is not part of either directory (it stays in RUN/pretrain.safetensors).
"""
from __future__ import annotations

HF_DIR, GENERATOR_DIR = "hf", "hf-generator"


def not_a_model_dir(path) -> str:
    """The one-line error for `--model PATH` without a config.json (every command that takes --model): a pre-training
    run (or a `lvbert run` directory) is pointed to the model directory inside it."""
    from pathlib import Path

    p = Path(path)
    for run in (p, p / "pretrain"):  # a pretrain run; `lvbert run`'s directory holds one in pretrain/
        model = run / HF_DIR
        if (model / "config.json").is_file():
            what = "a pretrain run" if run == p else "a `lvbert run` directory"
            generator = run / GENERATOR_DIR
            extra = (f"; its ELECTRA generator (fill-mask) is {generator}" if (generator / "config.json").is_file()
                     else "")
            return f"--model {p} is {what}; its model is {model} (pass --model {model}){extra}"
    return (f"--model {p}: not a model directory (no config.json); make one with `lvbert export` or "
            "`lvbert pretrain`")


def discriminator_to_hf(electra, cfg, arch):
    """An HF `LVBertForPreTraining` (eval mode) holding the discriminator's weights exactly."""
    from ..hf.convert import hf_config, hf_state_dict
    from ..hf.modeling_lvbert import LVBertForPreTraining

    state = hf_state_dict(electra.discriminator.state_dict(), list(arch), cfg.sharing)  # embeddings.*, layers.*
    state.update({f"discriminator_predictions.{k}": v for k, v in electra.disc_head.state_dict().items()})
    model = LVBertForPreTraining(hf_config(cfg, arch))
    model.load_state_dict(state, strict=True)
    return model.eval()


def write_hf_dirs(run, model, objective: str, cfg, gen_cfg, arch, provenance: dict) -> dict:
    """Write RUN/hf (and RUN/hf-generator for ELECTRA), replacing earlier copies (a resumed, finished run);
    {"hf": path, "hf_generator": path or None, "hf_model": class, ...}."""
    from ..hf import save_hf_model

    tokenizer = run / "tokenizer"
    common = {**provenance, "arch": arch.compact}
    if objective == "mlm":
        save_hf_model(model.mlm, cfg, arch, tokenizer, run / HF_DIR, overwrite=True,
                      provenance={**common, "role": "masked-language model"})
        return {"hf": str(run / HF_DIR), "hf_model": "LVBertForMaskedLM", "hf_generator": None}
    save_hf_model(discriminator_to_hf(model, cfg, arch), tokenizer_dir=tokenizer, out_dir=run / HF_DIR,
                  overwrite=True, provenance={**common, "role": "ELECTRA discriminator (encoder for fine-tuning)"})
    save_hf_model(model.generator, gen_cfg, arch, tokenizer, run / GENERATOR_DIR, overwrite=True,
                  provenance={**common, "role": "ELECTRA generator (masked-language model)"})
    return {"hf": str(run / HF_DIR), "hf_model": "LVBertForPreTraining", "hf_generator": str(run / GENERATOR_DIR),
            "hf_generator_model": "LVBertForMaskedLM"}
