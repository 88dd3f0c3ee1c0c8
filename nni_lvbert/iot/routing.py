"""IOT routing: the order predictor, the IOT training loss, per-instance MLM losses and grouped argmax routing.

Loss (official IOT code, `instance-wise-ordered-transformer/IOT`, criterions/label_smoothed_cross_entropy.py and
models/transformer.py `gumbel_softmax`; here per instance instead of per target token):

    p_x   = softmax(W s_x)                         s_x: mean input word embedding of x (padding excluded)
    pc_x  = clamp(p_x, c, 1 - (M - 1) c)           c = 0.05 (`--clamp-value`, with `--gs-clamp`)
    g_x   = softmax((log pc_x + G) / tau)           G ~ Gumbel(0, 1) i.i.d. (no G: `gumbel=False`)
    L_mlm = mean_x sum_m g_xm L_xm                  L_xm: mean MLM cross-entropy of x's masked tokens under order m
    L_D   = KL(u || mean_x p_x)                     = -log M - mean_m log mean_x p_xm   (`diversity`, unclamped p)
    L_S   = -mean_x KL(u || pc_x)                   = mean_x (log M + mean_m log pc_xm)  (`kl`, clamped p)
    loss  = L_mlm + c1 L_D + c2 L_S                 c1 = 0.1, c2 = 0.01 (README of the official code)

Instances without masked tokens carry no MLM loss (they are left out of the mean) but still count in L_D, L_S.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..arch import Arch
from ..modeling import mlm_correct
from .defaults import C1, C2, CLAMP, TAU, TAU_DECAY, TAU_EVERY, TAU_MIN


def tau_at(step: int, tau: float = TAU, tau_min: float = TAU_MIN, decay: float = TAU_DECAY,
           every: int = TAU_EVERY) -> float:
    """Official `base_gs` schedule: exponential decay, updated every `every` steps, floored at `tau_min`."""
    clipped = (step // max(1, every)) * max(1, every)
    return max(tau * math.exp(-decay * clipped), tau_min)


class OrderPredictor(nn.Module):
    """s_e = mean of the input word embeddings over real tokens -> Linear(d, M, bias=False) -> order logits."""

    def __init__(self, dim: int, num_orders: int, dropout: float = 0.0):
        super().__init__()
        self.proj = nn.Linear(dim, num_orders, bias=False)
        nn.init.normal_(self.proj.weight, std=dim ** -0.5)  # as the official `embed_order`
        self.dropout = dropout

    @property
    def num_orders(self) -> int:
        return self.proj.out_features

    def forward(self, word_embeddings: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if attention_mask is None:
            s = word_embeddings.mean(1)
        else:
            m = attention_mask.to(word_embeddings.dtype).unsqueeze(-1)
            s = (word_embeddings * m).sum(1) / m.sum(1).clamp(min=1.0)
        s = F.dropout(s, p=self.dropout, training=self.training)
        return self.proj(s)


def route_logits(space, predictor: OrderPredictor, input_ids, attention_mask=None) -> torch.Tensor:
    """(batch, M) order logits from the space's (tied) input word embeddings."""
    return predictor(space.embeddings.word(input_ids), attention_mask)


# ----------------------------------------------------------------------------------------------------- losses


def clamp_probs(p: torch.Tensor, clamp: float) -> torch.Tensor:
    m = p.shape[-1]
    return p.clamp(clamp, 1.0 - (m - 1) * clamp) if clamp > 0 else p


def gumbel_noise(shape, generator: torch.Generator | None = None) -> torch.Tensor:
    """G = -log(E), E ~ Exp(1): standard Gumbel noise (as torch.nn.functional.gumbel_softmax draws it)."""
    return -torch.empty(shape, dtype=torch.float32).exponential_(generator=generator).log()


@dataclass
class IOTLoss:
    total: torch.Tensor
    mlm: torch.Tensor  # mean over instances of sum_m gamma_m L_m
    diversity: torch.Tensor  # L_D
    sharpness: torch.Tensor  # L_S
    weights: torch.Tensor  # gamma, (batch, M)
    probs: torch.Tensor  # p, (batch, M)


