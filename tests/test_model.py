"""Fixed model vs HF BERT, NNI space vs fixed model, sharing, factorized embeddings, parameter counts, and the one
MLM-accuracy function (exact ties) that training, the search scorer, the nnictl trial and IOT share."""
import pytest
import torch

from nni_lvbert.arch import parse_arch, to_dict
from nni_lvbert.config import SpaceSpec, load_size, load_space
from nni_lvbert.info import param_counts
from nni_lvbert.modeling import FixedMLM
from tests.conftest import tiny_config


def bert_names(n_layers: int) -> dict[str, str]:
    """The oracle mapping: our `bert`-arch MLM model's parameter names -> transformers' BertForMaskedLM names."""
    m = {
        "embeddings.word.weight": "bert.embeddings.word_embeddings.weight",
        "embeddings.position.weight": "bert.embeddings.position_embeddings.weight",
        "embeddings.segment.weight": "bert.embeddings.token_type_embeddings.weight",
        "embeddings.norm.weight": "bert.embeddings.LayerNorm.weight",
        "embeddings.norm.bias": "bert.embeddings.LayerNorm.bias",
        "head.dense.weight": "cls.predictions.transform.dense.weight",
        "head.dense.bias": "cls.predictions.transform.dense.bias",
        "head.norm.weight": "cls.predictions.transform.LayerNorm.weight",
        "head.norm.bias": "cls.predictions.transform.LayerNorm.bias",
        "head.bias": "cls.predictions.bias",
    }
    for i in range(n_layers):
        hf_l = f"bert.encoder.layer.{i}."
        sa, ff = f"layers.{2 * i}.", f"layers.{2 * i + 1}."
        for ours_name, hf_name in [("query", "attention.self.query"), ("key", "attention.self.key"),
                                   ("value", "attention.self.value"), ("out", "attention.output.dense"),
                                   ("norm", "attention.output.LayerNorm")]:
            for w in ("weight", "bias"):
                m[f"{sa}{ours_name}.{w}"] = f"{hf_l}{hf_name}.{w}"
        for ours_name, hf_name in [("fc1", "intermediate.dense"), ("fc2", "output.dense"), ("norm", "output.LayerNorm")]:
            for w in ("weight", "bias"):
                m[f"{ff}{ours_name}.{w}"] = f"{hf_l}{hf_name}.{w}"
    return m


def copy_hf_bert_into_ours(hf, ours, n_layers):
    sd = hf.state_dict()
    m = bert_names(n_layers)
    ours_sd = ours.state_dict()
    assert set(ours_sd) == set(m), set(ours_sd) ^ set(m)
    ours.load_state_dict({k: sd[v] for k, v in m.items()})


def test_bert_arch_equals_transformers_bert():
    from transformers import BertConfig, BertForMaskedLM

    hf_cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, hidden_act="gelu", max_position_embeddings=64, type_vocab_size=2,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    hf = BertForMaskedLM(hf_cfg).eval()
    ours = FixedMLM(tiny_config(), "sfsf").eval()
    copy_hf_bert_into_ours(hf, ours, 2)
    ids = torch.randint(1, 100, (3, 17))
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0
    mask[2, 5:] = 0
    types = torch.zeros_like(ids)
    types[:, 8:] = 1
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        got = ours(ids, mask, types).logits
    real = mask.bool()
    torch.testing.assert_close(got[real], ref[real], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("arch", ["lvbert-small", "bert", "dynamicconv", "sandwich", "gcsfgcsfgcsfgcsfgcsfgcsf"])
@pytest.mark.parametrize("sharing", ["none", "type"])
def test_frozen_space_equals_fixed_model(arch, sharing):
    from nni_lvbert.space import LVBertSpace

    spec = load_space("lvbert")
    cfg = tiny_config(vocab_size=64, sharing=sharing)
    space = LVBertSpace(spec, cfg)
    types = parse_arch(arch, spec)
    frozen = space.freeze(to_dict(types)).eval()
    fixed = FixedMLM(cfg, arch).eval()
    fixed.load_state_dict(frozen.state_dict())
    ids = torch.randint(1, 64, (2, 10))
    mask = torch.ones_like(ids)
    mask[0, 7:] = 0
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]
    with torch.no_grad():
        a, b = frozen(ids, mask, labels=labels), fixed(ids, mask, labels=labels)
    torch.testing.assert_close(a.logits, b.logits, atol=0, rtol=0)
    assert a.loss == b.loss


