"""Graph export of the transformers classes: `torch.export` programs and ONNX files (`lvbert export --onnx`).

Batch and sequence length stay dynamic (the sequence up to `max_position`). The traced forward has no data-dependent
branch: padded batches keep their padding in place, masked, instead of skipping it (`layers.rows.tracing`), so one
graph serves padded and unpadded inputs and gives what the eager model gives (zeros at padded positions included).

onnx and onnxscript (to write) and onnxruntime (to run and check) are not dependencies of the package: `--onnx` says
so in one line when they are missing.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import UserError

ONNX_FILE = "model.onnx"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
# the graph outputs of each class: its ModelOutput's tensors in field order (loss and hidden states are None)
OUTPUT_NAMES = {"LVBertModel": ("last_hidden_state",), "LVBertForQuestionAnswering": ("start_logits", "end_logits")}
ONNX_PACKAGES = ("onnx", "onnxscript")


def output_names(model) -> tuple[str, ...]:
    name = type(model).__name__
    return OUTPUT_NAMES.get(name, ("last_hidden_state",) if name.endswith("Model") else ("logits",))


def example_inputs(config, batch: int = 2, seq: int = 8, seed: int = 0) -> dict:
    """int64 input_ids / attention_mask / token_type_ids; the last sequence padded after half its length."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(config.pad_token_id + 1, config.vocab_size, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[-1, seq // 2:] = 0
    ids = ids.masked_fill(mask == 0, config.pad_token_id)
    types = torch.zeros(batch, seq, dtype=torch.long)
    types[:, seq // 2:] = min(1, config.type_vocab_size - 1)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def dynamic_shapes(config) -> dict:
    """Batch and sequence length dynamic for every input (the sequence at most the position table)."""
    from torch.export import Dim

    batch, seq = Dim("batch", min=1, max=4096), Dim("sequence", min=1, max=config.max_position)
    return {name: {0: batch, 1: seq} for name in INPUT_NAMES}


def export_program(model, inputs: dict | None = None):
    """`torch.export.export(model, (), inputs, strict=False)` with dynamic batch and sequence (eval mode)."""
    import torch

    model.eval()
    inputs = inputs or example_inputs(model.config)
    return torch.export.export(model, (), inputs, dynamic_shapes=dynamic_shapes(model.config), strict=False)


def check_onnx_packages() -> None:
    """UserError (one line) when the ONNX exporter's packages are missing."""
    import importlib.util

    missing = [p for p in ONNX_PACKAGES if importlib.util.find_spec(p) is None]
    if missing:
        raise UserError(f"--onnx needs {' and '.join(missing)}, which nni-lvbert does not install: "
                        "pip install onnx onnxscript onnxruntime")


def export_onnx(model, path, inputs: dict | None = None) -> Path:
    """Write `model` (eval mode) as one ONNX file (`torch.onnx.export(dynamo=True)`, weights inside the file)."""
    import contextlib
    import io
    import logging
    import warnings

    import torch

    check_onnx_packages()
    model.eval()
    inputs = inputs or example_inputs(model.config)
    path = Path(path)
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "torchvision is not installed" notes
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):  # its progress lines
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (), str(path), kwargs=inputs, dynamo=True, external_data=False,
                              dynamic_shapes=dynamic_shapes(model.config), input_names=list(INPUT_NAMES),
                              output_names=list(output_names(model)), verbose=False)
    finally:
        quiet.setLevel(level)
    return path


def run_onnx(path, inputs: dict) -> list:
    """The ONNX file's outputs on `inputs` (torch tensors or numpy arrays) with onnxruntime on the CPU."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in inputs.items()})


def onnx_max_error(model, path, inputs: dict | None = None) -> float | None:
    """Largest |ONNX Runtime - PyTorch| over the outputs on a padded batch; None without onnxruntime."""
    import importlib.util

    import torch

    if importlib.util.find_spec("onnxruntime") is None:
        return None
    inputs = inputs or example_inputs(model.config, batch=3, seq=min(16, model.config.max_position), seed=1)
    with torch.no_grad():
        expected = model.eval()(**inputs, return_dict=False)
    got = run_onnx(path, inputs)
    return max(float(abs(g - e.numpy()).max()) for g, e in zip(got, expected))


def load_model_dir(directory):
    """The LV-BERT model of a Hugging Face directory (the class of its config's `architectures`)."""
    import json

    from . import modeling_lvbert

    directory = Path(directory)
    config_file = directory / "config.json"
    if not config_file.is_file():
        from ..pretrain.hf_output import not_a_model_dir

        raise UserError(not_a_model_dir(directory))
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {config_file}: {e}") from None
    names = config.get("architectures") or []
    if config.get("model_type") != "lvbert" or not names or not hasattr(modeling_lvbert, names[0]):
        raise UserError(f"{directory} is not an LV-BERT model directory (model_type {config.get('model_type')!r}, "
                        f"architectures {names}); export other models with transformers' own tools")
    return getattr(modeling_lvbert, names[0]).from_pretrained(str(directory)).eval()


def write_onnx(directory, model=None) -> dict:
    """Write DIR/model.onnx for the model directory DIR (or for `model`, its content); a JSON-ready summary with
    ONNX Runtime's largest difference to PyTorch on a padded batch (None when onnxruntime is not installed)."""
    check_onnx_packages()
    model = model if model is not None else load_model_dir(directory)
    path = export_onnx(model, Path(directory) / ONNX_FILE)
    return {"onnx": str(path), "onnx_inputs": list(INPUT_NAMES), "onnx_outputs": list(output_names(model)),
            "onnx_max_abs_diff": onnx_max_error(model, path)}
