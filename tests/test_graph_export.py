"""Graph export (issue #32): every transformers class exports with torch.export (strict=False, dynamic batch and
sequence) and through torch.onnx's dynamo exporter, padded or not, all four layer types, with and without sharing;
the exported graphs give what the eager model gives; `lvbert export --onnx` writes model.onnx into the directory."""
import json

import pytest
import torch

from nni_lvbert.cli import main
from nni_lvbert.hf import modeling_lvbert
from nni_lvbert.hf.convert import hf_config
from nni_lvbert.hf.exporting import ONNX_FILE, example_inputs, export_program, run_onnx
from nni_lvbert.hf.save import save_hf_model
from tests.conftest import one_error, run_cli, tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")
ORDER = ["dc", "sa", "ff", "glu", "dc", "sa"]  # every layer type; with sharing="type" dc and sa run twice
HEADS = ["LVBertModel", "LVBertForMaskedLM", "LVBertForPreTraining", "LVBertForSequenceClassification",
         "LVBertForTokenClassification", "LVBertForQuestionAnswering"]


def build(name: str, sharing: str, vocab: int = 100):
    torch.manual_seed(0)
    return getattr(modeling_lvbert, name)(hf_config(tiny_config(vocab_size=vocab, sharing=sharing), ORDER)).eval()


def outputs(model, inputs) -> tuple:
    with torch.no_grad():
        out = model(**inputs)
    return out.to_tuple() if hasattr(out, "to_tuple") else tuple(out)


@pytest.mark.parametrize("name,sharing", [(n, "type" if i % 2 else "none") for i, n in enumerate(HEADS)])
def test_torch_export_of_every_head(name, sharing):
    """Traced on a padded batch of 2 x 8, the program runs batches of other sizes, padded and not, as eager does:
    no data-dependent guard, no specialised shape."""
    model = build(name, sharing)
    program = export_program(model, example_inputs(model.config, batch=2, seq=8))
    padded = example_inputs(model.config, batch=5, seq=13, seed=1)
    full = {**padded, "attention_mask": torch.ones_like(padded["attention_mask"])}
    for inputs in (padded, full):
        expected, got = outputs(model, inputs), outputs(program.module(), inputs)
        assert len(expected) == len(got) >= 1
        for e, g in zip(expected, got):
            torch.testing.assert_close(g, e, atol=1e-5, rtol=0)
    if name == "LVBertModel":  # padded positions are zero, as the eager model's packed path leaves them
        hidden = outputs(program.module(), padded)[0]
        assert hidden[padded["attention_mask"] == 0].abs().max() == 0
        assert hidden[padded["attention_mask"] == 1].abs().min() > 0


def test_lvbert_export_onnx_from_a_supernet(tiny, tmp_path, capsys):
    from transformers import AutoModelForMaskedLM

    out = tmp_path / "best"
    code, stdout, _ = run_cli(["export", "--supernet", str(tiny["run"]), "--arch", "csfgcs", "--out", str(out),
                               "--onnx", "--json"], capsys)
    summary = json.loads(stdout)
    assert code == 0 and summary["onnx"] == str(out / ONNX_FILE) and ONNX_FILE in summary["files"]
    assert summary["onnx_outputs"] == ["logits"] and summary["onnx_max_abs_diff"] < 1e-4
    model = AutoModelForMaskedLM.from_pretrained(out).eval()
    inputs = example_inputs(model.config, batch=4, seq=20, seed=2)
    (logits,) = run_onnx(out / ONNX_FILE, inputs)
    assert abs(logits - outputs(model, inputs)[0].numpy()).max() < 1e-4


def test_lvbert_export_onnx_of_a_model_directory(tiny, tmp_path, capsys):
    """`--model DIR --onnx` for a fine-tuned-style directory (question answering: two outputs; shared layers); ONNX
    Runtime within 1e-4 of PyTorch on padded batches the graph was not traced on."""
    model = build("LVBertForQuestionAnswering", "type", vocab=tiny["data"].vocab_size)
    directory = save_hf_model(model, tokenizer_dir=tiny["tokenizer"], out_dir=tmp_path / "qa")
    code, stdout, _ = run_cli(["export", "--model", str(directory), "--onnx", "--json"], capsys)
    summary = json.loads(stdout)
    assert code == 0 and summary["onnx_outputs"] == ["start_logits", "end_logits"]
    assert summary["onnx_max_abs_diff"] < 1e-4
    assert not list(directory.glob("*.data"))  # the weights are inside model.onnx
    for batch, seq in ((3, 17), (1, 5)):
        inputs = example_inputs(model.config, batch=batch, seq=seq, seed=batch)
        got, expected = run_onnx(directory / ONNX_FILE, inputs), outputs(model, inputs)
        assert [g.shape for g in got] == [tuple(e.shape) for e in expected] == [(batch, seq)] * 2
        for e, g in zip(expected, got):
            assert abs(g - e.numpy()).max() < 1e-4


def test_lvbert_export_onnx_refusals(tiny, model_dir, tmp_path, capsys, monkeypatch):
    """One `error:` line for a directory that is not LV-BERT's, missing options and missing ONNX packages."""
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    for argv, needle in [(["--model", str(bert), "--onnx"], "not an LV-BERT model directory"),
                         (["--model", str(tmp_path / "nope"), "--onnx"], "not a model directory"),
                         (["--model", str(model_dir)], "needs --onnx"),
                         (["--model", str(model_dir), "--onnx", "--out", "x"], "drop --supernet/--arch/--out"),
                         (["--arch", "csfgcs"], "give --supernet RUN and --out DIR")]:
        one_error(capsys, main(["export", *argv]), needle)

    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxscript" else real(name, *a))
    out = tmp_path / "never"
    code = main(["export", "--supernet", str(tiny["run"]), "--arch", "csfgcs", "--out", str(out), "--onnx"])
    one_error(capsys, code, "--onnx needs onnxscript", "pip install onnx onnxscript onnxruntime")
    assert not out.exists()  # refused before anything was written
    one_error(capsys, main(["export", "--model", str(model_dir), "--onnx"]), "--onnx needs onnxscript")
