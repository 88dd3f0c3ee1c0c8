"""Hugging Face model directories: the HF classes equal the project's model, heads follow transformers' conventions,
`save_hf_model` / `lvbert export` write a directory that round-trips exactly, loads through the Auto* factories after
`import nni_lvbert` (either import order) and with `trust_remote_code=True` where nni_lvbert cannot be imported."""
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from nni_lvbert.config import ModelConfig
from nni_lvbert.errors import UserError
from nni_lvbert.hf import (
    LVBertConfig,
    LVBertForMaskedLM,
    LVBertForPreTraining,
    LVBertForQuestionAnswering,
    LVBertForSequenceClassification,
    LVBertForTokenClassification,
    LVBertModel,
)
from nni_lvbert.hf.convert import hf_config, model_config, to_hf_masked_lm, to_project_model
from nni_lvbert.hf.save import save_hf_model
from nni_lvbert.modeling import FixedMLM as ProjectMLM
from tests.conftest import one_error_line, run_cli, tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")
REPO = Path(__file__).resolve().parent.parent
ARCH = "csfgcsfg"


def batch(vocab=100, b=3, n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (b, n), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    ids[1, 8:] = 0
    types = torch.zeros_like(ids)
    types[:, 6:] = 1
    return ids, mask, types


# --- config -------------------------------------------------------------------------------------------------------

def test_config_holds_every_model_config_field_and_round_trips():
    fields = [f.name for f in dataclasses.fields(ModelConfig)]
    assert list(LVBertConfig.MODEL_CONFIG_FIELDS) == fields
    default = LVBertConfig()
    assert {k: getattr(default, k) for k in fields} == ModelConfig().to_dict()  # same defaults
    cfg = tiny_config(embedding_size=16, glu_activation="silu", sharing="type", glu_ff_size=40)
    config = hf_config(cfg, ["dc", "sa", "glu"])
    assert config.layer_types == ["dc", "sa", "glu"] and config.model_type == "lvbert"
    assert config.num_attention_heads == cfg.num_heads and config.intermediate_size == cfg.ff_size
    assert config.max_position_embeddings == cfg.max_position and config.hidden_dropout_prob == cfg.dropout
    assert (config.conv_heads, config.glu_width) == (cfg.conv_heads, cfg.glu_width)
    back, arch = model_config(LVBertConfig.from_dict(config.to_dict()))
    assert back == cfg and list(arch) == ["dc", "sa", "glu"]


def test_config_refuses_unknown_layer_types():
    with pytest.raises(ValueError, match="layer_types"):
        LVBertModel(LVBertConfig(layer_types=["dc", "xx"], hidden_size=32, num_heads=4))
    with pytest.raises(ValueError, match="layer_types"):
        LVBertModel(LVBertConfig(hidden_size=32))


# --- numerics -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sharing", ["none", "type"])
def test_hf_masked_lm_equals_project_model(sharing):
    cfg = tiny_config(embedding_size=16, sharing=sharing)  # E != H: the E->H projection is used
    project = ProjectMLM(cfg, ARCH).eval()
    hf = to_hf_masked_lm(project, cfg, project.arch)
    ids, mask, types = batch()
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]
    with torch.no_grad():
        ref = project(ids, mask, types, labels=labels, only_masked=False)
        got = hf(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels)
    real = mask.bool()  # the HF model skips padding (its hidden states are 0 there); the project model does not
    torch.testing.assert_close(got.logits[real], ref.logits[real], atol=1e-6, rtol=0)
    torch.testing.assert_close(got.loss, ref.loss, atol=1e-6, rtol=0)
    back = to_project_model(hf)
    with torch.no_grad():
        torch.testing.assert_close(back(ids, mask, types).logits, ref.logits, atol=0, rtol=0)


