"""IOT as a custom NNI one-shot strategy.

`IOTStrategy` is a `RandomOneShot` (same path-sampling supernet, so a trained SPOS supernet loads as is) whose
one-shot Lightning module, instead of sampling one random path per step, runs every candidate order on the batch,
weights the per-instance MLM losses by Gumbel-softmax routing weights from an order predictor and adds the IOT
diversity / sharpness terms (see routing.py). It runs under `NasExperiment(space, Lightning(...), IOTStrategy(...))`
like any one-shot strategy, with Lightning's loops, logging, checkpoints and DDP.

The predictor lives in the one-shot module (like DARTS' architecture weights) and is optimised by the evaluator's
optimizer: its parameters are added as an extra group (no weight decay) under the same LR schedule.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from nni.nas.oneshot.pytorch.base_lightning import BaseOneShotLightningModule
from nni.nas.strategy import RandomOneShot

from ..nni_compat import extend_lambda_lr, keep_already_mutated
from ..supernet.lightning_module import log_throughput
from .routing import (
    C1,
    C2,
    CLAMP,
    TAU,
    TAU_DECAY,
    TAU_EVERY,
    TAU_MIN,
    OrderPredictor,
    activate,
    gumbel_noise,
    iot_loss,
    path_layers,
    per_instance_mlm,
    route_logits,
    tau_at,
    usage_entropy,
)


def attach_params(optim_conf, params: list, weight_decay: float = 0.0):
    """Add `params` to the evaluator's optimizer as a new group, following its LambdaLR schedule when it has one."""
    opt = optim_conf["optimizer"] if isinstance(optim_conf, dict) else optim_conf
    if not isinstance(opt, torch.optim.Optimizer):
        raise TypeError("IOT needs the evaluator to return one optimizer (or a dict with 'optimizer')")
    opt.add_param_group({"params": params, "weight_decay": weight_decay})
    sched = optim_conf.get("lr_scheduler") if isinstance(optim_conf, dict) else None
    sched = sched.get("scheduler") if isinstance(sched, dict) else sched
    if sched is not None:
        extend_lambda_lr(sched, opt)  # NNI 3.0 workaround (see nni_compat)
    return optim_conf


