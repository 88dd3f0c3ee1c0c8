"""The fixed validation set every score is computed on: the device, the batches (fixed or full masking) and the MLM
accuracy and loss of a model over them (the supernet scorer, the nnictl trial and the studies' stand-alone models all
score through these).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import UserError
from ..modeling import masked_rows, mlm_accuracy

MASKINGS = ("fixed", "full")


def resolve_device(name: str | None = "auto"):
    """`auto` (a GPU when torch sees one, else the CPU), `cpu`, `cuda`, `cuda:N` or `mps`; one line if unavailable."""

    name = (name or "auto").strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise UserError(f"unknown device {name!r}; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"device {name!r} requested but this torch ({torch.__version__}) sees no CUDA GPU; "
                            "use --device cpu, or install a CUDA build of torch (see docs/guide/gpu.md)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"device {name!r} requested but only {torch.cuda.device_count()} CUDA GPU(s) are visible")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"device {name!r} requested but MPS is not available")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"unsupported device {name!r}; use auto, cpu, cuda, cuda:N or mps")
    return device


@dataclass
class ValBatch:
    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    mask: torch.Tensor | None  # None when nothing is padded
    positions: torch.Tensor  # flat (batch x seq) indices of the positions to predict (`modeling.masked_positions`)
    target: torch.Tensor  # labels at those positions
    tokens: int
    seq: torch.Tensor | None = None  # the validation sequence of each row (standard errors cluster by sequence)


def load_val_batches(data_path, val_tokens: int, batch_size: int, pad_token_id: int,
                     vocab_size: int | None = None, max_position: int | None = None,
                     run_dir=None, device=None, masking: str = "fixed", data_seed: int = 0
                     ) -> tuple[list[ValBatch], dict]:
    """The first validation sequences with at least `val_tokens` tokens in all (or the whole split), batched.
    With `run_dir`, the data must have been tokenized with that run's tokenizer.

    masking: `fixed` scores the split's own fixed 15 % masking (one pass: what the search uses); `full` masks every
    token exactly once over `FULL_ROUNDS` disjoint rounds seeded by `data_seed` (`data.masking.full_split_rounds`):
    about 7x the tokens and the time, and about 2.6x smaller standard errors (sqrt 7)."""
    from ..rundir import RunDir
    from . import PreparedData
    from .masking import PadCollator, model_mask

    if val_tokens < 1:
        raise UserError(f"--val-tokens must be at least 1, got {val_tokens}")
    if batch_size < 1:
        raise UserError(f"batch size must be at least 1, got {batch_size}")
    path = Path(data_path)
    if not path.is_dir():
        raise UserError(f"prepared data directory not found: {path} (pass --data, or prepare it again)")
    data = PreparedData.load(path)
    if vocab_size is not None and data.vocab_size != vocab_size:
        raise UserError(f"{path} has a {data.vocab_size}-token vocabulary but the supernet has {vocab_size}")
    if run_dir is not None:
        RunDir(run_dir, "supernet").check_data_tokenizer(path)
    ds = data.val_dataset()
    rows, tokens = [], 0
    chunk = 256
    for start in range(0, len(ds), chunk):
        part = ds[start:start + chunk]
        for ids, types, labels in zip(part["input_ids"], part["token_type_ids"], part["labels"]):
            rows.append({"input_ids": ids, "token_type_ids": types, "labels": labels})
            tokens += len(ids)
            if tokens >= val_tokens:
                break
        if tokens >= val_tokens:
            break
    if not rows:
        raise UserError(f"{path} has an empty validation split")
    if max_position is not None and max(len(r["input_ids"]) for r in rows) > max_position:
        raise UserError(f"{path} has sequences longer than the supernet's position table ({max_position})")
    if masking not in MASKINGS:
        raise UserError(f"unknown validation masking {masking!r}; use {' or '.join(MASKINGS)}")
    sequences = len(rows)
    if masking == "full":
        from .masking import full_split_rounds

        rows = [r for part in full_split_rounds(rows, data.tokenizer(), seed=data_seed) for r in part]
    else:
        rows = [{**r, "seq": i} for i, r in enumerate(rows)]
    collate = PadCollator(pad_token_id)
    batches = []
    for b in range(0, len(rows), batch_size):
        seq = torch.tensor([r.pop("seq") for r in rows[b:b + batch_size]])
        batch = collate(rows[b:b + batch_size])  # with the host counts: no device sync here or when scoring
        mask, positions = model_mask(batch), batch["mlm_positions"]
        ids, types, target = batch["input_ids"], batch["token_type_ids"], batch["labels"].reshape(-1)[positions]
        if device is not None:
            ids, types, positions, target = (t.to(device) for t in (ids, types, positions, target))
            mask = mask.to(device) if mask is not None else None
        batches.append(ValBatch(ids, types, mask.bool() if mask is not None else None, positions, target,
                                batch["real_tokens"], seq))
    stats = {"data": str(data.path), "sequences": sequences,
             "tokens": tokens, "masking": masking,
             "masked_tokens": sum(len(b.positions) for b in batches), "batches": len(batches),
             "requested_tokens": val_tokens, "whole_split": tokens < val_tokens}
    return batches, stats


def batches_accuracy(head, hidden, batches: list[ValBatch]) -> float:
    """MLM accuracy of the hidden states of validation batches (`modeling.mlm_accuracy`); the vocabulary
    projection runs only at masked positions. The scorer and the nnictl trial score through it."""
    return mlm_accuracy((head(masked_rows(h, b.positions)), b.target) for h, b in zip(hidden, batches))


def batches_metrics(head, hidden, batches: list[ValBatch]) -> dict:
    """MLM accuracy (`modeling.mlm_correct`) and loss (cross-entropy, nats) over validation batches, each with its
    standard error. Masked tokens of one sequence are not independent, so the errors are cluster-robust by
    validation sequence (the ratio-estimator variance (S/(S-1)) sum_i (y_i - m n_i)^2 / N^2 over the S sequences,
    y_i the sequence's correct count or loss sum, n_i its masked tokens, N = sum n_i)."""
    import torch.nn.functional as F

    from ..modeling import mlm_correct

    if any(b.seq is None for b in batches):
        raise ValueError("standard errors need the batches' sequence ids (load_val_batches sets them)")
    size = max(int(b.seq.max()) for b in batches) + 1
    sums = {name: torch.zeros(size, dtype=torch.float64, device=batches[0].target.device)
            for name in ("n", "correct", "loss")}
    for h, b in zip(hidden, batches):
        logits = head(masked_rows(h, b.positions)).float()
        rows = b.seq.to(b.positions.device)[b.positions // h.shape[1]]
        sums["n"].index_add_(0, rows, torch.ones_like(b.target, dtype=torch.float64))
        sums["correct"].index_add_(0, rows, mlm_correct(logits, b.target).double())
        sums["loss"].index_add_(0, rows, F.cross_entropy(logits, b.target, reduction="none").double())
    n = sums["n"].cpu()
    out = {"masked_tokens": int(n.sum()), "sequences": int((n > 0).sum())}
    for name, key in (("correct", "mlm_acc"), ("loss", "mlm_loss")):
        out[key], out[f"{key}_se"] = ratio_and_se(sums[name].cpu(), n)
    return out


def ratio_and_se(y, n) -> tuple[float, float]:
    """sum y / sum n and its standard error, cluster-robust: y and n summed per cluster (a validation sequence;
    clusters with n = 0 left out), the ratio-estimator variance (S/(S-1)) sum_i (y_i - m n_i)^2 / N^2 over the S
    clusters, N = sum n_i. numpy arrays or torch tensors (`batches_metrics`, the IOT study's per-row sums)."""
    keep = n > 0
    y, n = y[keep], n[keep]
    s, total = len(n), float(n.sum())
    mean = float(y.sum()) / total
    var = s / max(s - 1, 1) * float(((y - mean * n) ** 2).sum()) / total ** 2
    return mean, var ** 0.5


def model_metrics(model, batches) -> dict:
    """`batches_metrics` of one built model (a stand-alone model, a frozen subnet)."""
    with torch.inference_mode():
        hidden = [model.encode(b.input_ids, b.mask, b.token_type_ids) for b in batches]
        return batches_metrics(model.head, hidden, batches)


def model_accuracy(model, batches) -> float:
    """MLM accuracy of one built model (a frozen subnet, a stand-alone model) over pre-built validation batches: each
    batch through `model.encode`, then `batches_accuracy` (vocabulary projection only at masked positions). The nnictl
    trial and the studies score one architecture with it; `SupernetScorer` scores many on the supernet itself."""
    with torch.inference_mode():
        hidden = (model.encode(b.input_ids, b.mask, b.token_type_ids) for b in batches)
        return batches_accuracy(model.head, hidden, batches)