def test_init_weights_covers_every_parameter():
    """_init_weights alone sets every parameter (DC depthwise kernels and kernel generator, MLM bias included)."""
    model = LVBertForMaskedLM(hf_config(tiny_config(embedding_size=16), ARCH))
    for module in model.modules():
        module.__dict__.pop("_is_hf_initialized", None)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
            p.__dict__.pop("_is_hf_initialized", None)
    model.apply(model._init_weights)
    assert not [n for n, p in model.named_parameters() if torch.isnan(p).any()]
    dc = model.lvbert.layers[0]
    assert dc.depthwise.weight.std() > 0 and dc.kernel.weight.std() > 0
    assert torch.all(model.head.bias == 0) and torch.all(model.lvbert.embeddings.word.weight[0] == 0)
    assert torch.all(dc.norm.weight == 1) and abs(float(dc.value.weight.detach().std()) - 0.02) < 0.01


def test_tied_weights_and_shared_layers_are_stored_once(tmp_path):
    assert LVBertForMaskedLM._tied_weights_keys == {"head.decoder.weight": "lvbert.embeddings.word.weight"}
    model = LVBertForMaskedLM(hf_config(tiny_config(sharing="type"), ARCH))
    assert model.head.decoder.weight is model.lvbert.embeddings.word.weight
    slots = model.lvbert.slots()
    assert slots[0] is slots[4] and len(slots) == len(ARCH)
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert "head.decoder.weight" not in keys and "lvbert.embeddings.word.weight" in keys
    assert {k.split(".")[2] for k in keys if k.startswith("lvbert.shared.")} == {"dc", "sa", "ff", "glu"}
    loaded = LVBertForMaskedLM.from_pretrained(tmp_path)
    assert loaded.head.decoder.weight is loaded.lvbert.embeddings.word.weight
    ids, _mask, _types = batch()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, model.eval()(input_ids=ids).logits, atol=0, rtol=0)


# --- heads --------------------------------------------------------------------------------------------------------

def test_sequence_classification_losses_follow_transformers():
    ids, mask, _types = batch()
    for num_labels, labels, problem in [(1, torch.randn(3), "regression"),
                                        (3, torch.tensor([0, 2, 1]), "single_label_classification"),
                                        (3, torch.tensor([[1., 0, 1], [0, 0, 1], [1, 1, 0]]),
                                         "multi_label_classification")]:
        model = LVBertForSequenceClassification(hf_config(tiny_config(), ARCH, num_labels=num_labels)).eval()
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        assert model.config.problem_type == problem and out.logits.shape == (3, num_labels)
        cls = model.lvbert(ids, mask).last_hidden_state[:, 0]
        logits = model.classifier(cls)  # dropout is off in eval: the [CLS] state, no pooler
        torch.testing.assert_close(out.logits, logits)
        expected = {"regression": lambda x, y: torch.nn.functional.mse_loss(x.squeeze(), y),
                    "single_label_classification": torch.nn.functional.cross_entropy,
                    "multi_label_classification": torch.nn.functional.binary_cross_entropy_with_logits,
                    }[problem](logits, labels)
        torch.testing.assert_close(out.loss, expected)
    assert model.dropout.p == 0.1


def test_token_classification_qa_and_discriminator_heads():
    ids, mask, _types = batch()
    config = hf_config(tiny_config(), ARCH, num_labels=5)
    tok = LVBertForTokenClassification(config).eval()
    labels = torch.randint(0, 5, ids.shape)
    labels[1, 8:] = -100
    out = tok(input_ids=ids, attention_mask=mask, labels=labels)
    assert out.logits.shape == (3, 12, 5)
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.logits[labels != -100],
                                                                             labels[labels != -100]))
    qa = LVBertForQuestionAnswering(config).eval()
    start, end = torch.tensor([1, 30, 4]), torch.tensor([2, 5, 40])  # beyond the sequence: clamped and ignored
    out = qa(input_ids=ids, attention_mask=mask, start_positions=start, end_positions=end)
    assert out.start_logits.shape == out.end_logits.shape == (3, 12)
    ce = lambda logits, pos: torch.nn.functional.cross_entropy(logits, pos.clamp(0, 12), ignore_index=12)
    torch.testing.assert_close(out.loss, (ce(out.start_logits, start) + ce(out.end_logits, end)) / 2)
    disc = LVBertForPreTraining(config).eval()
    head = disc.discriminator_predictions
    assert (head.dense.in_features, head.dense.out_features, head.dense_prediction.out_features) == (32, 32, 1)
    replaced = torch.randint(0, 2, ids.shape)
    out = disc(input_ids=ids, attention_mask=mask, labels=replaced)
    assert out.logits.shape == (3, 12)
    real = mask.bool()
    torch.testing.assert_close(out.loss, torch.nn.functional.binary_cross_entropy_with_logits(
        out.logits[real], replaced[real].float()))