def test_space_has_one_labelled_choice_per_slot():
    from nni_lvbert.space import LVBertSpace

    spec = SpaceSpec(name="t", slots=6, candidates=["sa", "ff"])
    space = LVBertSpace(spec, tiny_config())
    js = space.search_space_json()
    assert list(js) == [f"layer{i:02d}" for i in range(6)]
    assert all(v == {"_type": "choice", "_value": ["sa", "ff"]} for v in js.values())


def test_sharing_by_type_shares_modules():
    fixed = FixedMLM(tiny_config(sharing="type"), "sfsfcc")
    assert fixed.layers[0] is fixed.layers[2] and fixed.layers[4] is fixed.layers[5]
    assert fixed.layers[0] is not fixed.layers[1]
    unshared = FixedMLM(tiny_config(), "sfsfcc")
    n = lambda m: sum(p.numel() for p in m.parameters())
    assert n(fixed) < n(unshared)
    assert param_counts(tiny_config(sharing="type"), fixed.arch)["total"] == n(fixed)


def test_factorized_embedding_projects_to_hidden():
    cfg = tiny_config(embedding_size=16)
    model = FixedMLM(cfg, "sfcg")
    assert model.embeddings.word.weight.shape == (100, 16)
    out = model(torch.randint(0, 100, (2, 5)))
    assert out.logits.shape == (2, 5, 100)
    assert param_counts(cfg, model.arch)["total"] == sum(p.numel() for p in model.parameters())


def test_mlm_head_is_tied_and_only_masked_matches_full():
    model = FixedMLM(tiny_config(), "sfcg").eval()
    assert model.head.word[0] is model.embeddings.word
    ids = torch.randint(0, 100, (2, 8))
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[1, 5] = 7, 9
    full = model(ids, labels=labels, only_masked=False)
    sparse = model(ids, labels=labels)
    torch.testing.assert_close(full.loss, sparse.loss)
    assert full.correct == sparse.correct and sparse.count == 2


@pytest.mark.parametrize("arch,backbone", [("bert", 9.5), ("lvbert-small", 8.5), ("dynamicconv", 9.6)])
def test_small_parameter_counts_match_lvbert_table(arch, backbone):
    cfg = load_size("small")
    counts = param_counts(cfg, parse_arch(arch, load_space("lvbert")))
    assert round(counts["backbone"] / 1e6, 1) == backbone
    assert round(counts["word_embedding"] / 1e6, 1) == 3.9


def test_fixed_model_param_count_equals_info():
    cfg = load_size("tiny")
    model = FixedMLM(cfg, "lvbert-small")
    assert param_counts(cfg, model.arch)["total"] == sum(p.numel() for p in model.parameters())


def test_dropout_zero_means_train_equals_eval():
    model = FixedMLM(tiny_config(dropout=0.0, attention_dropout=0.0), "sfcg")
    ids = torch.randint(0, 100, (2, 8))
    torch.testing.assert_close(model.train()(ids).logits, model.eval()(ids).logits)


@pytest.mark.parametrize("shape", [(50, 97), (4, 7, 33)])
def test_mlm_correct_is_argmax_equals_target_including_ties(shape):
    from nni_lvbert.modeling import mlm_accuracy, mlm_correct

    g = torch.Generator().manual_seed(0)
    logits = torch.randint(0, 4, shape, generator=g).float()  # few distinct values: many ties
    target = torch.randint(0, shape[-1], shape[:-1], generator=g)
    target.view(-1)[::5] = -100  # ignored positions never count
    target.view(-1)[1::7] = logits.reshape(-1, shape[-1]).argmax(-1)[1::7]  # and plenty of hits
    expected = (logits.argmax(-1) == target) & (target >= 0)
    got = mlm_correct(logits, target)
    assert got.dtype == torch.bool and got.shape == target.shape
    assert torch.equal(got, expected) and 0 < int(got.sum()) < got.numel()
    tied = (logits == logits.amax(-1, keepdim=True)).sum(-1) > 1
    wrong_tie = tied & (logits.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1) == logits.amax(-1)) & ~expected
    assert wrong_tie.any()  # the case amax + gather alone would count as correct
    halves = [(logits[:3], target[:3]), (logits[3:], target[3:])]  # accuracy sums exact counts over pairs
    assert mlm_accuracy(halves) == int(expected.sum()) / int((target >= 0).sum())
    assert mlm_accuracy([]) == 0.0


