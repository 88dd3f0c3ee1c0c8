"""The IOT study's statistics, from the token-level arrays of `iot.scoring` (numpy only).

Every quantity is a per-row count of right predictions (a row: one validation sequence under one masking round),
so each is a ratio sum y / sum n with a standard error clustered by validation sequence (`clustered`), and a
difference of two quantities is the same on the difference of their rows (paired).

- **oracle** (in-sample): each row's best order chosen on the very tokens it is scored on. With ~8 masked tokens a
  row it picks up noise as well as signal: an upper bound on what routing can gain, not the headroom.
- **cross-fitted oracle**: each row's masked tokens split in two halves (alternately, in position order); the order
  chosen on one half is scored on the other, both ways. Noise in the choice no longer scores for it.
- **random routing at the predictor's usage**: each row routed to order k with the probability the predictor
  uses k (its expectation, no draw). Routed minus this tests whether the predictor's choices carry information.
- **best shared order, held out**: the validation sequences split by parity; the best order on one half is scored
  on the other, both ways (the in-sample "best shared" is the best of M on the same tokens).
- **over seeds** (`over_seeds`): the mean of the seeds' ratios; its standard error from the seeds' spread, and the
  validation sampling error beside it (the clustered error of the seeds' per-row mean: every seed is scored on the
  same validation sequences, so the seeds' spread does not contain it); `se` combines both.
"""
from __future__ import annotations

import numpy as np


def clustered(y, n, seq) -> dict:
    """sum y / sum n over rows with its standard error clustered by `seq` (`data.validation.ratio_and_se`)."""
    from ..data.validation import ratio_and_se

    size = int(np.max(seq)) + 1
    mean, se = ratio_and_se(np.bincount(seq, y, size), np.bincount(seq, n, size))
    return {"mean": mean, "se": se}


def per_row(values: np.ndarray, row: np.ndarray, rows: int) -> np.ndarray:
    """Token values (T,) or (T, M) summed per row: (rows,) or (rows, M), float64."""
    values = np.asarray(values, np.float64)
    if values.ndim == 1:
        return np.bincount(row, values, rows)
    return np.stack([np.bincount(row, values[:, k], rows) for k in range(values.shape[1])], -1)


def halves(row: np.ndarray) -> np.ndarray:
    """0/1 per token: its rank among its row's tokens (in array order) modulo 2."""
    order = np.argsort(row, kind="stable")
    sorted_rows = row[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_rows)) + 1]
    first = np.repeat(starts, np.diff(np.r_[starts, len(row)]))
    rank = np.empty(len(row), np.int64)
    rank[order] = np.arange(len(row)) - first
    return (rank % 2).astype(np.int8)


def best_order(correct: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """Per row the order with the most right tokens, ties to the lower loss sum (then the first)."""
    return np.lexsort((np.arange(correct.shape[1])[None].repeat(len(correct), 0), loss, -correct), axis=1)[:, 0]


def oracle_rows(correct_tok, loss_tok, row, rows: int) -> np.ndarray:
    """Right tokens per row of the in-sample oracle."""
    c, l_ = per_row(correct_tok, row, rows), per_row(loss_tok, row, rows)
    return c[np.arange(rows), best_order(c, l_)]


def crossfit_oracle_rows(correct_tok, loss_tok, row, rows: int) -> np.ndarray:
    """Right tokens per row of the cross-fitted oracle: the order chosen on one half of the row's tokens scores the
    other half, both ways."""
    half = halves(row)
    out = np.zeros(rows)
    for h in (0, 1):
        pick, score = half == h, half != h
        c, l_ = per_row(correct_tok[pick], row[pick], rows), per_row(loss_tok[pick], row[pick], rows)
        choice = best_order(c, l_)
        out += per_row(correct_tok[score], row[score], rows)[np.arange(rows), choice]
    return out


def heldout_best_rows(correct_rows: np.ndarray, n: np.ndarray, seq: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Right tokens per row of the best shared order chosen on the other half of the validation sequences (split by
    parity), and the order chosen on each half (even, odd)."""
    fold = seq % 2
    out = np.zeros(len(n))
    chosen = []
    for f in (0, 1):
        on = fold == f
        k = int(np.argmax(correct_rows[on].sum(0) / max(n[on].sum(), 1)))
        chosen.append(k)
        out[~on] = correct_rows[~on, k]
    return out, chosen


def seed_rows(arrays: dict, archs: list[str]) -> dict:
    """Per-row right counts of every quantity of one seed (name -> (R,)), with `n` and `seq` and what was chosen."""
    row, correct, loss = arrays["row"], arrays["correct"], arrays["loss"].astype(np.float64)
    rows, m = len(arrays["seq"]), correct.shape[1]
    c = per_row(correct, row, rows)
    n = per_row(np.ones(len(row)), row, rows)
    choice = arrays["choice"].astype(np.int64)
    usage = np.bincount(choice, minlength=m) / rows
    r = np.arange(rows)
    routed = c[r, choice]
    best = int(np.argmax(c.sum(0)))
    heldout, chosen = heldout_best_rows(c, n, arrays["seq"])
    y = {"routed": routed, "oracle": oracle_rows(correct, loss, row, rows),
         "oracle_crossfit": crossfit_oracle_rows(correct, loss, row, rows),
         "random_at_usage": c @ usage, "best_shared": c[:, best], "best_shared_heldout": heldout,
         **{f"order:{a}": c[:, k] for k, a in enumerate(archs)}}
    alone = per_row(arrays["standalone"], row, rows)
    y.update({f"standalone:{a}": alone[:, k] for k, a in enumerate(archs)})
    loss_rows = per_row(loss, row, rows)
    has = n > 0
    oracle_pick = best_order(c, loss_rows)
    return {"y": y, "n": n, "seq": arrays["seq"].astype(np.int64), "usage": usage, "best": best,
            "heldout_chosen": chosen, "routed_loss": loss_rows[r, choice],
            "agreement": float((choice[has] == oracle_pick[has]).mean()),
            "agreement_by_chance": float((usage * np.bincount(oracle_pick[has], minlength=m) / has.sum()).sum()),
            "oracle_share": np.bincount(oracle_pick[has], minlength=m) / has.sum()}


def over_seeds(ys: list[np.ndarray], n: np.ndarray, seq: np.ndarray) -> dict:
    """Mean over seeds of per-row quantities scored on the same rows: mean, `se_seeds` (the seeds' spread, 2+
    seeds), `se_validation` (clustered error of the seeds' per-row mean) and `se` (both combined; the validation
    error alone with one seed)."""
    per_seed = [clustered(y, n, seq)["mean"] for y in ys]
    spread = seed_spread(per_seed)
    validation = clustered(np.mean(ys, 0), n, seq)["se"]
    se = float(np.hypot(spread, validation)) if spread is not None else validation
    return {"mean": float(np.mean(per_seed)), "se": se, "se_seeds": spread, "se_validation": validation,
            "per_seed": per_seed}


def seed_spread(values) -> float | None:
    """The standard error of a mean over seeds from the seeds' spread (sd / sqrt(k)); None below 2 seeds."""
    k = len(values)
    return float(np.std(values, ddof=1) / np.sqrt(k)) if k > 1 else None


def goal_test(baseline: str, diff: dict) -> dict:
    """The IOT studies' goal: routed minus the baseline (`diff`: mean and se) more than 2 standard errors above 0."""
    return {"baseline": baseline, "routed_minus_standalone": diff,
            "z": diff["mean"] / diff["se"] if diff["se"] else None,
            "met": bool(diff["se"] and diff["mean"] > 2 * diff["se"])}
