"""Instance-wise order (IOT) fine-tuning on sequence classification, and its single-order baseline.

From a trained IOT run (shared slot weights, order predictor, M orders) the classifier is the fine-tuning head of
`LVBertForSequenceClassification` (`lvbert finetune`'s model): dropout (`classifier_dropout`, 0.1) + a linear
layer on the final [CLS] state, initialised N(0, initializer_range), zero bias. Training with all M orders
(`orders=None`) minimises IOT's objective with the per-instance classification cross-entropy in place of the MLM
loss (`routing.iot_loss`, every instance counted once):

    loss = mean_x sum_m g_xm CE_xm + c1 L_D + c2 L_S      g_x = softmax((log clamp(p_x) + G) / tau)

A single order (`orders=[k]`) trains that order alone from the same IOT weights with the mean cross-entropy: the
paper's baseline (a model of one order trained the same way). Both follow the fine-tuning recipe of
`finetune.recipe` (AdamW eps 1e-6, weight decay 0.01 but on biases/LayerNorm, 10 % warm-up then linear decay,
layer-wise lr decay 0.8 with slots (2i, 2i+1) at depth i+1, embeddings at 0, head and predictor at n+2; the
predictor without weight decay, as in IOT's training). Batches are `finetune`'s (`StepBatchSampler`: a function
of (seed, step)), dropout and Gumbel noise functions of (seed, step): a seed's IOT and single-order runs see the
same batches and start from the same head.

Evaluation (no dropout): every order on the whole dev set (its prediction per instance), and the routed model's
prediction through grouped argmax routing (`routing.routed_forward`: one forward per chosen order).
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..finetune import metrics as M
from .defaults import C1, C2, CLAMP, TAU
from .method import IOTMethod
from .routing import activate, gumbel_noise, iot_loss, path_layers, route_logits, routed_forward, tau_at

NOISE_STREAM = 6  # batch_seed stream of the Gumbel noise (fine-tuning's dropout uses 5: finetune.module)


class OrderClassifier(nn.Module):
    """Shared supernet weights + (optional) order predictor + the orders, with one classification head."""

    def __init__(self, space, predictor, orders: list[dict], num_labels: int, classifier_dropout: float = 0.1,
                 seed: int = 0):
        super().__init__()
        cfg = space.config
        self.space, self.predictor, self.orders = space, predictor, [dict(o) for o in orders]
        self.dropout = nn.Dropout(classifier_dropout)
        self.classifier = nn.Linear(cfg.hidden_size, num_labels)
        g = torch.Generator().manual_seed(int(seed))
        with torch.no_grad():  # as LVBertPreTrainedModel._init_weights, from the seed alone
            self.classifier.weight.copy_(torch.randn(self.classifier.weight.shape, generator=g)
                                         * cfg.initializer_range)
            self.classifier.bias.zero_()
        self._layers = path_layers(space)

    @property
    def num_orders(self) -> int:
        return len(self.orders)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(hidden[:, 0]))

    def all_orders(self, batch) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
        """(predictor logits (B, M) or None, [class logits (B, C) of each order]); the embeddings run once."""
        ids, mask = batch["input_ids"], batch.get("attention_mask")
        emb = self.space.embeddings(ids, batch.get("token_type_ids"))
        route = route_logits(self.space, self.predictor, ids, mask) if self.predictor is not None else None
        out = []
        for order in self.orders:
            activate(self._layers, order)
            out.append(self.head(self.space.encode(ids, mask, hidden=emb)))
        return route, out

    @torch.no_grad()
    def routed(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(chosen order (B,), class logits (B, C)) by grouped argmax routing: one forward per chosen order."""
        out = routed_forward(self.space, self.predictor, self.orders, batch["input_ids"], batch.get("attention_mask"),
                             batch.get("token_type_ids"), layers=self._layers)
        return out.choice, self.head(out.hidden)


def classification_loss(route, logits: list[torch.Tensor], labels: torch.Tensor, *, tau: float = TAU,
                        c1: float = C1, c2: float = C2, clamp: float = CLAMP, noise=None):
    """IOT's objective on per-instance cross-entropies (`routing.iot_loss`, counts of 1); one order without a
    predictor: the mean cross-entropy (returned as a tensor)."""
    ce = torch.stack([F.cross_entropy(lg.float(), labels, reduction="none") for lg in logits], -1)
    if route is None:
        return ce[:, 0].mean()
    return iot_loss(route, ce, torch.ones(len(labels), device=ce.device), tau=tau, c1=c1, c2=c2, clamp=clamp,
                    noise=noise)