class IOTLightningModule(BaseOneShotLightningModule):
    """Training: all M orders per batch, Gumbel-weighted per-instance losses + c1 L_D + c2 L_S.
    Validation: per-order and routed (argmax) MLM accuracy, oracle accuracy and order usage, exact over ranks."""

    def __init__(self, training_module, orders: list[dict], embedding_dim: int, *, tau: float = TAU,
                 tau_min: float = TAU_MIN, tau_decay: float = TAU_DECAY, tau_every: int = TAU_EVERY,
                 c1: float = C1, c2: float = C2, clamp: float = CLAMP, gumbel: bool = True, seed: int = 0,
                 predictor_dropout: float = 0.0):
        super().__init__(training_module)
        self.orders = [dict(o) for o in orders]
        self.predictor = OrderPredictor(embedding_dim, len(orders), dropout=predictor_dropout)
        self.tau_schedule = {"tau": tau, "tau_min": tau_min, "decay": tau_decay, "every": tau_every}
        self.c1, self.c2, self.clamp, self.gumbel, self.seed = c1, c2, clamp, gumbel, seed
        self.last_validation: dict | None = None
        self._val = self._usage = None
        self._tick = None
        self._layers_cache = None

    @property
    def automatic_optimization(self) -> bool:  # one optimizer (predictor added as a group): Lightning steps it
        return True

    @property
    def num_orders(self) -> int:
        return len(self.orders)

    def _layers(self):
        if self._layers_cache is None:
            self._layers_cache = path_layers(self.model)
        return self._layers_cache

    def tau(self, step: int | None = None) -> float:
        return tau_at(self.trainer.global_step if step is None else step, **self.tau_schedule)

    def noise(self, shape, step: int) -> torch.Tensor | None:
        """Gumbel noise, a function of (seed, rank, step): reproducible and identical after --resume."""
        if not self.gumbel:
            return None
        rank = self.trainer.global_rank if self._trainer is not None else 0
        state = np.random.SeedSequence([self.seed, rank, step]).generate_state(1)[0]
        return gumbel_noise(shape, torch.Generator().manual_seed(int(state)))

    def order_results(self, batch):
        """Per-instance MLM results of every order on the batch: (logits (B, M), [InstanceMLM] * M)."""
        space = self.model
        ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
        emb = space.embeddings(ids, batch.get("token_type_ids"))
        logits = route_logits(space, self.predictor, ids, mask)
        results = []
        for order in self.orders:
            activate(self._layers(), order)
            h = space.encode(ids, mask, hidden=emb)
            results.append(per_instance_mlm(space, h, labels))
        return logits, results

    # ------------------------------------------------------------------------------------------------ training

    def training_step(self, batch, batch_idx):
        step = self.trainer.global_step
        logits, results = self.order_results(batch)
        inst_loss = torch.stack([r.loss for r in results], -1)
        count = results[0].count
        noise = self.noise(tuple(logits.shape), step)
        tau = self.tau(step)
        out = iot_loss(logits, inst_loss, count, tau=tau, c1=self.c1, c2=self.c2, clamp=self.clamp,
                       noise=noise.to(logits.device) if noise is not None else None)
        with torch.no_grad():
            choice = logits.argmax(-1)
            correct = torch.stack([r.correct for r in results], -1).gather(1, choice[:, None]).sum()
            usage = torch.bincount(choice, minlength=self.num_orders)
        self.log("train_loss", out.total, prog_bar=True)
        self.log("train_mlm_loss", out.mlm)
        self.log("train_L_D", out.diversity)
        self.log("train_L_S", out.sharpness)
        self.log("train_routed_acc", correct / count.sum().clamp(min=1), prog_bar=True)
        self.log("train_usage_entropy", usage_entropy(usage.cpu()))
        self.log("tau", tau)
        log_throughput(self, batch)
        return out.total

    def configure_optimizers(self) -> Any:
        return attach_params(self.training_module.configure_optimizers(), list(self.predictor.parameters()))

    # ---------------------------------------------------------------------------------------------- validation

    def on_validation_epoch_start(self):
        m = self.num_orders
        # rows: orders 0..M-1, routed (M), oracle (M+1); columns: loss sum, correct, count
        self._val = torch.zeros(m + 2, 3, dtype=torch.float64, device=self.device)
        self._usage = torch.zeros(m, dtype=torch.float64, device=self.device)

    def validation_step(self, batch, batch_idx):
        with torch.no_grad():
            logits, results = self.order_results(batch)
            self._val += validation_counts(logits.argmax(-1), results)
            self._usage += torch.bincount(logits.argmax(-1), minlength=self.num_orders).double()

    def on_validation_epoch_end(self):
        val = self.trainer.strategy.reduce(self._val, reduce_op="sum")
        usage = self.trainer.strategy.reduce(self._usage, reduce_op="sum")
        stats = summarize(val.cpu(), usage.cpu())
        self.last_validation = stats
        self.log("val_mlm_acc", stats["routed"]["val_mlm_acc"], prog_bar=True, rank_zero_only=True)
        self.log("val_loss", stats["routed"]["val_loss"], rank_zero_only=True)
        self.log("val_best_single_acc", stats["best_single"]["val_mlm_acc"], rank_zero_only=True)
        self.log("val_oracle_acc", stats["oracle"]["val_mlm_acc"], rank_zero_only=True)
        self.log("val_usage_entropy", stats["usage_entropy"], prog_bar=True, rank_zero_only=True)
        for i, o in enumerate(stats["orders"]):
            self.log(f"val_acc/order{i}", o["val_mlm_acc"], rank_zero_only=True)
            self.log(f"val_usage/order{i}", o["usage"], rank_zero_only=True)
        self._tick = None

    def export(self) -> dict[str, Any]:
        """The most used order on the last validation (IOT keeps all M; see the run directory for them)."""
        if self.last_validation:
            usage = [o["usage"] for o in self.last_validation["orders"]]
            return dict(self.orders[int(np.argmax(usage))])
        return dict(self.orders[0])