@pytest.fixture(scope="module")
def untrained_supernet(tmp_path_factory, tiny_data):
    """A supernet run directory (6 slots, untrained: the tied head below decides every prediction)."""
    from tests.conftest import build_tiny_supernet

    root = tmp_path_factory.mktemp("ties")
    return build_tiny_supernet(root / "supernet", tiny_data, steps=0)


def test_scorer_trial_and_iot_count_ties_like_the_one_accuracy_function(untrained_supernet, one_thread):
    """A head whose logits are one tied bias at every position: argmax takes the first of the two tied tokens, so a
    target equal to the second is wrong. The search scorer, the nnictl trial and IOT's per-instance counts all agree
    with `modeling.mlm_accuracy` and with a plain argmax."""
    from nni_lvbert.data.validation import model_accuracy
    from nni_lvbert.iot.routing import activate, path_layers, per_instance_mlm
    from nni_lvbert.modeling import mlm_accuracy
    from nni_lvbert.search.scorer import SupernetScorer
    from nni_lvbert.search.trial import load_candidate

    scorer = SupernetScorer(untrained_supernet, val_tokens=1024, batch_size=32, prefix_cache=False)
    targets = torch.cat([b.target for b in scorer.batches])
    first, second = sorted(targets.bincount().topk(2).indices.tolist())  # two frequent targets, tied below

    def tie(head):
        with torch.no_grad():
            for t in (head.dense.weight, head.dense.bias, head.norm.bias, head.bias):
                t.zero_()  # the head's input is 0, so its logits are its bias
            head.bias[[first, second]] = 1.0

    arch = scorer.parse("csfgcs")
    model = load_candidate(untrained_supernet, arch)  # the nnictl trial's model
    tie(model.head)
    tie(scorer.space.head)
    logits = scorer.space.head.bias.detach().expand(len(targets), -1)  # every masked position's logits
    expected, n = mlm_accuracy([(logits, targets)]), len(targets)
    assert expected == int((logits.argmax(-1) == targets).sum()) / n  # ties: the first maximum
    assert expected == int((targets == first).sum()) / n > 0 and bool((targets == second).any())
    assert scorer.score(arch) == expected
    assert model_accuracy(model, scorer.batches) == expected
    activate(path_layers(scorer.space), arch.dict)
    correct = count = 0
    with torch.inference_mode():
        for b in scorer.batches:
            labels = torch.full_like(b.input_ids, -100)
            labels.view(-1)[b.positions] = b.target
            r = per_instance_mlm(scorer.space, scorer.space.encode(b.input_ids, b.mask, b.token_type_ids), labels)
            correct, count = correct + int(r.correct.sum()), count + int(r.count.sum())
    assert correct / count == expected


def test_config_checks_live_in_model_config():
    """Bad configurations fail when the config is made (one clear line), not inside a module's constructor."""
    from nni_lvbert.config import GLU_ACTIVATION_NAMES, ModelConfig
    from nni_lvbert.errors import UserError
    from nni_lvbert.layers import GLU_ACTIVATIONS

    assert set(GLU_ACTIVATION_NAMES) == set(GLU_ACTIVATIONS)
    with pytest.raises(UserError, match="conv_kernel must be odd"):
        ModelConfig(conv_kernel=8)
    with pytest.raises(UserError, match="unknown GLU activation"):
        ModelConfig(glu_activation="tanh")
