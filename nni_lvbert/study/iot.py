"""`lvbert study iot`: does instance-wise ordering (IOT) beat the best single order trained alone?

For each seed (--seed .. --seed+N-1), on the reference supernet's data and shape:

1. IOT (`lvbert iot train`) from the supernet `--supernet` over M orders (`--orders-from`, `--block` or `--orders`),
   for the study's budget (steps, batch, lr, warm-up): OUT/iot/seed<k>/, resumable on its own;
2. the paper's baseline: each of the M orders pre-trained stand-alone from scratch with the same seed, batch and
   schedule, on as many training sequences as the IOT model has seen (`--equal-tokens total`: the supernet's plus
   IOT's; `iot`: IOT's steps alone), in the model store (shared, resumable);
3. everything scored on the same validation tokens with every token masked once (full-split masking), each
   accuracy with its standard error clustered by validation sequence: with the IOT-trained shared weights the
   routed model (argmax of the predictor), each order alone and the per-instance oracle; the predictor's
   agreement with the oracle's choice and the usage of each order; each stand-alone model; the routed model's
   paired differences against the best shared order and each stand-alone model (scores/seed<k>.json);
4. the baseline is the order whose stand-alone models score best on the mean over seeds (chosen on the validation
   tokens themselves: in the baseline's favour). The goal's test: routed minus that baseline, mean over seeds,
   more than 2 standard errors above 0 (over seeds with 2 or more, else the paired token-level error).

iot.json / iot.md / iot.png (`iot_report.py`) in OUT. Costs in core-minutes (`cost.core_minutes`): IOT's training
(M forwards a step) beside the stand-alone ones; the reference supernet's own training is reported apart (IOT
continues from it). With `--nnictl DIR` every seed's stand-alone baselines (2.) are written as an nnictl experiment
instead, and nothing else is done (`nnictl.py`); the study run again without it trains IOT here and scores.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import layout
from ..atomic import write_json
from ..errors import UserError
from ..iot.method import IOTMethod
from ..options import flat_group, opt
from ..rundir import OPTIONS, RunDir
from ..safeio import read_json
from .common import StandaloneStudyOptions, begin_on_supernet, log, shown_path, shown_stats, start
from .iot_report import report

RESULT = "iot.json"
ORDERS_GROUP = "candidate orders (one source)"


@dataclass(frozen=True)
class IOTStudyOptions(StandaloneStudyOptions):
    out: str = f"{layout.STUDY}/iot"
    supernet: str = opt("", "the reference supernet run directory: IOT starts from it; its space, shape and data "
                            "define the study", metavar="RUN", group="")
    num_seeds: int | None = opt(None, "seeds --seed .. --seed+N-1, each an IOT run and M stand-alone models "
                                      "(default 3; quick 1)", group="")
    orders_from: str | None = opt(None, "top-M distinct architectures of a search's history.jsonl",
                                  metavar="SEARCH_DIR", group=ORDERS_GROUP)
    orders: list[str] | None = opt(None, "explicit orders (compact strings, names or JSON files)", metavar="ARCH",
                                   group=ORDERS_GROUP)
    block: str | None = opt(None, "M distinct permutations of a block (e.g. sa,ff,dc) repeated over the slots",
                            metavar="TYPES", group=ORDERS_GROUP)
    m: int | None = opt(None, "number of orders M (default 4; quick 2)", group=ORDERS_GROUP)
    method: IOTMethod = flat_group(IOTMethod)
    equal_tokens: str = opt("total", "the stand-alone baseline's training sequences: total (default): the supernet's "
                                     "plus IOT's, as many as the IOT model has seen; iot: IOT's steps x batch only "
                                     "(IOT also inherits the supernet's training)", choices=["total", "iot"],
                            group="")


def _defaults(opts: IOTStudyOptions) -> tuple[int, int | None]:
    k = opts.num_seeds if opts.num_seeds is not None else (1 if opts.quick else 3)
    m = opts.m if opts.m is not None else (2 if opts.quick and not opts.orders else None)
    return k, m


def supernet_sequences(supernet: str, meta: dict) -> int | None:
    """How many training sequences the supernet saw (its steps x batch), None where its run does not say."""
    batch = (RunDir(supernet, "supernet").stored_options() or {}).get("batch_size")
    steps = meta.get("steps")
    return None if not batch or steps is None else int(steps) * int(batch)


def standalone_budget(budget, equal_tokens: str, supernet: str, meta: dict):
    """The stand-alone baseline's budget: IOT's (`iot`), or as many sequences as the supernet's training plus
    IOT's at IOT's batch (`total`; the same lr and warm-up); with the supernet's sequences (None: unknown)."""
    if equal_tokens not in ("total", "iot"):
        raise UserError(f"--equal-tokens must be total or iot, got {equal_tokens!r}")
    before = supernet_sequences(supernet, meta)
    if equal_tokens == "iot":
        return budget, before
    if before is None:
        raise UserError(f"cannot tell how many sequences the supernet {supernet} was trained on (no batch_size in "
                        "its options.json or no steps in its meta.json); pass --equal-tokens iot")
    return dataclasses.replace(budget, steps=budget.steps + -(-before // budget.batch_size)), before


def _accelerator() -> str:
    import torch

    return "auto" if torch.cuda.is_available() else "cpu"


def _train_iot(opts: IOTStudyOptions, path: Path, seed: int, budget, m: int | None) -> None:
    """One seed's IOT run (skipped when finished, resumed when interrupted)."""
    from ..iot.train import IOTOptions, train_iot

    flags = RunDir(path, "IOT").continuation(marker=OPTIONS)
    if flags is None:
        return
    common = dict(out=str(path), progress=opts.progress, accelerator=_accelerator(), model_summary=False)
    if flags["resume"]:
        train_iot(IOTOptions.flat(**common, resume=True, given=list(common)))
        return
    b = budget
    train_iot(IOTOptions.flat(**common, supernet=opts.supernet, orders=opts.orders, orders_from=opts.orders_from,
                         block=opts.block, m=m, seed=seed, lr=b.lr, warmup_steps=b.warmup_steps, max_steps=b.steps,
                         batch_size=b.batch_size, val_every=b.steps, val_batches=4,
                         ckpt_every=max(1, min(250, b.steps // 4)), overwrite=flags["overwrite"],
                         data_seed=opts.data_seed, method=opts.method))


# --- scoring: per validation row (one masking round of one sequence), then clustered by sequence ------------------
def _row_sums(head, hidden, batch):
    """(correct, loss sum, masked count) per row of one validation batch."""
    import torch
    import torch.nn.functional as F

    from ..modeling import masked_rows, mlm_correct

    logits = head(masked_rows(hidden, batch.positions)).float()
    rows = batch.positions // hidden.shape[1]
    b = hidden.shape[0]
    zeros = torch.zeros(b, dtype=torch.float64)
    return (zeros.index_add(0, rows, mlm_correct(logits, batch.target).double()),
            zeros.index_add(0, rows, F.cross_entropy(logits, batch.target, reduction="none").double()),
            zeros.index_add(0, rows, torch.ones_like(batch.target, dtype=torch.float64)))


def iot_rows(model, batches) -> dict:
    """Per row: every order's right tokens and loss (R, M), the masked count, the sequence, the predictor's choice."""
    import torch

    from ..iot.routing import route_logits

    out = {"correct": [], "loss": [], "n": [], "seq": [], "choice": []}
    with torch.inference_mode():
        for b in batches:
            per = [_row_sums(model.space.head, model.forward_order(k, b.input_ids, b.mask, b.token_type_ids)[0], b)
                   for k in range(model.num_orders)]
            out["correct"].append(torch.stack([p[0] for p in per], -1))
            out["loss"].append(torch.stack([p[1] for p in per], -1))
            out["n"].append(per[0][2])
            out["seq"].append(b.seq)
            out["choice"].append(route_logits(model.space, model.predictor, b.input_ids, b.mask).argmax(-1))
    return {k: torch.cat(v).numpy() for k, v in out.items()}


def model_rows(model, batches) -> dict:
    """Per row: a stand-alone model's right tokens and loss."""
    import torch

    with torch.inference_mode():
        sums = [_row_sums(model.head, model.encode(b.input_ids, b.mask, b.token_type_ids), b) for b in batches]
    return {"correct": torch.cat([s[0] for s in sums]).numpy(), "loss": torch.cat([s[1] for s in sums]).numpy()}


def clustered(y, n, seq) -> dict:
    """Ratio mean sum y / sum n of per-row sums with its standard error clustered by sequence
    (`search.validation.ratio_and_se`, as `batches_metrics`)."""
    from ..search.validation import ratio_and_se

    size = int(seq.max()) + 1
    mean, se = ratio_and_se(np.bincount(seq, y, size), np.bincount(seq, n, size))
    return {"mean": mean, "se": se}


def score_seed(rows: dict, alone: dict[str, dict], archs: list[str]) -> dict:
    """One seed's statistics from `iot_rows` and each order's stand-alone `model_rows`."""
    correct, loss, n, seq, choice = rows["correct"], rows["loss"], rows["n"], rows["seq"], rows["choice"]
    m, r = correct.shape[1], np.arange(len(n))
    oracle = (correct * 1e6 - loss).argmax(-1)  # the most right tokens (ties: lower loss), as validation_counts
    routed_c, oracle_c = correct[r, choice], correct[r, oracle]
    shared = [clustered(correct[:, k], n, seq) for k in range(m)]
    best = max(range(m), key=lambda k: shared[k]["mean"])
    has = n > 0
    usage = np.bincount(choice, minlength=m) / len(choice)
    oracle_share = np.bincount(oracle[has], minlength=m) / has.sum()
    return {
        "routed": clustered(routed_c, n, seq),
        "routed_loss": clustered(loss[r, choice], n, seq)["mean"],
        "orders": [{"arch": a, **s, "usage": float(u), "oracle_share": float(o)}
                   for a, s, u, o in zip(archs, shared, usage, oracle_share)],
        "best_shared": {"arch": archs[best], **shared[best]},
        "routed_minus_best_shared": clustered(routed_c - correct[:, best], n, seq),
        "oracle": clustered(oracle_c, n, seq),
        "agreement": float((choice[has] == oracle[has]).mean()),
        "agreement_by_chance": float((usage * oracle_share).sum()),
        "usage": usage.tolist(),
        "masked_tokens": int(n.sum()), "rows": int(len(n)),
        "standalone": {a: {**clustered(alone[a]["correct"], n, seq),
                           "routed_minus_this": clustered(routed_c - alone[a]["correct"], n, seq)} for a in archs},
    }


def _score(out: Path, seed: int, iot_dir: Path, paths: dict[str, Path], validation) -> dict:
    """A seed's scores (scores/seed<k>.json: computed once)."""
    import time

    from ..cost import scoring_minutes
    from ..iot.rundir import load_iot
    from .store import mlm_model

    file = out / "scores" / f"seed{seed}.json"
    if file.is_file():
        return read_json(file)
    log(f"[seed {seed}] scoring IOT's routed model, its {len(paths)} orders and the stand-alone models on "
        f"{len(validation.batches)} validation batches")
    started = time.perf_counter()
    model = load_iot(iot_dir)
    archs = [o.compact for o in model.orders]
    rows = iot_rows(model, validation.batches)
    alone = {a: model_rows(mlm_model(paths[a]), validation.batches) for a in archs}
    res = {"seed": seed, **score_seed(rows, alone, archs),
           "scoring_core_minutes": scoring_minutes(time.perf_counter() - started)}
    write_json(file, res)
    return res


def plan_iot(opts: IOTStudyOptions):
    """The study's inputs, checked, nothing written: (options as resumed, M as given, budget, the supernet, its data,
    the stand-alone budget, the supernet's sequences, the orders' letters, every seed's stand-alone specs).
    `run_iot_study` and its --nnictl experiment (`nnictl.py`) share it, so both train the same model keys."""
    from ..iot.orders import resolve_orders

    opts = begin_on_supernet(opts, "IOT starts from it", _defaults(opts)[0])
    k, m = _defaults(opts)
    budget = opts.budget()
    from ..supernet.rundir import load_supernet  # torch: once the options are checked
    from .store import preset_size, standalone_spec

    sn = load_supernet(opts.supernet)
    orders, _ = resolve_orders(sn.spec, opts.orders, opts.orders_from, opts.block, m)
    opts.method.check(len(orders))
    data = (sn.meta.get("data") or {}).get("path")
    if not data:
        raise UserError(f"{opts.supernet}/meta.json records no prepared data directory")
    alone, before = standalone_budget(budget, opts.equal_tokens, opts.supernet, sn.meta)
    common = dict(size=preset_size(sn), cfg=sn.cfg.to_dict(), budget=alone, data=data, data_seed=opts.data_seed)
    archs = [o.compact for o in orders]
    specs = {seed: [(f"stand-alone MLM training of {a} (seed {seed})", standalone_spec(a, seed, **common))
                    for a in archs] for seed in range(opts.seed, opts.seed + k)}
    return opts, m, budget, sn, data, alone, before, archs, specs


def run_iot_study(opts: IOTStudyOptions) -> dict:
    from ..cost import core_minutes

    opts, m, budget, sn, data, alone, before, archs, specs = plan_iot(opts)
    if opts.nnictl:  # the stand-alone baselines as an nnictl experiment (nnictl.py): nothing else done here
        from .nnictl import write_study_experiment

        return write_study_experiment(opts, [s for seed_specs in specs.values() for s in seed_specs])
    from .store import Validation, train_all

    validation = Validation.load(data, sn.cfg, opts.validation_tokens(), "full", opts.data_seed)
    out = start(opts)
    seeds, k = list(specs), len(specs)
    per_seed, costs = [], []
    for i, seed in enumerate(seeds):
        iot_dir = out / "iot" / f"seed{seed}"
        log(f"[seed {i + 1}/{k}] IOT over {', '.join(archs)}: {budget.steps} steps of batch {budget.batch_size}")
        _train_iot(opts, iot_dir, seed, budget, m)
        paths = dict(zip(archs, train_all(specs[seed], opts.store(), opts.progress)))
        per_seed.append(_score(out, seed, iot_dir, paths, validation))
        costs.append({"iot": core_minutes(RunDir(iot_dir, "IOT").meta),
                      "standalone": {a: core_minutes(RunDir(p, "pretrain").meta) for a, p in paths.items()}})
    result = summarize(per_seed, costs, archs)
    result.update(study="iot", supernet=shown_path(opts.supernet), data=shown_path(data), seeds=seeds,
                  budget=budget.__dict__, m=len(archs), settings=opts.method.settings(),
                  auxiliary_losses={"L_D": opts.method.c1 > 0, "L_S": opts.method.c2 > 0},
                  validation=shown_stats(validation.identity),
                  supernet_core_minutes=core_minutes(sn.meta) if "train_seconds" in sn.meta else None,
                  standalone_budget=alone.__dict__, equal_tokens=opts.equal_tokens,
                  sequences={"supernet": before, "iot": budget.steps * budget.batch_size,
                             "standalone": alone.steps * alone.batch_size})
    report(result, out)
    write_json(out / RESULT, result)
    return {"seeds": seeds, "orders": archs, "result": str(out / RESULT), "goal": result["goal"]}


def summarize(per_seed: list[dict], costs: list[dict], archs: list[str]) -> dict:
    """Means over seeds, the baseline (the order best stand-alone on the mean over seeds) and the goal's test."""
    k = len(per_seed)

    def mean_se(values: list[float], ses: list[float]) -> dict:
        """Mean over seeds; its standard error from the seeds' spread (2+ seeds), else the token-level error."""
        v = np.array(values)
        spread = float(v.std(ddof=1) / np.sqrt(k)) if k > 1 else None
        tokens = float(np.sqrt(np.sum(np.square(ses))) / k)
        return {"mean": float(v.mean()), "se": spread if spread is not None else tokens, "se_seeds": spread,
                "se_tokens": tokens, "per_seed": v.tolist()}

    def over(get) -> dict:
        return mean_se([get(s)["mean"] for s in per_seed], [get(s)["se"] for s in per_seed])

    base = max(archs, key=lambda a: np.mean([s["standalone"][a]["mean"] for s in per_seed]))
    diff = over(lambda s: s["standalone"][base]["routed_minus_this"])
    goal = {"baseline": base, "routed_minus_standalone": diff, "z": diff["mean"] / diff["se"] if diff["se"] else None,
            "met": bool(diff["se"] and diff["mean"] > 2 * diff["se"])}
    return {
        "orders": archs,
        "per_seed": [{**s, "core_minutes": c} for s, c in zip(per_seed, costs)],
        "mean": {"routed": over(lambda s: s["routed"]), "oracle": over(lambda s: s["oracle"]),
                 "best_shared": over(lambda s: s["best_shared"]),
                 "routed_minus_best_shared": over(lambda s: s["routed_minus_best_shared"]),
                 "orders_shared": {a: over(lambda s, i=i: s["orders"][i]) for i, a in enumerate(archs)},
                 "standalone": {a: over(lambda s, a=a: s["standalone"][a]) for a in archs},
                 "agreement": float(np.mean([s["agreement"] for s in per_seed])),
                 "agreement_by_chance": float(np.mean([s["agreement_by_chance"] for s in per_seed])),
                 "usage": np.mean([s["usage"] for s in per_seed], 0).tolist(),
                 "iot_core_minutes": float(np.mean([c["iot"] for c in costs])),
                 "baseline_core_minutes": float(np.mean([c["standalone"][base] for c in costs])),
                 "all_standalone_core_minutes": float(np.mean([sum(c["standalone"].values()) for c in costs]))},
        "goal": goal,
    }
