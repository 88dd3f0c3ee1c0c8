"""The layers' dropout (nni_lvbert/layers/dropout.py): cheap CPU masks with F.dropout's semantics."""
import pytest
import torch
import torch.nn.functional as F

from nni_lvbert.config import ModelConfig
from nni_lvbert.layers import SelfAttention, TokenRows
from nni_lvbert.layers.dropout import Dropout, drop_probability, dropout, keep_mask


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_mask_keeps_one_minus_p(p):
    torch.manual_seed(0)
    keep = keep_mask((1000, 999), p)  # odd size: not a multiple of four draws
    assert keep.shape == (1000, 999) and keep.dtype == torch.bool
    assert keep.float().mean().item() == pytest.approx(1 - p, abs=3e-3)
    rows = keep.float().mean(1)  # no position is favoured: every row of the flat mask keeps about 1 - p
    assert rows.std().item() < 0.05
    assert drop_probability(p) == pytest.approx(p, abs=1 / 65536)


def test_masks_follow_the_global_seed():
    torch.manual_seed(3)
    a = keep_mask((64, 64), 0.1)
    b = keep_mask((64, 64), 0.1)
    torch.manual_seed(3)
    assert torch.equal(keep_mask((64, 64), 0.1), a) and not torch.equal(a, b)


def test_dropout_scales_kept_values_and_its_gradient_is_the_same_mask():
    torch.manual_seed(0)
    x = (torch.rand(256, 128) + 0.5).requires_grad_()
    y = dropout(x, 0.25)
    scale = 1 / (1 - drop_probability(0.25))
    kept = y != 0
    assert torch.allclose(y[kept], x[kept] * scale)
    assert kept.float().mean().item() == pytest.approx(0.75, abs=0.01)
    assert y.mean().item() == pytest.approx(x.mean().item(), rel=0.02)
    y.sum().backward()
    assert torch.allclose(x.grad, kept.float() * scale)


def test_eval_zero_p_and_compiling_are_torch_dropout(monkeypatch):
    x = torch.randn(32, 16)
    module = Dropout(0.3).eval()
    assert torch.equal(module(x), x) and torch.equal(dropout(x, 0.0), x)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)  # Inductor brings its own dropout
    torch.manual_seed(1)
    expected = F.dropout(x, 0.3, True)
    torch.manual_seed(1)
    assert torch.equal(dropout(x, 0.3, True), expected)
    with pytest.raises(ValueError):
        Dropout(1.5)
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))


@pytest.mark.parametrize("packed", [False, True])
def test_attention_with_dropout_path_equals_sdpa_when_nothing_is_dropped(packed):
    """Training with attention dropout on CPU runs the explicit attention; with a drop probability that rounds to 0
    (nothing dropped, scale 1) it gives what SDPA gives in eval mode, padding included."""
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_heads=4, ff_size=64, dropout=0.0, attention_dropout=1e-6)
    layer = SelfAttention(cfg)
    x = torch.randn(3, 10, 32)
    mask = torch.ones(3, 10, dtype=torch.bool)
    mask[1, 6:] = False
    mask[2, 3:] = False
    rows = TokenRows.of(mask) if packed else None
    inp = x[mask] if packed else x
    train = layer.train()(inp, mask, rows)
    ref = layer.eval()(inp, mask, rows)
    real = slice(None) if packed else mask
    assert torch.allclose(train[real], ref[real], atol=1e-5)


def test_attention_dropout_drops_attention_weights():
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_heads=4, ff_size=64, dropout=0.0, attention_dropout=0.5)
    layer = SelfAttention(cfg).train()
    x = torch.randn(2, 12, 32)
    a, b = layer(x), layer(x)
    assert not torch.allclose(a, b) and not torch.allclose(a, layer.eval()(x))
