"""Pre-training metrics from summable counts (exact over batches and DDP ranks), as the official ELECTRA code logs
them: (generator) MLM accuracy and loss, discriminator loss, accuracy, precision, recall (prediction: logit > 0,
i.e. probability > 0.5, over non-pad tokens) and AUC, SOP accuracy.

AUC is computed from histograms of the discriminator's logits (AUC_BINS bins over [-LOGIT_RANGE, LOGIT_RANGE],
ties within a bin counted half), which add up over batches and ranks; it is within ~1e-3 of the exact ranking AUC
(sklearn's roc_auc_score; tested) — the official code's tf.metrics.auc uses 200 thresholds.
"""
from __future__ import annotations

import torch

SUMS = ("mlm_loss", "mlm_correct", "mlm_count", "disc_loss", "disc_tokens", "tp", "fp", "fn", "tn",
        "sop_loss", "sop_correct", "sop_count")
AUC_BINS = 4096
LOGIT_RANGE = 20.0


def step_sums(out: dict) -> torch.Tensor:
    """The SUMS of one forward (objectives' output dict) as one float64 vector."""
    ref = out["loss"]
    values = dict.fromkeys(SUMS, 0)
    values.update({k: out[k] for k in SUMS if k in out})
    if "disc_logits" in out:
        pred, y, real = out["disc_logits"] > 0, out["disc_labels"] > 0.5, out.get("disc_real")
        if real is None:  # every token is real
            real = torch.ones_like(y)
        values.update(disc_tokens=real.sum(), tp=(pred & y & real).sum(), fp=(pred & ~y & real).sum(),
                      fn=(~pred & y & real).sum(), tn=(~pred & ~y & real).sum())
    return torch.stack([torch.as_tensor(values[k], device=ref.device).double().reshape(()) for k in SUMS])


def histogram(logits: torch.Tensor, labels: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
    """(2, AUC_BINS) counts of negatives / positives per logit bin (over the `real` tokens: None = all)."""
    if real is not None:
        logits, labels = logits[real], labels[real]
    scaled = (logits.float().clamp(-LOGIT_RANGE, LOGIT_RANGE) + LOGIT_RANGE) / (2 * LOGIT_RANGE)
    idx = (scaled * AUC_BINS).long().clamp(0, AUC_BINS - 1) + AUC_BINS * (labels > 0.5).long()
    return torch.bincount(idx, minlength=2 * AUC_BINS).double().view(2, AUC_BINS)


def auc(hist: torch.Tensor) -> float | None:
    """Area under the ROC curve of histograms (negatives, positives); None without both classes."""
    neg, pos = hist[0].double(), hist[1].double()
    n_neg, n_pos = float(neg.sum()), float(pos.sum())
    if n_neg == 0 or n_pos == 0:
        return None
    below = torch.cumsum(neg, 0) - neg  # negatives in lower bins
    return float((pos * (below + 0.5 * neg)).sum()) / (n_pos * n_neg)


def _ratio(a, b):
    return float(a) / float(b) if float(b) > 0 else None


def summarize(sums: torch.Tensor, objective: str, hist: torch.Tensor | None = None) -> dict:
    """Metric values from summed counts; names: `mlm_acc`/`mlm_loss` (MLM) or `gen_mlm_acc`/`gen_loss`
    (ELECTRA's generator), `disc_*`, `sop_*` (only those the objective has)."""
    s = dict(zip(SUMS, sums.tolist()))
    prefix = "gen_" if objective == "electra" else ""
    out = {f"{prefix}mlm_acc": _ratio(s["mlm_correct"], s["mlm_count"]),
           f"{prefix}{'loss' if prefix else 'mlm_loss'}": _ratio(s["mlm_loss"], s["mlm_count"])}
    if objective == "electra":
        out.update(disc_loss=_ratio(s["disc_loss"], s["disc_tokens"]),
                   disc_acc=_ratio(s["tp"] + s["tn"], s["disc_tokens"]),
                   disc_precision=_ratio(s["tp"], s["tp"] + s["fp"]), disc_recall=_ratio(s["tp"], s["tp"] + s["fn"]),
                   disc_replaced=_ratio(s["tp"] + s["fn"], s["disc_tokens"]))
        if hist is not None:
            out["disc_auc"] = auc(hist)
    if s["sop_count"]:
        out.update(sop_acc=_ratio(s["sop_correct"], s["sop_count"]), sop_loss=_ratio(s["sop_loss"], s["sop_count"]))
    return {k: v for k, v in out.items() if v is not None}