def iot_loss(logits: torch.Tensor, inst_loss: torch.Tensor, inst_count: torch.Tensor, *, tau: float = TAU,
             c1: float = C1, c2: float = C2, clamp: float = CLAMP, noise: torch.Tensor | None = None) -> IOTLoss:
    """IOT objective for one batch. logits: (B, M); inst_loss: (B, M) per-instance mean MLM loss of each order;
    inst_count: (B,) masked tokens per instance; noise: (B, M) Gumbel noise or None (deterministic weights)."""
    p = logits.float().softmax(-1)
    pc = clamp_probs(p, clamp)
    z = pc.log()
    if noise is not None:
        z = z + noise.to(z)
    gamma = (z / tau).softmax(-1)
    weighted = (gamma * inst_loss).sum(-1)
    has = inst_count > 0
    mlm = weighted[has].mean() if bool(has.any()) else weighted.sum() * 0.0
    m = p.shape[-1]
    diversity = -math.log(m) - p.mean(0).log().mean()
    sharpness = (math.log(m) + pc.log().mean(-1)).mean()
    total = mlm + c1 * diversity + c2 * sharpness
    return IOTLoss(total, mlm, diversity, sharpness, gamma, p)


# ------------------------------------------------------------------------------------------- per-instance MLM


@dataclass
class InstanceMLM:
    loss: torch.Tensor  # (B,) mean cross-entropy over the instance's masked tokens (0 when it has none)
    loss_sum: torch.Tensor  # (B,) summed cross-entropy
    correct: torch.Tensor  # (B,) masked tokens predicted right
    count: torch.Tensor  # (B,) masked tokens


def per_instance_mlm(space, hidden: torch.Tensor, labels: torch.Tensor) -> InstanceMLM:
    """MLM loss/accuracy per sequence (right tokens by `modeling.mlm_correct`, as every other MLM accuracy); the
    vocabulary projection runs only at masked positions."""
    where = labels != -100
    rows = where.nonzero(as_tuple=True)[0]
    logits = space.head(hidden[where])
    target = labels[where]
    ce = F.cross_entropy(logits.float(), target, reduction="none")
    right = mlm_correct(logits.detach(), target).to(ce.dtype)
    b = labels.shape[0]
    loss_sum = ce.new_zeros(b).index_add(0, rows, ce)
    correct = ce.new_zeros(b).index_add(0, rows, right)
    count = where.sum(1).to(ce.dtype)
    return InstanceMLM(loss_sum / count.clamp(min=1.0), loss_sum, correct, count)


# ---------------------------------------------------------------------------------------------- orders/paths


def path_layers(space) -> list:
    """The supernet's path-sampling modules (one per slot), in module order."""
    from nni.nas.oneshot.pytorch.supermodule.base import BaseSuperNetModule

    return [m for m in space.modules() if isinstance(m, BaseSuperNetModule)]


def activate(layers, order: dict[str, str]) -> None:
    """Select `order` ({label: type}) on every path-sampling layer: the shared slot modules run that order."""
    memo = dict(order)
    for layer in layers:
        memo.update(layer.resample(memo=memo))


# --------------------------------------------------------------------------------------------- grouped routing


@dataclass
class RoutedOutput:
    choice: torch.Tensor  # (B,) chosen order per instance
    logits: torch.Tensor  # (B, M) predictor logits
    hidden: torch.Tensor | None  # (B, N, H); zero past a group's longest sequence; None unless asked for
    mlm: InstanceMLM | None = None


