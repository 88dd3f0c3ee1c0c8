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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import layout
from ..atomic import atomic_path, write_json
from ..cost import core_minutes, scoring_minutes
from ..errors import UserError
from ..iot.method import IOTMethod
from ..options import flat_group, opt
from ..rundir import OPTIONS, RunDir
from ..safeio import read_json
from ..standalone.scoring import Validation, mlm_model
from ..standalone.store import preset_size, standalone_spec, train_all
from .common import Budget, StandaloneStudyOptions, log, shown_path, shown_stats
from .driver import Plan, Study, Unit, need_supernet
from .iot_report import report
from .iot_stats import clustered, goal_test, over_seeds, seed_rows

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
    units: str | None = opt(None, "where each seed's finished unit is kept (seed<k>.json: costs and settings; "
                                  "seed<k>.npz: token-level scores) and resumed from (default OUT/units; a "
                                  "directory in a repository lets a study outlive its run directory)",
                            metavar="DIR", group="")


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
    from ..iot.train import IOTOptions, train_iot  # torch: lvbert's start-up imports this module

    flags = RunDir(path, "IOT").continuation(marker=OPTIONS)
    if flags is None:
        return
    common = {"out": str(path), "progress": opts.progress, "accelerator": _accelerator(), "model_summary": False}
    if flags["resume"]:
        train_iot(IOTOptions.flat(**common, resume=True, given=list(common)))
        return
    b = budget
    train_iot(IOTOptions.flat(**common, supernet=opts.supernet, orders=opts.orders, orders_from=opts.orders_from,
                         block=opts.block, m=m, seed=seed, lr=b.lr, warmup_steps=b.warmup_steps, max_steps=b.steps,
                         batch_size=b.batch_size, val_every=b.steps, val_batches=4,
                         ckpt_every=max(1, min(250, b.steps // 4)), overwrite=flags["overwrite"],
                         data_seed=opts.data_seed, method=opts.method))


# --- units: one per seed (IOT run, its stand-alone baselines, the token-level scores), resumable from the files -----
def _unit_paths(units: Path, seed: int) -> tuple[Path, Path]:
    return units / f"seed{seed}.json", units / f"seed{seed}.npz"


def _unit_identity(opts: IOTStudyOptions, archs, budget, alone, validation) -> dict:
    """What a unit's scores are a function of (beside its seed): a stored unit that differs is refused."""
    return {"orders": list(archs), "budget": budget.__dict__, "standalone_budget": alone.__dict__,
            "settings": opts.method.settings(), "masked_tokens": validation.identity["masked_tokens"],
            "sequences": validation.identity["sequences"]}


def _load_unit(record_file: Path, identity: dict) -> tuple[dict, dict]:
    """A finished unit's record and arrays; refused when made with other settings."""
    record = read_json(record_file, "IOT study unit")
    made = record.get("identity")
    if made != identity:
        differs = sorted(k for k in identity if (made or {}).get(k) != identity[k])
        raise UserError(f"{record_file} was scored with other settings ({', '.join(differs) or 'unknown'}); give "
                        "another --units directory or remove it")
    with np.load(record_file.with_suffix(".npz")) as z:
        return record, {k: z[k] for k in z.files}


def _save_unit(record_file: Path, unit: tuple[dict, dict]) -> None:
    """seed<k>.npz, then seed<k>.json (written last: its presence marks the unit finished)."""
    with atomic_path(record_file.with_suffix(".npz"), suffix=".npz") as tmp:
        np.savez_compressed(tmp, **unit[1])
    write_json(record_file, unit[0])


def _unit(plan: IOTPlan, out: Path, seed: int) -> tuple[dict, dict]:
    """One seed: IOT, its M stand-alone baselines and the token-level scores (`iot.scoring`) with the costs."""
    from ..iot.rundir import load_iot  # torch
    from ..iot.scoring import iot_tokens, model_tokens

    opts, budget, validation, archs = plan.opts, plan.budget, plan.validation, plan.archs
    iot_dir = out / "iot" / f"seed{seed}"
    log(f"[seed {seed}] IOT over {', '.join(archs)}: {budget.steps} steps of batch {budget.batch_size}")
    _train_iot(opts, iot_dir, seed, budget, plan.m)
    paths = dict(zip(archs, train_all(plan.specs[seed], opts.store(), opts.progress)))
    log(f"[seed {seed}] scoring IOT's routed model, its {len(archs)} orders and the stand-alone models on "
        f"{len(validation.batches)} validation batches")
    started = time.perf_counter()
    arrays = iot_tokens(load_iot(iot_dir), validation.batches)
    arrays["standalone"] = np.stack([model_tokens(mlm_model(paths[a]), validation.batches) for a in archs], -1)
    record = {"seed": seed, "identity": plan.identity,
              "core_minutes": {"iot": core_minutes(RunDir(iot_dir, "IOT").meta),
                               "standalone": {a: core_minutes(RunDir(p, "pretrain").meta) for a, p in paths.items()}},
              "scoring_core_minutes": scoring_minutes(time.perf_counter() - started)}
    return record, arrays


@dataclass
class IOTPlan(Plan):
    """The study's inputs (`plan_iot`): M as given, budget, the supernet and its data, the stand-alone budget, the
    supernet's sequences, the orders' letters, every seed's stand-alone specs; without --nnictl the validation
    tokens and what a unit's scores are a function of."""

    m: int | None
    budget: Budget
    sn: Any
    data: str
    alone: Budget
    before: int | None
    archs: list[str]
    specs: dict
    validation: Validation | None = None
    identity: dict | None = None

    def standalone(self) -> list:
        return [s for seed_specs in self.specs.values() for s in seed_specs]


def plan_iot(opts: IOTStudyOptions) -> IOTPlan:
    """The study's inputs, checked, nothing written (`drive` and the --nnictl experiment share it, so both train the
    same model keys)."""
    from ..iot.orders import resolve_orders
    from ..supernet.rundir import load_supernet

    k, m = _defaults(opts)
    need_supernet(opts, "IOT starts from it", k)
    budget = opts.budget()
    sn = load_supernet(opts.supernet)  # torch: once the options are checked
    orders, _ = resolve_orders(sn.spec, opts.orders, opts.orders_from, opts.block, m)
    opts.method.check(len(orders))
    data = (sn.meta.get("data") or {}).get("path")
    if not data:
        raise UserError(f"{opts.supernet}/meta.json records no prepared data directory")
    alone, before = standalone_budget(budget, opts.equal_tokens, opts.supernet, sn.meta)
    common = {"size": preset_size(sn), "cfg": sn.cfg.to_dict(), "budget": alone, "data": data,
              "data_seed": opts.data_seed}
    archs = [o.compact for o in orders]
    specs = {seed: [(f"stand-alone MLM training of {a} (seed {seed})", standalone_spec(a, seed, **common))
                    for a in archs] for seed in range(opts.seed, opts.seed + k)}
    plan = IOTPlan(opts, m, budget, sn, data, alone, before, archs, specs)
    if not opts.nnictl:
        plan.validation = Validation.load(data, sn.cfg, opts.validation_tokens(), "full", opts.data_seed)
        plan.identity = _unit_identity(opts, archs, budget, alone, plan.validation)
    return plan


def units(plan: IOTPlan, out: Path) -> list[Unit]:
    """One per seed (--units DIR, default OUT/units): seed<k>.json (costs, settings) and seed<k>.npz (token-level
    scores). A finished unit trains nothing."""
    folder = Path(plan.opts.units) if plan.opts.units else out / "units"

    def unit(seed: int) -> Unit:
        file = _unit_paths(folder, seed)[0]
        return Unit(file, lambda: _unit(plan, out, seed), lambda f: _load_unit(f, plan.identity), _save_unit,
                    lock=out / f".unit-seed{seed}.lock", skipped=f"[seed {seed}] unit finished: {file}")

    return [unit(seed) for seed in plan.specs]


def summarize_study(plan: IOTPlan, out: Path, done: list) -> dict:
    opts, sn, budget, alone = plan.opts, plan.sn, plan.budget, plan.alone
    result = summarize([r for r, _ in done], [a for _, a in done], plan.archs)
    result.update(study="iot", supernet=shown_path(opts.supernet), data=shown_path(plan.data), seeds=list(plan.specs),
                  budget=budget.__dict__, m=len(plan.archs), settings=opts.method.settings(),
                  auxiliary_losses={"L_D": opts.method.c1 > 0, "L_S": opts.method.c2 > 0},
                  validation=shown_stats(plan.validation.identity),
                  supernet_core_minutes=core_minutes(sn.meta) if "train_seconds" in sn.meta else None,
                  standalone_budget=alone.__dict__, equal_tokens=opts.equal_tokens,
                  sequences={"supernet": plan.before, "iot": budget.steps * budget.batch_size,
                             "standalone": alone.steps * alone.batch_size})
    return result


def answer(result: dict, file: Path) -> dict:
    return {"seeds": result["seeds"], "orders": result["orders"], "result": str(file), "goal": result["goal"]}


STUDY = Study("iot", RESULT, plan_iot, units, summarize_study, report, answer)



def summarize(records: list[dict], arrays: list[dict], archs: list[str]) -> dict:
    """Per seed and over seeds (`iot_stats`): every quantity, the baseline (the order best stand-alone on the mean
    over seeds) and the goal's test (routed minus the baseline more than 2 standard errors above 0, the standard
    error combining the seeds' spread and the validation sampling error)."""
    rows = [seed_rows(a, archs) for a in arrays]
    n, seq = rows[0]["n"], rows[0]["seq"]
    if any(not (np.array_equal(r["n"], n) and np.array_equal(r["seq"], seq)) for r in rows):
        raise UserError("the seeds' units were scored on different validation rows; score them again")
    per_seed = [_seed_stats(r, rec, archs) for r, rec in zip(rows, records)]

    def over(get) -> dict:
        return over_seeds([get(r["y"]) for r in rows], n, seq)

    base = max(archs, key=lambda a: np.mean([s["standalone"][a]["mean"] for s in per_seed]))
    goal = goal_test(base, over(lambda y: y["routed"] - y[f"standalone:{base}"]))
    costs = [rec["core_minutes"] for rec in records]
    return {
        "orders": archs,
        "per_seed": per_seed,
        "mean": {**{name: over(lambda y, name=name: y[name]) for name in LEVELS},
                 **{name: over(lambda y, a=a, b=b: y[a] - y[b]) for name, (a, b) in DIFFERENCES.items()},
                 "orders_shared": {a: over(lambda y, a=a: y[f"order:{a}"]) for a in archs},
                 "standalone": {a: over(lambda y, a=a: y[f"standalone:{a}"]) for a in archs},
                 "agreement": float(np.mean([s["agreement"] for s in per_seed])),
                 "agreement_by_chance": float(np.mean([s["agreement_by_chance"] for s in per_seed])),
                 "usage": np.mean([s["usage"] for s in per_seed], 0).tolist(),
                 "iot_core_minutes": float(np.mean([c["iot"] for c in costs])),
                 "baseline_core_minutes": float(np.mean([c["standalone"][base] for c in costs])),
                 "all_standalone_core_minutes": float(np.mean([sum(c["standalone"].values()) for c in costs]))},
        "goal": goal,
    }


LEVELS = ("routed", "oracle", "oracle_crossfit", "random_at_usage", "best_shared", "best_shared_heldout")
DIFFERENCES = {"routed_minus_best_shared": ("routed", "best_shared"),
               "routed_minus_best_shared_heldout": ("routed", "best_shared_heldout"),
               "routed_minus_random_at_usage": ("routed", "random_at_usage"),
               "oracle_crossfit_minus_routed": ("oracle_crossfit", "routed"),
               "oracle_minus_routed": ("oracle", "routed")}


def _seed_stats(r: dict, record: dict, archs: list[str]) -> dict:
    """One seed's statistics (each clustered by validation sequence) from its `seed_rows`."""
    y, n, seq = r["y"], r["n"], r["seq"]

    def cl(v) -> dict:
        return clustered(v, n, seq)

    return {
        "seed": record["seed"],
        **{name: cl(y[name]) for name in LEVELS if name not in ("best_shared", "best_shared_heldout")},
        **{name: cl(y[a] - y[b]) for name, (a, b) in DIFFERENCES.items()},
        "routed_loss": clustered(r["routed_loss"], n, seq)["mean"],
        "orders": [{"arch": a, **cl(y[f"order:{a}"]), "usage": float(u), "oracle_share": float(o)}
                   for a, u, o in zip(archs, r["usage"], r["oracle_share"])],
        "best_shared": {"arch": archs[r["best"]], **cl(y["best_shared"])},
        "best_shared_heldout": {"arch": [archs[k] for k in r["heldout_chosen"]], **cl(y["best_shared_heldout"])},
        "agreement": r["agreement"], "agreement_by_chance": r["agreement_by_chance"],
        "usage": r["usage"].tolist(), "masked_tokens": int(n.sum()), "rows": len(n),
        "standalone": {a: {**cl(y[f"standalone:{a}"]), "routed_minus_this": cl(y["routed"] - y[f"standalone:{a}"])}
                       for a in archs},
        "core_minutes": record["core_minutes"], "scoring_core_minutes": record["scoring_core_minutes"],
    }
