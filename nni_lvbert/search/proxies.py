"""Zero-cost proxies (Abdelfattah et al., ICLR 2021): score an order from one forward/backward pass of a freshly
initialised model, no training. The cheap floor a ranking study compares the trained rankers with.

- `grad-norm`: the L2 norm of the MLM loss's gradient over all parameters;
- `snip`: sum |theta * dL/dtheta| (Lee et al., ICLR 2019), the MLM loss's connection sensitivity;
- `synflow`: sum |theta * dR/dtheta| with R the sum of the vocabulary logits of an all-ones input to the first
  slot, every parameter replaced by its absolute value, in float64 (Tanaka et al., NeurIPS 2020): data-free.

Larger is better for all three. grad-norm and snip use one validation batch (fixed masking: every order sees the
same tokens); the initialisation is seeded, so a score is a function of (order, shape, seed).
"""
from __future__ import annotations

import torch

from ..errors import UserError
from ..modeling import FixedMLM, masked_rows

PROXIES = ("grad-norm", "snip", "synflow")


def check_proxy(name: str) -> str:
    if name not in PROXIES:
        raise UserError(f"unknown zero-cost proxy {name!r}; choose one of {', '.join(PROXIES)}")
    return name


def proxy_score(name: str, cfg, arch, batch, seed: int = 0) -> float:
    """The proxy `name` of `arch` at shape `cfg` (a ValBatch from `validation.load_val_batches` for the data-based
    ones), from a model initialised with `seed`."""
    check_proxy(name)
    torch.manual_seed(seed)
    model = FixedMLM(cfg, arch).to(batch.input_ids.device).eval()  # eval: no dropout, deterministic
    params = [p for p in model.parameters() if p.requires_grad]
    if name == "synflow":
        model.double()
        with torch.no_grad():
            for p in params:
                p.abs_()
        ones = torch.ones(1, batch.input_ids.shape[1], cfg.hidden_size, dtype=torch.float64,
                          device=batch.input_ids.device)
        model.head(model.encode(None, hidden=ones)).sum().backward()
    else:
        hidden = model.encode(batch.input_ids, batch.mask, batch.token_type_ids)
        logits = model.head(masked_rows(hidden, batch.positions))
        torch.nn.functional.cross_entropy(logits, batch.target).backward()
    grads = [(p, p.grad) for p in params if p.grad is not None]
    if name == "grad-norm":
        return float(torch.sqrt(sum((g.double() ** 2).sum() for _, g in grads)))
    return float(sum((p.detach().double() * g.double()).abs().sum() for p, g in grads))