@torch.no_grad()
def routed_forward(space, predictor: OrderPredictor, orders: list[dict], input_ids, attention_mask=None,
                   token_type_ids=None, labels=None, layers=None, trim: bool = True, return_hidden: bool = True,
                   choice: torch.Tensor | None = None) -> RoutedOutput:
    """Argmax routing, batched by order: each order runs once on the instances that chose it (trimmed to the
    group's longest sequence), so a batch costs about one forward plus the predictor, not M forwards."""
    layers = layers if layers is not None else path_layers(space)
    logits = route_logits(space, predictor, input_ids, attention_mask)
    if choice is None:
        choice = logits.argmax(-1)
    emb = space.embeddings(input_ids, token_type_ids)
    b = emb.shape[0]
    hidden = torch.zeros_like(emb) if return_hidden else None
    sums = emb.new_zeros(3, b, dtype=torch.float32) if labels is not None else None  # loss sum, correct, count
    lengths = attention_mask.sum(1) if attention_mask is not None else None
    for m in torch.unique(choice).tolist():
        idx = (choice == m).nonzero(as_tuple=True)[0]
        n = int(lengths[idx].max()) if (trim and lengths is not None) else emb.shape[1]
        mask = attention_mask[idx, :n] if attention_mask is not None else None
        activate(layers, orders[m])
        h = space.encode(None, mask, None, hidden=emb[idx, :n])
        if return_hidden:
            hidden[idx, :n] = h
        if labels is not None:
            r = per_instance_mlm(space, h, labels[idx, :n])
            sums[:, idx] = torch.stack([r.loss_sum, r.correct, r.count]).to(sums.dtype)
    mlm = None
    if labels is not None:
        mlm = InstanceMLM(sums[0] / sums[2].clamp(min=1.0), sums[0], sums[1], sums[2])
    return RoutedOutput(choice, logits, hidden, mlm)


def order_forward(space, orders: list[dict], m: int, input_ids, attention_mask=None, token_type_ids=None,
                  layers=None, hidden=None) -> torch.Tensor:
    """Hidden states of the whole batch under order m (embeddings reused when `hidden` is given)."""
    activate(layers if layers is not None else path_layers(space), orders[m])
    return space.encode(input_ids, attention_mask, token_type_ids, hidden=hidden)


class IOTModel(nn.Module):
    """A trained IOT model: shared supernet weights + order predictor + the M candidate orders."""

    def __init__(self, space, predictor: OrderPredictor, orders: list[Arch], spec=None, cfg=None,
                 meta: dict | None = None):
        super().__init__()
        if predictor.num_orders != len(orders):
            raise ValueError(f"predictor has {predictor.num_orders} outputs for {len(orders)} orders")
        self.space, self.predictor = space, predictor
        self.orders = [Arch(o) for o in orders]  # Arch or lists of layer types
        self.order_dicts = [o.dict for o in self.orders]  # NNI's form: what `activate` selects
        self.spec, self.config, self.meta = spec, cfg, meta or {}
        self._layers = path_layers(space)

    @property
    def num_orders(self) -> int:
        return len(self.orders)

    def route(self, input_ids, attention_mask=None) -> torch.Tensor:
        """Chosen order per instance (argmax of the predictor)."""
        return route_logits(self.space, self.predictor, input_ids, attention_mask).argmax(-1)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, trim: bool = True,
                return_hidden: bool = True) -> RoutedOutput:
        """Grouped argmax routing (inference, no gradients)."""
        return routed_forward(self.space, self.predictor, self.order_dicts, input_ids, attention_mask,
                              token_type_ids, labels, layers=self._layers, trim=trim, return_hidden=return_hidden)

    def forward_order(self, m: int, input_ids, attention_mask=None, token_type_ids=None, labels=None):
        """Run the whole batch through order m; returns (hidden, InstanceMLM or None)."""
        h = order_forward(self.space, self.order_dicts, m, input_ids, attention_mask, token_type_ids, self._layers)
        return h, (per_instance_mlm(self.space, h, labels) if labels is not None else None)


def usage_entropy(counts) -> float:
    """Entropy of the order-usage distribution, normalised to [0, 1] by log M."""
    c = torch.as_tensor(counts, dtype=torch.float64)
    if c.numel() < 2 or float(c.sum()) <= 0:
        return 0.0
    u = c / c.sum()
    h = -(u[u > 0] * u[u > 0].log()).sum()
    return max(0.0, float(h / math.log(c.numel())))