def test_tuple_outputs_and_hidden_states():
    model = LVBertModel(hf_config(tiny_config(), ARCH)).eval()
    ids, mask, types = batch()
    out = model(ids, mask, types, output_hidden_states=True)
    assert len(out.hidden_states) == len(ARCH) + 1 and out.hidden_states[-1] is out.last_hidden_state
    assert isinstance(model(ids, return_dict=False), tuple)
    mlm = LVBertForMaskedLM(hf_config(tiny_config(), ARCH)).eval()
    logits = mlm(input_ids=ids, return_dict=False)[0]
    assert logits.shape == (3, 12, 100)


# --- the model directory ------------------------------------------------------------------------------------------

def test_bundle_imports_only_torch_and_transformers():
    from nni_lvbert.hf.bundle import bundle_sources, check_bundle

    files = bundle_sources()
    text = files["modeling_lvbert.py"]
    for name in ("class SelfAttention", "class DynamicConv", "def lightweight_conv", "class GLUFeedForward",
                 "class Embeddings", "class MLMHead", "class LVBertForMaskedLM", "LAYER_CLASSES ="):
        assert name in text
    assert "from .configuration_lvbert import LVBertConfig" in text
    assert "nni_lvbert" not in "".join(line for line in text.splitlines(True) if "import" in line)
    with pytest.raises(RuntimeError, match="nni_lvbert"):
        check_bundle("x.py", text + "\nfrom nni_lvbert.layers import build_layer\n")
    with pytest.raises(RuntimeError, match="layers"):
        check_bundle("x.py", text + "\nfrom ..layers import build_layer\n")


def _project_model(vocab, sharing="none"):
    cfg = tiny_config(vocab_size=vocab, sharing=sharing)
    return cfg, ProjectMLM(cfg, ARCH).eval()


