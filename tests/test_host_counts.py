"""The collators' host counts (mlm_positions, real_tokens) and the sync-free training losses they allow (GPU path,
issue #14): the same numbers as without them, and every training loss traces as one graph (no host sync, no
data-dependent shape: what CUDA graphs and a whole-model torch.compile need)."""
from __future__ import annotations

import pytest
import torch

from nni_lvbert.config import ModelConfig
from nni_lvbert.data.masking import IGNORE_INDEX, PadCollator, host_counts, model_mask, pad_positions
from nni_lvbert.modeling import FixedMLM, mlm_correct


def tiny_cfg(dropout: float = 0.0) -> ModelConfig:
    return ModelConfig(vocab_size=97, hidden_size=32, embedding_size=16, num_heads=2, ff_size=48, conv_head_size=16,
                       conv_kernel=5, max_length=32, max_position=64, dropout=dropout, attention_dropout=dropout)


def rows(lengths, seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for m in lengths:
        ids = torch.randint(5, 97, (m,), generator=g)
        labels = torch.where(torch.rand(m, generator=g) < 0.3, ids, torch.full_like(ids, IGNORE_INDEX))
        out.append({"input_ids": ids.masked_fill(labels >= 0, 4).tolist(), "token_type_ids": [0] * m,
                    "labels": labels.tolist()})
    return out


@pytest.mark.parametrize("lengths", [[12, 12, 12], [12, 7, 3]])
def test_host_counts_are_the_devices_answers(lengths):
    batch = PadCollator(0)(rows(lengths))
    labels, mask = batch["labels"], batch["attention_mask"]
    assert torch.equal(batch["mlm_positions"], (labels.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(-1))
    assert batch["real_tokens"] == int(mask.sum()) == sum(lengths)
    padded = len(set(lengths)) > 1
    assert (model_mask(batch) is mask) if padded else model_mask(batch) is None
    assert not padded or model_mask({"attention_mask": mask}) is mask  # no count: the mask, as before
    again = host_counts(batch)  # idempotent, a new dict
    assert again is not batch and torch.equal(again["mlm_positions"], batch["mlm_positions"])


@pytest.mark.parametrize("multiple", [1, 64])
@pytest.mark.parametrize("arch", ["sfcg", "csfg"])
def test_host_positions_give_the_labels_results(arch, multiple):
    torch.manual_seed(0)
    cfg = tiny_cfg()
    model = FixedMLM(cfg, arch)
    batch = PadCollator(0)(rows([20, 20, 13, 5]))
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    ref = model(ids, mask, labels=labels)
    ref.loss.backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    padded = pad_positions(batch, multiple)
    out = model(ids, model_mask(batch), labels=labels, positions=padded["mlm_positions"])
    out.loss.backward()
    n = batch["mlm_positions"].numel()
    assert out.logits.shape[0] == (n if multiple == 1 else -(-n // multiple) * multiple)
    assert torch.equal(out.logits[:n], ref.logits) and torch.equal(out.correct, ref.correct)
    assert torch.equal(out.count, ref.count) and int(out.count) == n
    if multiple == 1:  # the very rows: bit for bit
        assert torch.equal(out.loss, ref.loss)
    torch.testing.assert_close(out.loss, ref.loss, rtol=1e-6, atol=1e-7)  # padded rows: zero in the sum
    for p, g in zip(model.parameters(), ref_grads):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-7)


def test_pad_positions_repeats_an_ignored_position():
    batch = PadCollator(0)(rows([20, 20, 13, 5]))
    n = batch["mlm_positions"].numel()
    padded = pad_positions(batch, 64)
    extra = padded["mlm_positions"][n:]
    assert padded["mlm_positions"].numel() == -(-n // 64) * 64 > n and torch.equal(padded["mlm_positions"][:n],
                                                                                   batch["mlm_positions"])
    assert len(set(extra.tolist())) == 1 and int(batch["labels"].reshape(-1)[extra[0]]) == -100
    assert pad_positions(batch, 1) is batch and pad_positions(padded, 64) is padded
    every = {**batch, "labels": torch.zeros_like(batch["labels"])}  # no ignored position to repeat: unchanged
    assert pad_positions(every, 64) is every and pad_positions({"labels": batch["labels"]}, 64)


def test_argmax_branch_counts_ties_like_the_cpu_branch():
    """mlm_correct off CPU / under torch.compile is argmax itself; on CPU the amax trick: the same answers."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randint(0, 4, (300, 9), generator=g).float()  # many ties
    target = torch.randint(-1, 9, (300,), generator=g).masked_fill(torch.rand(300, generator=g) < 0.2, IGNORE_INDEX)
    cpu = mlm_correct(logits, target)
    traced = torch.compile(mlm_correct, backend="eager", fullgraph=True)(logits, target)
    assert torch.equal(cpu, traced) and 0 < int(cpu.sum()) < int((target >= 0).sum())
    assert torch.equal(cpu, (logits.argmax(-1) == target) & (target >= 0))


def objective_cases():
    from nni_lvbert.pretrain.objectives import build_objective

    cfg = tiny_cfg(dropout=0.1)  # dropout traced too
    return {"mlm": lambda: build_objective("mlm", cfg, "cfsg"),
            "mlm+sop": lambda: build_objective("mlm", cfg, "cfsg", sop=True),
            "electra": lambda: build_objective("electra", cfg, "cfsg", generator_fraction=0.5)}


def traced(module, batch):
    """(output, data-dependent nodes) of module(batch) compiled as one graph: torch.compile(fullgraph=True) raises
    on a graph break (`.item()`, `bool(t)`), and a node whose value has an unbacked size (boolean indexing,
    nonzero: a host sync on a GPU, a shape CUDA graphs cannot replay) is listed."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(module, backend=backend, fullgraph=True)(batch)
    assert len(graphs) == 1
    dependent = []
    for node in graphs[0].graph.nodes:
        value = node.meta.get("example_value")
        values = value if isinstance(value, (tuple, list)) else [value]
        if any(isinstance(v, (torch.Tensor, torch.SymInt)) and free_unbacked_symbols(v) for v in values):
            dependent.append(str(node.target))
    return out, dependent


@pytest.mark.parametrize("case", ["mlm", "mlm+sop", "electra"])
def test_training_losses_trace_as_one_graph(case):
    """With the collator's host counts a training loss has no host sync and no data-dependent shape (what CUDA
    graphs and a whole-model torch.compile need); without them it has (the check can fail)."""
    torch.manual_seed(0)
    objective = objective_cases()[case]().train()
    batch = PadCollator(0)(rows([16] * 4))
    if case == "electra":  # ELECTRA's targets: the original tokens at the masked positions
        batch["input_ids"] = torch.where(batch["labels"] >= 0, batch["labels"], batch["input_ids"])
    if "sop" in case:
        batch["sop_labels"] = torch.tensor([0, 1, 1, 0])
    assert model_mask(batch) is None
    out, dependent = traced(objective, batch)
    assert dependent == []
    out["loss"].backward()
    assert torch.isfinite(out["loss"]) and int(out["mlm_count"]) == batch["mlm_positions"].numel()
    assert all(p.grad is not None for p in objective.parameters() if p.requires_grad)
    _, dependent = traced(objective, {k: v for k, v in batch.items() if k != "mlm_positions"})
    assert "nonzero" in dependent


def test_electra_with_padded_generator_rows_replaces_the_same_tokens():
    """Padding the masked positions (pad_positions: CUDA-graph shapes) changes no sample and no loss: a padding
    position keeps its token (its own sample is dropped), and padded rows are ignored by the loss."""
    batch = PadCollator(0)(rows([16] * 4))
    batch["input_ids"] = torch.where(batch["labels"] >= 0, batch["labels"], batch["input_ids"])
    outs = []
    for multiple in (1, 64):
        torch.manual_seed(0)
        objective = objective_cases()["electra"]().train()
        torch.manual_seed(1)
        outs.append(objective(pad_positions(batch, multiple)))
    a, b = outs
    assert torch.equal(a["fake_ids"], b["fake_ids"]) and torch.equal(a["disc_labels"], b["disc_labels"])
    assert torch.equal(a["mlm_correct"], b["mlm_correct"]) and torch.equal(a["mlm_count"], b["mlm_count"])
    torch.testing.assert_close(a["loss"], b["loss"], rtol=1e-6, atol=1e-6)