def param_groups(model: OrderClassifier, lr: float, weight_decay: float, decay: float) -> list[dict]:
    """AdamW groups as `finetune.recipe.param_groups` for an LV-BERT of the space's slots: embeddings depth 0, slots
    (2i, 2i+1) depth i+1 (a module several slots share: the highest), head and predictor n+2; lr x decay^(n+2-d);
    no weight decay on 1-d parameters (biases, LayerNorm) nor on the predictor. The MLM head is not trained."""
    from ..finetune.recipe import SLOTS_PER_BLOCK

    space = model.space
    head = -(-len(space.layers) // SLOTS_PER_BLOCK) + 2
    depth: dict[int, tuple[int, nn.Parameter]] = {}
    for p in space.embeddings.parameters():
        depth[id(p)] = (0, p)
    for i, layer in enumerate(space.layers):
        for p in layer.parameters():
            d = max(depth.get(id(p), (0, p))[0], i // SLOTS_PER_BLOCK + 1)
            depth[id(p)] = (d, p)
    for p in model.classifier.parameters():
        depth[id(p)] = (head, p)
    predictor = {id(p) for p in model.predictor.parameters()} if model.predictor is not None else set()
    for p in model.predictor.parameters() if model.predictor is not None else ():
        depth[id(p)] = (head, p)
    groups: dict[tuple[int, bool], dict] = {}
    for key, (d, p) in depth.items():
        no_wd = p.ndim == 1 or key in predictor
        g = groups.setdefault((d, no_wd), {"params": [], "lr": lr * decay ** (head - d),
                                           "weight_decay": 0.0 if no_wd else weight_decay})
        g["params"].append(p)
    return [groups[k] for k in sorted(groups)]


@dataclass(frozen=True)
class Recipe:
    """One fine-tuning run's settings (every run of a study shares them)."""

    steps: int
    batch_size: int = 32
    lr: float = 3e-4
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    layer_decay: float = 0.8
    adam_eps: float = 1e-6
    classifier_dropout: float = 0.1
    eval_batch_size: int = 128
    method: IOTMethod = IOTMethod()

    def to_dict(self) -> dict:
        """Flat, as the study's JSON keeps it: the fine-tuning settings, then IOT's."""
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "method"}
        return {**d, **self.method.settings()}


def _batches(rows: list[dict], size: int, pad_id: int):
    from ..finetune.module import collate

    for i in range(0, len(rows), size):
        yield collate(rows[i:i + size], pad_id, False)


def _to(batch: dict, device) -> dict:
    return {k: v.to(device) for k, v in batch.items()}


def train_and_predict(iot_dir, orders: list[int] | None, train_rows: list[dict], dev_rows: list[dict],
                      num_labels: int, pad_id: int, recipe: Recipe, seed: int, device: str = "cpu",
                      log=None) -> dict:
    """Fine-tune the IOT run `iot_dir` with IOT's objective over all its orders (`orders=None`) or one order alone
    (`orders=[k]`), then predict the dev rows. Returns per-instance predictions (JSON-ready), losses and times."""
    from ..data.resumable import StepBatchSampler, batch_seed
    from ..finetune.module import STEP_STREAM, collate
    from ..trainer import adamw, linear_warmup_decay
    from .rundir import load_iot

    iot = load_iot(iot_dir)
    pick = list(range(iot.num_orders)) if orders is None else list(orders)
    model = OrderClassifier(iot.space, iot.predictor if orders is None else None,
                            [iot.order_dicts[k] for k in pick], num_labels, recipe.classifier_dropout, seed)
    model.to(device).train()
    opt = adamw(param_groups(model, recipe.lr, recipe.weight_decay, recipe.layer_decay), lr=recipe.lr,
                eps=recipe.adam_eps, betas=(0.9, 0.999))
    warmup = round(recipe.warmup_fraction * recipe.steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, linear_warmup_decay(warmup, recipe.steps))
    sampler = StepBatchSampler(len(train_rows), recipe.batch_size, seed)
    losses, quarter, started = [], max(1, recipe.steps // 4), time.perf_counter()
    step = 0
    while step < recipe.steps:
        for keyed in sampler:
            if step >= recipe.steps:
                break
            batch = _to(collate([train_rows[i] for i, _ in keyed], pad_id, False), device)
            labels = batch.pop("labels")
            torch.manual_seed(batch_seed(seed, step, 0, STEP_STREAM))  # dropout: as finetune.module
            route, logits = model.all_orders(batch)
            noise = None
            if route is not None and recipe.method.gumbel:
                g = torch.Generator().manual_seed(batch_seed(seed, step, 0, NOISE_STREAM))
                noise = gumbel_noise(tuple(route.shape), g).to(device)
            m = recipe.method
            tau = tau_at(step, m.tau, m.tau_min, m.tau_decay, m.tau_every)
            out = classification_loss(route, logits, labels, tau=tau, c1=m.c1, c2=m.c2, clamp=m.clamp, noise=noise)
            loss = out if route is None else out.total
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            step += 1
            if log is not None and (step % quarter == 0 or step == recipe.steps):
                log(f"step {step}/{recipe.steps}: loss {np.mean(losses[-quarter:]):.4f} "
                    f"({time.perf_counter() - started:.0f} s)")
    train_seconds = time.perf_counter() - started
    started = time.perf_counter()
    res = predict(model, dev_rows, pad_id, recipe.eval_batch_size, device)
    return {"orders": [iot.orders[k].compact for k in pick], "steps": recipe.steps, "train_seconds": train_seconds,
            "eval_seconds": time.perf_counter() - started, "threads": torch.get_num_threads(), "device": device,
            "train_loss_first_last_quarter": [float(np.mean(losses[:quarter])), float(np.mean(losses[-quarter:]))],
            **res}


@torch.no_grad()
def predict(model: OrderClassifier, rows: list[dict], pad_id: int, batch_size: int = 128,
            device: str = "cpu") -> dict:
    """Per dev instance: each order's prediction (N, M); with a predictor also its choice and the routed
    prediction (grouped routing) and each order's cross-entropy."""
    model.eval()
    preds, ce, choice, routed = [], [], [], []
    for batch in _batches(rows, batch_size, pad_id):
        batch = _to(batch, device)
        labels = batch.pop("labels")
        _, logits = model.all_orders(batch)
        preds.append(torch.stack([lg.argmax(-1) for lg in logits], -1).cpu())
        ce.append(torch.stack([F.cross_entropy(lg.float(), labels, reduction="none") for lg in logits], -1).cpu())
        if model.predictor is not None:
            c, lg = model.routed(batch)
            choice.append(c.cpu())
            routed.append(lg.argmax(-1).cpu())
    out = {"labels": [int(r["labels"]) for r in rows], "preds": torch.cat(preds).tolist(),
           "loss": [[round(float(v), 6) for v in row] for row in torch.cat(ce).tolist()]}
    if model.predictor is not None:
        out.update(choice=torch.cat(choice).tolist(), routed=torch.cat(routed).tolist())
    return out


# --------------------------------------------------------------------------------------------------- statistics
def mean_se(x) -> dict:
    """Mean of per-instance values with its standard error (sample standard deviation / sqrt(n))."""
    x = np.asarray(x, dtype=float)
    se = float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0
    return {"mean": float(x.mean()), "se": se}


def iot_statistics(res: dict) -> dict:
    """Routed, each order with the IOT-fine-tuned weights, the per-instance oracle (right if any order is), the
    predictor's agreement with the oracle where the orders disagree, and the usage."""
    y = np.asarray(res["labels"])
    preds, choice, routed = np.asarray(res["preds"]), np.asarray(res["choice"]), np.asarray(res["routed"])
    right = preds == y[:, None]
    m, n = right.shape[1], len(y)
    r = np.arange(n)
    routed_right = routed == y
    oracle = right.any(1)
    mixed = oracle & ~right.all(1)
    usage = np.bincount(choice, minlength=m) / n
    return {
        "routed": mean_se(routed_right),
        "orders_iot": [mean_se(right[:, k]) for k in range(m)],
        "oracle": mean_se(oracle),
        "mixed_instances": int(mixed.sum()),
        "agreement": float(right[r, choice][mixed].mean()) if mixed.any() else None,
        "agreement_by_chance": float((right[mixed] * usage).sum(1).mean()) if mixed.any() else None,
        "usage": usage.tolist(),
        "routed_equals_chosen_order": bool((routed == preds[r, choice]).all()),
        "oracle_preds": np.where(oracle, y, routed).tolist(),
    }


def score_seed(task, dev_names: list[str], iot: dict, alone: list[dict]) -> dict:
    """One seed's statistics: `iot.finetune.iot_statistics`, the task's metric of each, and every stand-alone order
    with the routed model's paired difference against it."""
    y, names = np.asarray(iot["labels"]), np.asarray(dev_names)

    def metric(preds) -> float:
        p = np.asarray(preds)
        return M.task_score({n: M.compute(task.metrics, p[names == n], y[names == n])
                             for n in dict.fromkeys(dev_names)})

    st = iot_statistics(iot)
    routed_right = np.asarray(iot["routed"]) == y
    preds = np.asarray(iot["preds"])
    st.update(routed_score=metric(iot["routed"]), oracle_score=metric(st.pop("oracle_preds")),
              order_scores=[metric(preds[:, k]) for k in range(preds.shape[1])])
    st["standalone"] = {}
    for a in alone:
        right = np.asarray(a["preds"])[:, 0] == y
        st["standalone"][a["orders"][0]] = {**mean_se(right), "score": metric(np.asarray(a["preds"])[:, 0]),
                                            "routed_minus_this": mean_se(routed_right.astype(float) - right)}
    return st
