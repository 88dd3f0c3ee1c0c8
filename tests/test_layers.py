"""Every layer: shapes, gradients, masks; DC against a naive reference; GLU-FF against T5's gated-GELU block."""
import pytest
import torch
import torch.nn.functional as F

from nni_lvbert.layers import GLU_ACTIVATIONS, LAYER_CLASSES, DynamicConv, GLUFeedForward, build_layer, lightweight_conv
from nni_lvbert.layers.dynamic_conv import DEPTHWISE, LIGHTWEIGHT
from tests.conftest import tiny_config

TYPES = list(LAYER_CLASSES)


def padded_batch(cfg, lengths, n):
    x = torch.randn(len(lengths), n, cfg.hidden_size)
    mask = torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]
    return x, mask


@pytest.mark.parametrize("layer_type", TYPES)
@pytest.mark.parametrize("n", [1, 7, 13, 32])
def test_shape_and_gradients(cfg, layer_type, n):
    layer = build_layer(layer_type, cfg)
    x, mask = padded_batch(cfg, [n, max(1, n - 3)], n)
    x.requires_grad_(True)
    y = layer(x, mask)
    assert y.shape == x.shape
    y.pow(2).sum().backward()
    assert x.grad.abs().sum() > 0
    for name, p in layer.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        if n == 1 and layer_type == "sa" and name.split(".")[0] in ("query", "key"):
            # One token: softmax over one key is the constant 1, so query/key gradients are mathematically zero;
            # whether rounding leaves exactly 0 or ~1e-10 depends on the CPU's kernels. Assert what is true.
            assert p.grad.abs().max() < 1e-6, f"{layer_type}.{name}: gradient should vanish for one token"
            continue
        assert p.grad.abs().sum() > 0, f"{layer_type}.{name} got no gradient"


