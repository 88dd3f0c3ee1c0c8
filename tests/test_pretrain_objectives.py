"""`lvbert pretrain`'s pieces: ELECTRA masking, SOP swaps, resumable batches, the ELECTRA objective (replaced
labels, loss weights, no gradient through sampling, shared embeddings, generator sizes), optimiser, metrics."""
import math
from types import SimpleNamespace

import pytest
import torch

from nni_lvbert.pretrain import objectives
from nni_lvbert.pretrain.data import (
    TrainCollate,
    ValCollate,
    electra_mask,
    max_predictions,
    sop_order,
    sop_rows,
    swap_row,
)
from nni_lvbert.pretrain.objectives import ElectraObjective, MLMObjective, generator_config, gumbel_max
from tests.conftest import tiny_config

CLS, SEP, MASK, PAD = 2, 3, 4, 0
TOK = SimpleNamespace(pad_token_id=PAD, mask_token_id=MASK, cls_token_id=CLS, sep_token_id=SEP)


def packed_rows(n, max_len=64, vocab=100, seed=0):
    """`[CLS] A [SEP] B [SEP]` rows of random lengths (2..max_len-3 content tokens)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        m = int(torch.randint(2, max_len - 2, (1,), generator=g))
        cut = int(torch.randint(1, m, (1,), generator=g))
        ids = torch.randint(5, vocab, (m,), generator=g).tolist()
        rows.append({"input_ids": [CLS, *ids[:cut], SEP, *ids[cut:], SEP],
                     "token_type_ids": [0] * (cut + 2) + [1] * (m - cut + 1)})
    return rows


# --- data: ELECTRA masking, SOP -------------------------------------------------------------------------------------
def test_electra_mask_counts_positions_and_no_random_replacement():
    from nni_lvbert.pretrain.data import pad_rows

    batch = pad_rows(packed_rows(600), PAD)
    ids, attn = batch["input_ids"], batch["attention_mask"]
    g = torch.Generator().manual_seed(0)
    u = torch.rand((2, *ids.shape), generator=g)
    n_max = max_predictions(64)
    assert n_max == 9 and max_predictions(128) == 19  # int(0.155 L), ELECTRA's max_predictions_per_seq
    masked, labels = electra_mask(ids, attn, [CLS, SEP, PAD, MASK], MASK, n_max, u[0], u[1])
    chosen = labels != -100
    special = (ids == CLS) | (ids == SEP) | (attn == 0)
    n_real = attn.sum(-1)
    expected = [max(1, min(n_max, round(0.15 * float(n)))) for n in n_real]  # round half to even, as tf.round
    assert chosen.sum(-1).tolist() == expected
    assert not (chosen & special).any()
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(masked[~chosen], ids[~chosen])  # nothing else changes
    at = masked[chosen]
    assert bool(((at == MASK) | (at == ids[chosen])).all())  # [MASK] or kept: never a random token
    share = float((at == MASK).float().mean())
    assert abs(share - 0.85) < 0.02, share
    # positions are uniform over the candidates: first and second half of each row's content chosen alike
    content = (~special).cumsum(-1)
    first = (chosen & (content <= (n_real - 3).unsqueeze(-1) / 2)).sum()
    assert abs(float(first) / float(chosen.sum()) - 0.5) < 0.04


def test_sop_swap_moves_segments_and_keeps_columns_aligned():
    row = {"input_ids": [CLS, 10, 11, SEP, 20, 21, 22, SEP], "token_type_ids": [0, 0, 0, 0, 1, 1, 1, 1],
           "labels": [-100, 10, -100, -100, -100, 21, -100, -100]}
    swapped = swap_row(row)
    assert swapped["input_ids"] == [CLS, 20, 21, 22, SEP, 10, 11, SEP]
    assert swapped["token_type_ids"] == [0, 0, 0, 0, 0, 1, 1, 1]
    assert swapped["labels"] == [-100, -100, 21, -100, -100, 10, -100, -100]
    assert swap_row(swapped) == row  # swapping twice restores the order
    assert sop_order([0, 0, 0]) is None
    rows, labels = sop_rows([row, row, {"input_ids": [CLS, 5, SEP], "token_type_ids": [0, 0, 0]}], [0.1, 0.9, 0.1])
    assert labels == [1, 0, 0] and rows[0] == swapped and rows[1] == row


def test_train_batches_are_a_function_of_seed_and_batch_number():
    rows = packed_rows(16)
    collate = TrainCollate(TOK, seed=5, objective="electra", sop=True, max_length=64, mlm_probability=0.15)

    def batch(key, seed=5):
        c = collate if seed == 5 else TrainCollate(TOK, seed, "electra", True, 64, 0.15)
        return c([{**r, "_batch": key} for r in rows])

    a, b, c, d = batch(3), batch(3), batch(4), batch(3, seed=6)
    for k in a:  # tensors, and the collator's host counts (ints)
        assert torch.equal(a[k], b[k]) if torch.is_tensor(a[k]) else a[k] == b[k], k
    assert not torch.equal(a["input_ids"], c["input_ids"]) and not torch.equal(a["input_ids"], d["input_ids"])
    swaps = torch.cat([batch(k)["sop_labels"] for k in range(40)]).float().mean()
    assert abs(float(swaps) - 0.5) < 0.07
    # the swapped rows are exactly the swapped originals (then masked)
    s = a["sop_labels"].tolist()
    for i, r in enumerate(rows):
        want = swap_row(r) if s[i] else r
        n = len(want["input_ids"])
        original = torch.where(a["labels"][i, :n] >= 0, a["labels"][i, :n], a["input_ids"][i, :n])
        assert original.tolist() == want["input_ids"] and a["token_type_ids"][i, :n].tolist() == want["token_type_ids"]


def test_a_row_is_swapped_and_masked_alike_on_any_number_of_devices():
    rows = [{**r, "_batch": 7} for r in packed_rows(8)]
    whole = TrainCollate(TOK, 1, "electra", True, 64, 0.15, global_batch=8)(rows)
    for rank in (0, 1):
        share = TrainCollate(TOK, 1, "electra", True, 64, 0.15, global_batch=8, rank=rank, world=2)(rows[rank::2])
        for j, i in enumerate(range(rank, 8, 2)):
            n = int(share["attention_mask"][j].sum())
            for k in ("input_ids", "labels", "token_type_ids"):
                assert torch.equal(share[k][j, :n], whole[k][i, :n]), k
            assert share["sop_labels"][j] == whole["sop_labels"][i]


def test_validation_rows_are_fixed_per_row():
    rows = [{**r, "labels": [-100] * len(r["input_ids"])} for r in packed_rows(8)]
    collate = ValCollate(TOK, data_seed=0, objective="electra", sop=True, max_length=64)
    full = collate([{**r, "_index": i} for i, r in enumerate(rows)])
    part = collate([{**r, "_index": i} for i, r in enumerate(rows) if i >= 4])
    for i in range(4, 8):
        n = int(full["attention_mask"][i].sum())
        for k in ("input_ids", "labels", "token_type_ids"):
            assert torch.equal(full[k][i, :n], part[k][i - 4, :n]), k
    assert torch.equal(full["sop_labels"][4:], part["sop_labels"])


@pytest.mark.parametrize("objective", ["electra", "mlm"])
def test_pretraining_batches_count_their_own_targets_on_the_host(objective):
    """The host counts of training and validation batches are those of the labels the objective trains on
    (ELECTRA's own masking replaces the stored or collator labels)."""
    from nni_lvbert.modeling import masked_positions

    rows = packed_rows(8)
    train = TrainCollate(TOK, seed=5, objective=objective, sop=True, max_length=64, mlm_probability=0.15) \
        if objective == "electra" else None
    val = ValCollate(TOK, data_seed=0, objective=objective, sop=False, max_length=64)
    stored = [{**r, "labels": [t if i % 7 == 3 else -100 for i, t in enumerate(r["input_ids"])], "_index": i}
              for i, r in enumerate(rows)]
    batches = [val(stored)] + ([train([{**r, "_batch": 3} for r in rows])] if train else [])
    for batch in batches:
        assert torch.equal(batch["mlm_positions"], masked_positions(batch["labels"]))
        assert len(batch["mlm_positions"]) > 0 and batch["real_tokens"] == int(batch["attention_mask"].sum())




# --- the ELECTRA objective -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("size,hidden,heads", [("tiny", 16, 1), ("small", 64, 1), ("medium", 128, 2), ("base", 256, 4)])
def test_generator_size_per_model_size(size, hidden, heads):
    from nni_lvbert.config import load_size
    from nni_lvbert.pretrain.train import PretrainOptions

    cfg = load_size(size)
    gen = generator_config(cfg, PretrainOptions(size=size).resolved("generator_fraction"))
    assert (gen.hidden_size, gen.num_heads, gen.ff_size) == (hidden, heads, 4 * hidden)
    assert gen.embedding_size == cfg.embedding_size and gen.vocab_size == cfg.vocab_size
    assert gen.conv_heads == max(1, hidden // 64)


def batch_for(cfg, b=4, n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, cfg.vocab_size, (b, n), generator=g)
    ids[:, 0], ids[:, n // 2], ids[:, -1] = CLS, SEP, SEP
    attn = torch.ones_like(ids)
    attn[0, n - 3:] = 0
    ids[0, n - 3:] = PAD
    types = torch.zeros_like(ids)
    types[:, n // 2 + 1:] = 1
    u = torch.rand((2, b, n), generator=g)
    masked, labels = electra_mask(ids, attn, [CLS, SEP, PAD, MASK], MASK, 3, u[0], u[1])
    return {"input_ids": masked, "labels": labels, "attention_mask": attn, "token_type_ids": types,
            "sop_labels": torch.tensor([0, 1, 0, 1])}


def test_embeddings_are_shared_and_projections_are_not():
    cfg = tiny_config()
    model = ElectraObjective(cfg, "csfg", 0.25, sop=True)
    d, g = model.discriminator.embeddings, model.generator.embeddings
    for name in ("word", "position", "segment", "norm"):
        assert getattr(d, name) is getattr(g, name), name
    assert model.generator.head.word[0] is d.word  # the generator's decoder is the shared word embedding
    assert isinstance(g.project, torch.nn.Linear) and g.project.weight.shape == (8, 32)
    assert not isinstance(d.project, torch.nn.Linear)  # E == H here: no projection
    ids = {id(p) for p in model.parameters()}
    assert len(ids) == len(list(model.parameters()))  # each shared tensor once (optimizer, clipping)
    # one step of the generator's loss alone moves the discriminator's embeddings: the same tensors
    before = d.word.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    model(batch_for(cfg))["parts"]["generator"].backward()
    opt.step()
    assert not torch.equal(before, d.word.weight) and g.word.weight is d.word.weight
    # saved and loaded back, they stay one tensor
    fresh = ElectraObjective(cfg, "csfg", 0.25, sop=True)
    fresh.load_state_dict(model.state_dict())
    assert fresh.generator.embeddings.word is fresh.discriminator.embeddings.word
    assert torch.equal(fresh.discriminator.embeddings.word.weight, d.word.weight)


def test_replaced_labels_and_loss_weights(monkeypatch):
    """Forced samples: half the masked positions get their own token back (not replaced), the rest another one."""
    import torch.nn.functional as F

    cfg = tiny_config()
    model = ElectraObjective(cfg, "csfgs", 0.25, sop=True).eval()
    batch = batch_for(cfg)
    where = batch["labels"] != -100
    original = torch.where(where, batch["labels"], batch["input_ids"])
    planned = original[where].clone()
    planned[1::2] = (planned[1::2] + 1 - 5) % (cfg.vocab_size - 5) + 5  # differs from the original
    monkeypatch.setattr(objectives, "gumbel_max", lambda logits: planned)
    out = model(batch)
    fake = original.clone()
    fake[where] = planned
    assert torch.equal(out["fake_ids"], fake)
    replaced = (fake != original) & where
    real = batch["attention_mask"].bool()
    assert torch.equal(out["disc_labels"][out["disc_real"]], replaced[real].float())
    assert torch.equal(out["disc_real"], real.reshape(-1)) and not real.all()  # a padded batch
    assert int(replaced.sum()) == int(where.sum()) // 2 and int(out["disc_labels"].sum()) == int(replaced.sum())
    # loss = generator MLM + 50 x discriminator BCE over non-pad tokens (+ SOP)
    gen_logits = model.generator.head(model.generator.encode(batch["input_ids"], batch["attention_mask"],
                                                             batch["token_type_ids"])[where])
    hidden = model.discriminator.encode(fake, batch["attention_mask"], batch["token_type_ids"])
    disc = F.binary_cross_entropy_with_logits(model.disc_head(hidden)[real], replaced[real].float())
    sop = F.cross_entropy(model.sop_head(hidden), batch["sop_labels"])
    parts = out["parts"]
    torch.testing.assert_close(parts["generator"], F.cross_entropy(gen_logits, original[where]))
    torch.testing.assert_close(parts["discriminator"], disc)
    torch.testing.assert_close(parts["sop"], sop)
    torch.testing.assert_close(out["loss"], parts["generator"] + 50.0 * parts["discriminator"] + parts["sop"])


def test_no_gradient_from_the_discriminator_into_the_generator():
    cfg = tiny_config()
    model = ElectraObjective(cfg, "csfgs", 0.25)
    out = model(batch_for(cfg))
    shared = {id(p) for p in model.discriminator.embeddings.parameters()}
    gen_only = [p for p in model.generator.parameters() if id(p) not in shared]
    disc_only = [p for n, p in model.named_parameters() if not n.startswith("generator.") and id(p) not in shared]
    grads = torch.autograd.grad(out["parts"]["discriminator"], gen_only, retain_graph=True, allow_unused=True)
    assert all(g is None for g in grads)  # sampling is not differentiated
    grads = torch.autograd.grad(out["parts"]["generator"], disc_only, retain_graph=True, allow_unused=True)
    assert all(g is None for g in grads)
    word = model.discriminator.embeddings.word.weight  # the shared embeddings learn from both losses
    assert all(torch.autograd.grad(out["parts"][k], word, retain_graph=True)[0].abs().sum() > 0
               for k in ("generator", "discriminator"))


@pytest.mark.parametrize("path", ["cpu", "torch.rand"])  # torch.rand: other devices and torch.compile
def test_gumbel_max_samples_the_softmax(path, monkeypatch):
    if path == "torch.rand":
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    torch.manual_seed(0)
    logits = torch.log(torch.tensor([1.0, 2.0, 3.0])).repeat(60_000, 1).requires_grad_()
    sample = gumbel_max(logits)
    assert not sample.requires_grad
    freq = torch.bincount(sample, minlength=3).float() / len(sample)
    torch.testing.assert_close(freq, torch.tensor([1, 2, 3]) / 6, atol=0.01, rtol=0)



def test_gumbel_max_follows_the_global_seed_over_chunks_and_shapes():
    from nni_lvbert.pretrain.objectives import GUMBEL_ROWS

    logits = torch.zeros(2, 5 * GUMBEL_ROWS + 3, 11)  # equal rows, in several chunks, the last one short
    samples = []
    for seed in (3, 3, 4):
        torch.manual_seed(seed)
        samples.append(gumbel_max(logits))
    assert samples[0].shape == (2, 5 * GUMBEL_ROWS + 3) and samples[0].dtype == torch.int64
    assert torch.equal(samples[0], samples[1]) and not torch.equal(samples[0], samples[2])
    first, last = samples[0].reshape(-1)[:GUMBEL_ROWS], samples[0].reshape(-1)[-GUMBEL_ROWS:]
    assert not torch.equal(first, last)  # every chunk draws noise of its own
    assert gumbel_max(torch.zeros(0, 7)).shape == (0,)

def test_mlm_objective_projects_only_masked_positions():
    cfg = tiny_config()
    model = MLMObjective(cfg, "sfsf", sop=True)
    batch = batch_for(cfg)
    out = model(batch)
    assert int(out["mlm_count"]) == int((batch["labels"] != -100).sum())
    torch.testing.assert_close(out["loss"], out["parts"]["mlm"] + out["parts"]["sop"])


def test_optimizer_groups_clipping_and_schedule():
    from nni_lvbert.pretrain.module import PretrainModule

    model = ElectraObjective(tiny_config(), "csfg", 0.25, sop=True)
    module = PretrainModule(model, "electra", lr=5e-4, warmup_steps=10, max_steps=100, weight_decay=0.01,
                            clip_grad=1.0, seed=0, data_seed=0)
    conf = module.configure_optimizers()
    opt = conf["optimizer"]
    names = {id(p): n for n, p in model.named_parameters()}
    decay, no_decay = ({names[id(p)] for p in g["params"]} for g in opt.param_groups)
    assert opt.param_groups[0]["weight_decay"] == 0.01 and opt.param_groups[1]["weight_decay"] == 0.0
    assert no_decay == {n for n in names.values() if n.endswith(".bias") or ".norm." in n}
    assert all(".norm." not in n and not n.endswith(".bias") for n in decay)
    assert opt.defaults["eps"] == 1e-6 and opt.defaults["betas"] == (0.9, 0.999)
    factor = conf["lr_scheduler"]["scheduler"].lr_lambdas[0]
    assert factor(0) == 0.1 and factor(9) == 1.0 and factor(55) == 0.5 and factor(100) == 0.0
    calls = []
    module.clip_gradients = lambda o, gradient_clip_val, gradient_clip_algorithm: calls.append(
        (gradient_clip_val, gradient_clip_algorithm))
    module.configure_gradient_clipping(opt)
    assert calls == [(1.0, "norm")]


def test_auc_precision_recall_match_sklearn():
    metrics = pytest.importorskip("sklearn.metrics")
    from nni_lvbert.pretrain.metrics import SUMS, auc, histogram, step_sums, summarize

    g = torch.Generator().manual_seed(0)
    labels = (torch.rand(20_000, generator=g) < 0.15).float()
    logits = torch.randn(20_000, generator=g) * 2 + labels * 2.5 - 2
    exact = metrics.roc_auc_score(labels.numpy(), logits.numpy())
    assert abs(auc(histogram(logits[:7000], labels[:7000]) + histogram(logits[7000:], labels[7000:])) - exact) < 1e-3
    out = {"loss": torch.zeros(()), "disc_logits": logits, "disc_labels": labels}
    s = summarize(step_sums(out), "electra")
    pred = (logits > 0).numpy()
    assert math.isclose(s["disc_precision"], metrics.precision_score(labels.numpy(), pred))
    assert math.isclose(s["disc_recall"], metrics.recall_score(labels.numpy(), pred))
    assert math.isclose(s["disc_acc"], metrics.accuracy_score(labels.numpy(), pred))
    real = torch.rand(20_000, generator=g) < 0.8  # padding tokens (disc_real False) count nowhere
    padded = step_sums({**out, "disc_real": real})
    assert torch.equal(padded, step_sums({**out, "disc_logits": logits[real], "disc_labels": labels[real]}))
    assert padded[SUMS.index("disc_tokens")] == real.sum() < 20_000
