"""Validation statistics of a trained IOT model: order usage, MLM accuracy per order vs the routed model."""
from __future__ import annotations

import time

import torch

from .strategy import summarize, validation_counts


@torch.no_grad()
def evaluate_iot(model, loader, max_batches: int | None = None, progress: bool = False) -> dict:
    """Every order on every batch (per-order accuracy, oracle) and the grouped argmax routing (routed accuracy).

    `routed` gathers each instance's result from its chosen order's full-batch run; `routed_grouped` is the real
    inference path (one forward per group). They agree up to float noise; both are reported.
    """
    model.eval()
    m = model.num_orders
    val = torch.zeros(m + 2, 3, dtype=torch.float64)
    usage = torch.zeros(m, dtype=torch.float64)
    grouped = torch.zeros(3, dtype=torch.float64)
    t_routed = t_all = 0.0
    total = len(loader) if max_batches is None else min(len(loader), max_batches)
    it = enumerate(loader)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, total=total, desc="iot eval", leave=False)
    for i, batch in it:
        if i >= total:
            break
        args = (batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"), batch["labels"])
        t0 = time.perf_counter()
        out = model(*args, return_hidden=False)
        t_routed += time.perf_counter() - t0
        t0 = time.perf_counter()
        results = [model.forward_order(k, *args)[1] for k in range(m)]
        t_all += time.perf_counter() - t0
        val += validation_counts(out.choice, results)
        usage += torch.bincount(out.choice, minlength=m).double()
        grouped += torch.stack([out.mlm.loss_sum.sum(), out.mlm.correct.sum(), out.mlm.count.sum()]).double()
    stats = summarize(val, usage, archs=[o.compact for o in model.orders])
    n = max(float(grouped[2]), 1.0)
    stats["routed_grouped"] = {"val_mlm_acc": float(grouped[1]) / n, "val_loss": float(grouped[0]) / n}
    stats["batches"], stats["of_batches"] = total, len(loader)  # scored / in the validation split
    stats["seconds"] = {"routed_grouped": round(t_routed, 4), "all_orders": round(t_all, 4)}
    return stats