@pytest.mark.parametrize("layer_type", TYPES)
def test_padding_never_reaches_real_tokens(cfg, layer_type):
    """Outputs at real positions are identical whatever sits in (and however long) the padding is."""
    layer = build_layer(layer_type, cfg).eval()
    real = torch.randn(1, 9, cfg.hidden_size)
    alone = layer(real, torch.ones(1, 9, dtype=torch.bool))
    garbage = torch.cat([real, 100 * torch.randn(1, 6, cfg.hidden_size)], dim=1)
    mask = torch.arange(15)[None] < 9
    padded = layer(garbage, mask)
    torch.testing.assert_close(padded[:, :9], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layer_type", TYPES)
def test_mask_none_equals_all_true(cfg, layer_type):
    layer = build_layer(layer_type, cfg).eval()
    x = torch.randn(2, 11, cfg.hidden_size)
    torch.testing.assert_close(layer(x, None), layer(x, torch.ones(2, 11, dtype=torch.bool)))


def test_sa_padded_keys_get_no_weight(cfg):
    """Changing a padded key's content must not change any real output, even by a little."""
    layer = build_layer("sa", cfg).eval()
    x, mask = padded_batch(cfg, [5], 8)
    y1 = layer(x, mask)
    x2 = x.clone()
    x2[:, 5:] = torch.randn(1, 3, cfg.hidden_size) * 50
    y2 = layer(x2, mask)
    torch.testing.assert_close(y1[:, :5], y2[:, :5], atol=0, rtol=0)


def naive_dynamic_conv(layer: DynamicConv, x, mask):
    """Position-by-position reference of the DC block as written in the LV-BERT appendix."""
    b, n, c = x.shape
    k, h = layer.k, layer.heads
    v = (x @ layer.value.weight.T + layer.value.bias) * torch.sigmoid(x @ layer.gate.weight.T + layer.gate.bias)
    v = v * mask[..., None]
    dw = layer.depthwise.weight[:, 0, :]  # (c, k)
    s = torch.zeros_like(v)
    for i in range(n):
        for j in range(k):
            src = i + j - k // 2
            if 0 <= src < n:
                s[:, i] += v[:, src] * dw[:, j]
    s = s @ layer.pointwise.weight.T + layer.pointwise.bias
    d = (s @ layer.kernel.weight.T + layer.kernel.bias).view(b, n, h, k).softmax(-1)
    y = torch.zeros_like(v)
    dh = c // h
    for i in range(n):
        for head in range(h):
            for j in range(k):
                src = i + j - k // 2
                if 0 <= src < n:
                    y[:, i, head * dh:(head + 1) * dh] += d[:, i, head, j, None] * v[:, src, head * dh:(head + 1) * dh]
    out = y @ layer.out.weight.T + layer.out.bias
    return F.layer_norm(x + out, (c,), layer.norm.weight, layer.norm.bias, layer.norm.eps)


DC_IMPLS = [(d, w) for d in DEPTHWISE for w in LIGHTWEIGHT]


@pytest.mark.parametrize("impl", DC_IMPLS, ids="-".join)
@pytest.mark.parametrize("n,kernel", [(1, 9), (5, 9), (12, 9), (10, 3), (7, 5)])
def test_dynamic_conv_matches_naive_reference(n, kernel, impl):
    cfg = tiny_config(conv_kernel=kernel)
    layer = DynamicConv(cfg).eval()
    layer.impl = impl
    for p in layer.parameters():  # random, non-trivial weights everywhere
        torch.nn.init.normal_(p, std=0.3)
    x, mask = padded_batch(cfg, [n, max(1, n - 2)], n)
    torch.testing.assert_close(layer(x, mask), naive_dynamic_conv(layer, x, mask), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", DC_IMPLS[1:], ids="-".join)
def test_dynamic_conv_implementations_agree_with_gradients(impl):
    """Every (depthwise, lightweight) implementation gives the first's outputs and gradients, padded and packed."""
    from nni_lvbert.layers import TokenRows

    cfg = tiny_config(conv_kernel=5)
    layer = DynamicConv(cfg).train()
    for p in layer.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x, mask = padded_batch(cfg, [11, 6, 3], 11)
    rows = TokenRows.of(mask)
    for args in ((x, mask), (rows.pack(x), mask, rows)):
        results = []
        for which in (DC_IMPLS[0], impl):
            layer.impl = which
            layer.zero_grad()
            xi = args[0].clone().requires_grad_(True)
            y = layer(xi, *args[1:])
            y.pow(2).sum().backward()
            results.append([y, xi.grad, *(p.grad for p in layer.parameters())])
        for a, b in zip(*results, strict=True):
            torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)


def test_dynamic_conv_picks_the_fastest_kernels_per_device(monkeypatch):
    """impl None (the default): the CPU's banded matmul, a GPU's measured pairs (eager / being compiled); a set impl
    wins over it."""
    from nni_lvbert.layers import dynamic_conv

    assert DynamicConv.impl is None and set(dynamic_conv.FASTEST.values()) <= set(DC_IMPLS)
    assert dynamic_conv.fastest_impl(torch.device("cpu")) == ("conv1d", "band")
    assert dynamic_conv.fastest_impl(torch.device("cuda", 0)) == ("conv1d", "unfold")
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert dynamic_conv.fastest_impl(torch.device("cuda")) == ("shifted", "unfold")
    assert dynamic_conv.fastest_impl(torch.device("cpu")) == ("conv1d", "band")
    monkeypatch.undo()
    used = []
    monkeypatch.setitem(dynamic_conv.LIGHTWEIGHT, "unfold",
                        lambda v, k: used.append("unfold") or dynamic_conv.lightweight_conv_unfold(v, k))
    cfg = tiny_config()
    layer = DynamicConv(cfg).eval()
    x, mask = padded_batch(cfg, [6, 4], 6)
    layer(x, mask)
    assert used == []  # CPU: band
    layer.impl = ("conv1d", "unfold")
    layer(x, mask)
    assert used == ["unfold"]


def test_lightweight_conv_is_local():
    """Output i only depends on inputs i-4..i+4 (kernel 9)."""
    v = torch.randn(1, 20, 8, requires_grad=True)
    kernels = torch.rand(1, 20, 2, 9)
    lightweight_conv(v, kernels)[0, 10].sum().backward()
    touched = (v.grad[0].abs().sum(-1) > 0).nonzero().flatten().tolist()
    assert touched == list(range(6, 15))


def test_dc_heads_and_params():
    cfg = tiny_config(hidden_size=256, num_heads=4, conv_head_size=64)
    layer = DynamicConv(cfg)
    assert layer.heads == 4 and layer.kernel.out_features == 4 * 9
    # 2 GLU linears + depthwise k*c + pointwise + W_dyn + out + LayerNorm
    c = 256
    expected = 2 * (c * c + c) + 9 * c + (c * c + c) + (c * 36 + 36) + (c * c + c) + 2 * c
    assert sum(p.numel() for p in layer.parameters()) == expected


@pytest.mark.parametrize("hidden,ff", [(256, 1024), (384, 1536), (768, 3072), (64, 256)])
def test_glu_ff_keeps_ff_parameter_count(hidden, ff):
    cfg = tiny_config(hidden_size=hidden, ff_size=ff, num_heads=2)
    n_ff = sum(p.numel() for p in build_layer("ff", cfg).parameters())
    n_glu = sum(p.numel() for p in build_layer("glu", cfg).parameters())
    assert abs(n_glu - n_ff) / n_ff < 0.01


@pytest.mark.parametrize("act", list(GLU_ACTIVATIONS))
def test_glu_variants_run(act):
    cfg = tiny_config(glu_activation=act, glu_bias=True)
    layer = GLUFeedForward(cfg)
    assert layer.gate.bias is not None
    x = torch.randn(2, 5, cfg.hidden_size)
    assert layer(x).shape == x.shape


def test_geglu_matches_t5_gated_gelu():
    """Our GEGLU (no bias) sublayer equals transformers' T5DenseGatedActDense with gated-gelu."""
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5DenseGatedActDense

    cfg = tiny_config(glu_activation="gelu_tanh", glu_bias=False)
    t5 = T5DenseGatedActDense(T5Config(d_model=32, d_ff=cfg.glu_width, feed_forward_proj="gated-gelu", dropout_rate=0.0)).eval()
    ours = GLUFeedForward(cfg).eval()
    with torch.no_grad():
        ours.gate.weight.copy_(t5.wi_0.weight)
        ours.up.weight.copy_(t5.wi_1.weight)
        ours.down.weight.copy_(t5.wo.weight)
    x = torch.randn(3, 7, 32)
    sublayer = ours.down(ours.act(ours.gate(x)) * ours.up(x))
    torch.testing.assert_close(sublayer, t5(x), atol=1e-5, rtol=1e-5)
    # and the full block is post-LN around that sublayer
    torch.testing.assert_close(ours(x), ours.norm(x + t5(x)), atol=1e-5, rtol=1e-5)


def test_dropout_zero_is_deterministic_in_train_mode():
    cfg = tiny_config(dropout=0.0, attention_dropout=0.0)
    x = torch.randn(2, 6, cfg.hidden_size)
    for t in TYPES:
        layer = build_layer(t, cfg).train()
        torch.testing.assert_close(layer(x), layer(x))


@pytest.mark.parametrize("layer_type", TYPES)
def test_packed_rows_equal_the_padded_layout(cfg, layer_type):
    """With `rows` a layer runs on the real tokens only (layers/rows.py): outputs and every gradient equal the padded
    layout's at real positions, whatever the padding holds."""
    from nni_lvbert.layers import TokenRows

    layer = build_layer(layer_type, cfg).eval()
    x, mask = padded_batch(cfg, [13, 4, 9], 13)
    x[~mask] = 100 * torch.randn(int((~mask).sum()), cfg.hidden_size)
    rows = TokenRows.of(mask)
    assert rows.index.numel() == 26 and TokenRows.of(torch.ones_like(mask)) is None and TokenRows.of(None) is None
    results = []
    for packed in (False, True):
        layer.zero_grad()
        inp = x.clone().requires_grad_(True)
        y = rows.unpack(layer(rows.pack(inp), mask, rows)) if packed else layer(inp, mask)
        assert packed or y.shape == x.shape
        (y[mask] * torch.linspace(-1, 1, y[mask].numel()).view_as(y[mask])).sum().backward()
        results.append((y[mask].detach(), inp.grad[mask], {n: p.grad.clone() for n, p in layer.named_parameters()}))
    (y0, g0, p0), (y1, g1, p1) = results
    torch.testing.assert_close(y1, y0, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(g1, g0, atol=1e-5, rtol=1e-5)
    for name in p0:
        torch.testing.assert_close(p1[name], p0[name], atol=1e-5, rtol=1e-4, msg=name)