def validation_counts(choice: torch.Tensor, results) -> torch.Tensor:
    """(M + 2, 3) sums [loss, correct, count] per order, for the routed choice and for the per-instance oracle."""
    m = len(results)
    loss = torch.stack([r.loss_sum for r in results], -1).double()
    correct = torch.stack([r.correct for r in results], -1).double()
    count = results[0].count.double()
    out = torch.zeros(m + 2, 3, dtype=torch.float64, device=loss.device)
    out[:m, 0], out[:m, 1], out[:m, 2] = loss.sum(0), correct.sum(0), count.sum()
    pick = choice[:, None]
    out[m] = torch.stack([loss.gather(1, pick).sum(), correct.gather(1, pick).sum(), count.sum()])
    # oracle: the order with the most right tokens for the instance (ties: lower loss)
    best = (correct * 1e6 - loss).argmax(-1, keepdim=True)
    out[m + 1] = torch.stack([loss.gather(1, best).sum(), correct.gather(1, best).sum(), count.sum()])
    return out


def summarize(val: torch.Tensor, usage: torch.Tensor, archs: list[str] | None = None) -> dict:
    """JSON-ready statistics from `validation_counts` sums and usage counts."""
    m = usage.numel()

    def row(r):
        n = max(float(r[2]), 1.0)
        return {"val_mlm_acc": float(r[1]) / n, "val_loss": float(r[0]) / n}

    total = max(float(usage.sum()), 1.0)
    orders = [{**({"arch": archs[i]} if archs else {}), "usage": float(usage[i]) / total, **row(val[i])}
              for i in range(m)]
    best = max(range(m), key=lambda i: orders[i]["val_mlm_acc"])
    routed = row(val[m])
    return {
        "sequences": int(usage.sum()),
        "masked_tokens": int(val[m][2]),
        "orders": orders,
        "routed": routed,
        "best_single": {"index": best, **({"arch": archs[best]} if archs else {}), **row(val[best])},
        "routed_minus_best_single": routed["val_mlm_acc"] - orders[best]["val_mlm_acc"],
        "oracle": row(val[m + 1]),
        "usage_entropy": usage_entropy(usage),
        "max_usage": max(o["usage"] for o in orders),
    }


class IOTStrategy(RandomOneShot):
    """`NasExperiment(space, Lightning(MLMModule(...), ...), IOTStrategy(orders, embedding_dim))`.

    orders: M architectures as NNI dicts ({"layer00": "dc", ...}); embedding_dim: d of the input word embedding.
    The space may be fresh (it is mutated to the path-sampling supernet) or an already mutated, trained supernet.
    """

    def __init__(self, orders: list[dict], embedding_dim: int, *, tau: float = TAU, tau_min: float = TAU_MIN,
                 tau_decay: float = TAU_DECAY, tau_every: int = TAU_EVERY, c1: float = C1, c2: float = C2,
                 clamp: float = CLAMP, gumbel: bool = True, seed: int = 0, predictor_dropout: float = 0.0,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        if len(orders) < 2:
            raise ValueError(f"IOT needs at least 2 orders, got {len(orders)}")
        self.orders, self.embedding_dim = [dict(o) for o in orders], embedding_dim
        self.module_kwargs = {"tau": tau, "tau_min": tau_min, "tau_decay": tau_decay, "tau_every": tau_every,
                              "c1": c1, "c2": c2, "clamp": clamp, "gumbel": gumbel, "seed": seed,
                              "predictor_dropout": predictor_dropout}

    def default_mutation_hooks(self):
        return [keep_already_mutated] + super().default_mutation_hooks()

    def configure_oneshot_module(self, training_module) -> IOTLightningModule:
        return IOTLightningModule(training_module, self.orders, self.embedding_dim, **self.module_kwargs)
