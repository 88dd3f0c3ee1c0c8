"""Token-level scores of a trained IOT model and of stand-alone models on fixed validation batches.

Every masked validation token gives, for each of the M orders run with the IOT-trained shared weights, whether the
MLM prediction is right and its loss; each row (one sequence under one masking round) gives its sequence and the
predictor's choice. Everything the IOT study reports (`study/iot_stats.py`) is computed from these arrays, so they
are what a study stores per seed: a re-analysis needs no model.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..modeling import masked_rows, mlm_correct
from .routing import route_logits


def _tokens(head, hidden, batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(right?, loss, row within the batch) of each masked token of one batch."""
    logits = head(masked_rows(hidden, batch.positions)).float()
    rows = batch.positions // hidden.shape[1]
    return mlm_correct(logits, batch.target), F.cross_entropy(logits, batch.target, reduction="none"), rows


def iot_tokens(model, batches) -> dict:
    """Arrays of an `IOTModel` on validation batches: per masked token `row` (global row index), `correct` (T, M)
    and `loss` (T, M, float16: only used to break ties); per row `seq` (its validation sequence) and `choice` (the
    predictor's argmax)."""
    out: dict[str, list] = {"row": [], "correct": [], "loss": [], "seq": [], "choice": []}
    offset = 0
    with torch.inference_mode():
        for b in batches:
            per = [_tokens(model.space.head, model.forward_order(k, b.input_ids, b.mask, b.token_type_ids)[0], b)
                   for k in range(model.num_orders)]
            out["correct"].append(torch.stack([p[0] for p in per], -1).to(torch.uint8))
            out["loss"].append(torch.stack([p[1] for p in per], -1).to(torch.float16))
            out["row"].append(per[0][2] + offset)
            out["seq"].append(torch.as_tensor(b.seq))
            out["choice"].append(route_logits(model.space, model.predictor, b.input_ids, b.mask).argmax(-1))
            offset += b.input_ids.shape[0]
    arrays = {k: torch.cat(v).numpy() for k, v in out.items()}
    arrays["row"] = arrays["row"].astype(np.int32)
    arrays["seq"] = arrays["seq"].astype(np.int32)
    arrays["choice"] = arrays["choice"].astype(np.int8)
    return arrays


def model_tokens(model, batches) -> np.ndarray:
    """A stand-alone model's right predictions per masked token (uint8), in `iot_tokens`' token order."""
    with torch.inference_mode():
        return torch.cat([_tokens(model.head, model.encode(b.input_ids, b.mask, b.token_type_ids), b)[0]
                          for b in batches]).to(torch.uint8).numpy()