def test_save_hf_model_writes_a_loadable_directory(tiny, tmp_path):
    from transformers import AutoConfig, AutoModelForMaskedLM

    cfg, project = _project_model(tiny["data"].vocab_size)
    out = save_hf_model(project, cfg, project.arch, tiny["tokenizer"], tmp_path / "m", provenance={"note": "t"})
    names = sorted(p.name for p in out.iterdir())
    assert names == ["config.json", "configuration_lvbert.py", "lvbert.json", "model.safetensors",
                     "modeling_lvbert.py", "tokenizer.json", "tokenizer_config.json"]
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "lvbert" and config["layer_types"] == list(project.arch)
    assert config["architectures"] == ["LVBertForMaskedLM"]
    assert all(config[k] == v for k, v in cfg.to_dict().items())
    assert config["auto_map"]["AutoModelForMaskedLM"] == "modeling_lvbert.LVBertForMaskedLM"
    assert json.loads((out / "lvbert.json").read_text())["note"] == "t"
    umask = os.umask(0)
    os.umask(umask)
    assert all((p.stat().st_mode & 0o777) == 0o666 & ~umask for p in out.iterdir())
    assert isinstance(AutoConfig.from_pretrained(out), LVBertConfig)
    loaded = AutoModelForMaskedLM.from_pretrained(out)
    assert type(loaded) is LVBertForMaskedLM
    ids, mask, types = batch(tiny["data"].vocab_size)
    with torch.no_grad():
        real = mask.bool()  # the HF model skips padding, the project model does not
        torch.testing.assert_close(loaded(input_ids=ids, attention_mask=mask, token_type_ids=types).logits[real],
                                   project(ids, mask, types).logits[real], atol=1e-6, rtol=0)
    # a state dict in the project's names writes the same weights
    again = save_hf_model(project.state_dict(), cfg, project.arch, tiny["tokenizer"], tmp_path / "s")
    assert (again / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()


def test_save_hf_model_refusals_leave_nothing(tiny, tmp_path):
    cfg, project = _project_model(tiny["data"].vocab_size)
    out = tmp_path / "m"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(UserError, match="not empty; pass --overwrite"):
        save_hf_model(project, cfg, project.arch, tiny["tokenizer"], out)
    save_hf_model(project, cfg, project.arch, tiny["tokenizer"], out, overwrite=True)
    assert not (out / "keep.txt").exists() and (out / "config.json").is_file()
    wrong_vocab, other = _project_model(tiny["data"].vocab_size + 1)
    with pytest.raises(UserError, match="tokens but the model has a vocabulary"):
        save_hf_model(other, wrong_vocab, other.arch, tiny["tokenizer"], tmp_path / "v")
    with pytest.raises(UserError, match="slots"):
        save_hf_model(project, cfg, ARCH[:4], tiny["tokenizer"], tmp_path / "a")
    with pytest.raises(UserError, match="tokenizer directory not found"):
        save_hf_model(project, cfg, project.arch, tmp_path / "none", tmp_path / "t")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temp directories, no partial outputs


# --- lvbert export ------------------------------------------------------------------------------------------------

def test_export_round_trips_the_subnet_exactly(tiny, tmp_path, capsys):
    from transformers import AutoModelForMaskedLM

    from nni_lvbert.arch import Arch
    from nni_lvbert.supernet.rundir import load_supernet

    out = tmp_path / "best"
    code, stdout, _ = run_cli(["export", "--supernet", str(tiny["run"]), "--arch", "csfgcs", "--out", str(out),
                               "--json"], capsys)
    assert code == 0 and json.loads(stdout)["arch"] == "csfgcs"
    # the space block names the size the supernet was trained at, not its space file's default (issue #41)
    trained = load_supernet(tiny["run"]).meta["size"]
    assert json.loads(stdout)["space"]["size"] == json.loads((out / "lvbert.json").read_text())["space"]["size"] == trained
    subnet = load_supernet(tiny["run"]).space.freeze(Arch.parse("csfgcs", load_supernet(tiny["run"]).spec).dict)
    loaded = AutoModelForMaskedLM.from_pretrained(out)
    hf_state = loaded.state_dict()
    for key, value in subnet.state_dict().items():
        top, _, _rest = key.partition(".")
        assert torch.equal(hf_state[key if top == "head" else f"lvbert.{key}"], value), key
    ids, mask, types = batch(tiny["data"].vocab_size, n=20)
    with torch.no_grad():
        ref = subnet.eval()(ids, mask, types).logits
        got = loaded(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    real = mask.bool()  # the HF model skips padding, the supernet's subnet does not
    torch.testing.assert_close(got[real], ref[real], atol=1e-6, rtol=0)


def test_export_fill_mask_pipeline(tiny, tmp_path, capsys):
    from transformers import pipeline

    out = tmp_path / "fm"
    assert run_cli(["export", "--supernet", str(tiny["run"]), "--arch", "bert", "--out", str(out)], capsys)[0] == 0
    results = pipeline("fill-mask", model=str(out))("the history of the [MASK] is long.")
    assert len(results) == 5 and all({"score", "token", "token_str", "sequence"} <= set(r) for r in results)


def _fake_iot_run(tiny, path):
    """A copy of the supernet run with the files of an IOT run (orders, predictor, final usage)."""
    from nni_lvbert.arch import parse_arch
    from nni_lvbert.iot.routing import OrderPredictor
    from nni_lvbert.iot.rundir import PREDICTOR, save_orders
    from nni_lvbert.rundir import RunDir

    shutil.copytree(tiny["run"], path)
    run = RunDir(path, "IOT")
    spec = run.spec
    orders = [parse_arch(o, spec) for o in ("ccssff", "sfsfsf", "gggccc")]
    save_orders(run, orders, {"explicit": True})
    run.save_weights(OrderPredictor(run.cfg.embedding_size, 3), PREDICTOR)
    meta = run.meta
    meta["final"] = {"orders": [{"arch": o.compact, "usage": u} for o, u in zip(orders, (0.2, 0.5, 0.3))]}
    run.write_json("meta.json", meta)
    return path


def test_export_from_an_iot_run(tiny, tmp_path, capsys):
    iot = _fake_iot_run(tiny, tmp_path / "iot")
    code, stdout, _ = run_cli(["export", "--supernet", str(iot), "--out", str(tmp_path / "a")], capsys)
    shown = dict(line.split(None, 1) for line in stdout.splitlines())  # without --json: one `field  value` line each
    assert code == 0 and shown["arch"] == "sfsfsf" and shown["source"] == "iot" and shown["out"] == str(tmp_path / "a")
    code, stdout, _ = run_cli(["export", "--supernet", str(iot), "--arch", "gggccc", "--out", str(tmp_path / "b")],
                              capsys)
    assert code == 0 and json.loads((tmp_path / "b" / "config.json").read_text())["layer_types"][:3] == ["glu"] * 3
    code, _, err = run_cli(["export", "--supernet", str(iot), "--arch", "cccccc", "--out", str(tmp_path / "c")],
                           capsys)
    assert code == 2 and "not one of the IOT run's orders" in one_error_line(err)


def test_export_refusals(tiny, tmp_path, capsys):
    args = ["export", "--supernet", str(tiny["run"]), "--out", str(tmp_path / "x")]
    for extra, message in [([], "give the subnet with --arch"), (["--arch", "csfgcz"], "unknown layer letter"),
                           (["--arch", "csf"], "arch has 3 slots")]:
        code, _, err = run_cli(args + extra, capsys)
        assert code == 2 and message in one_error_line(err)
    code, _, err = run_cli(["export", "--supernet", str(tmp_path / "nope"), "--arch", "csfgcs", "--out",
                            str(tmp_path / "y")], capsys)
    assert code == 2 and "not found" in one_error_line(err)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


# --- fresh processes: import order, trust_remote_code -------------------------------------------------------------

def _python(code: str, cwd, **env) -> str:
    full_env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore", **env)
    full_env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_import_nni_lvbert_is_light(tmp_path):
    out = _python("import sys, nni_lvbert; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))",
                  tmp_path)
    assert out.strip() == "[]"


@pytest.fixture(scope="module")
def saved(tiny, tmp_path_factory):
    """An exported directory and reference logits of its subnet (saved with torch for the fresh processes)."""
    from nni_lvbert.arch import Arch
    from nni_lvbert.supernet.rundir import load_supernet

    root = tmp_path_factory.mktemp("saved")
    sn = load_supernet(tiny["run"])
    arch = Arch.parse("cgsfcs", sn.spec)
    save_hf_model(sn.space.freeze(arch.dict), sn.cfg, arch, tiny["tokenizer"], root / "model")
    ids, mask, types = batch(tiny["data"].vocab_size, n=20)
    with torch.no_grad():
        logits = sn.space.freeze(arch.dict).eval()(ids, mask, types).logits
    torch.save({"ids": ids, "mask": mask, "types": types, "logits": logits}, root / "ref.pt")
    return root


CHECK = """
import torch
ref = torch.load({ref!r})
model = AutoModelForMaskedLM.from_pretrained({model!r}{trust})
with torch.no_grad():
    got = model(input_ids=ref["ids"], attention_mask=ref["mask"], token_type_ids=ref["types"]).logits
real = ref["mask"].bool()  # the HF model skips padding, the supernet's subnet does not
torch.testing.assert_close(got[real], ref["logits"][real], atol=1e-6, rtol=0)
print(type(model).__module__, type(AutoConfig.from_pretrained({model!r}{trust})).__name__)
"""


@pytest.mark.slow
@pytest.mark.parametrize("order", ["nni_lvbert first", "transformers first", "hf classes first"])
def test_registration_in_either_import_order(saved, order):
    first = {"nni_lvbert first": "import nni_lvbert\nfrom transformers import AutoConfig, AutoModelForMaskedLM\n",
             "transformers first": "from transformers import AutoConfig, AutoModelForMaskedLM\nimport nni_lvbert\n",
             # our module imports transformers, which loads configuration_auto while ours is still half-imported
             "hf classes first": "from nni_lvbert.hf import LVBertForMaskedLM\n"
                                 "from transformers import AutoConfig, AutoModelForMaskedLM\n"}[order]
    check = CHECK.format(ref=str(saved / "ref.pt"), model=str(saved / "model"), trust="")
    extra = ("from transformers import AutoModelForSequenceClassification as S, AutoModelForPreTraining as P\n"
             f"print(type(S.from_pretrained({str(saved / 'model')!r}, num_labels=2)).__name__, "
             f"type(P.from_pretrained({str(saved / 'model')!r})).__name__)\n")
    out = _python(first + check + extra, saved).split()
    assert out == ["nni_lvbert.hf.modeling_lvbert", "LVBertConfig", "LVBertForSequenceClassification",
                   "LVBertForPreTraining"]


@pytest.mark.slow
def test_trust_remote_code_without_nni_lvbert(saved):
    block = "import sys\nsys.modules['nni_lvbert'] = None\nfrom transformers import AutoConfig, AutoModelForMaskedLM\n"
    check = CHECK.format(ref=str(saved / "ref.pt"), model=str(saved / "model"), trust=", trust_remote_code=True")
    fill = ("from transformers import pipeline\n"
            f"print(len(pipeline('fill-mask', model={str(saved / 'model')!r}, trust_remote_code=True)"
            "('the history of the [MASK] is long.')))\n"
            "try:\n    import nni_lvbert\nexcept ImportError:\n    print('blocked')\n")
    # the bundled code exports too (#32: it stopped at a data-dependent guard on the padding)
    export = ("kw = dict(input_ids=ref['ids'], attention_mask=ref['mask'])\n"
              "ep = torch.export.export(model.eval(), (), kw, strict=False)\n"
              "print(bool(torch.equal(ep.module()(**kw).logits, model(**kw).logits)))\n")
    out = _python(block + check + fill + export, saved, HF_MODULES_CACHE=str(saved / "modules")).split()
    assert out[0].startswith("transformers_modules.") and out[1:] == ["LVBertConfig", "5", "blocked", "True"]


@pytest.mark.parametrize("arch", ["csfgcsfg", "sfsf"])
def test_padded_batch_equals_each_sequence_alone(arch):
    """The HF model skips padding (packed real tokens): every sequence of a padded batch gets the hidden states it
    gets alone, unpadded; the padding positions are 0."""
    model = LVBertModel(hf_config(tiny_config(), arch)).eval()
    ids, mask, types = batch(b=3, n=12)
    mask[2, 5:] = 0
    with torch.no_grad():
        out = model(ids, mask, types).last_hidden_state
        for i in range(3):
            n = int(mask[i].sum())
            alone = model(ids[i:i + 1, :n], mask[i:i + 1, :n], types[i:i + 1, :n]).last_hidden_state
            torch.testing.assert_close(out[i:i + 1, :n], alone, atol=1e-5, rtol=1e-5)
    assert out[~mask.bool()].abs().max() == 0
