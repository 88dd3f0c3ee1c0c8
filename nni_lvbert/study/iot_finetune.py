"""`lvbert study iot-finetune`: does instance-wise ordering help on a sequence-classification task?

Issue 44 item 3: IOT's gains in the paper were on sequence-level outputs. From trained IOT runs (`--iot-study DIR`:
each seed's run of `lvbert study iot`, seed s fine-tuned with seed s; or `--iot RUN`: one run, fine-tuned with
seeds --seed .. --seed+N-1), per seed:

1. IOT fine-tuning (`iot.finetune`): every order on every batch, per-instance cross-entropy mixed by the
   Gumbel-softmax of the clamped predictor probabilities, + c1 L_D + c2 L_S; `lvbert finetune`'s head ([CLS] ->
   dropout -> linear) and recipe; OUT/runs/seed<k>/iot.json (its dev predictions);
2. the paper's baseline: each order fine-tuned alone from the same IOT weights, same steps, batches and head
   initialisation (OUT/runs/seed<k>/order<j>.json);
3. on the dev split: the routed model (grouped argmax routing), each order alone with the IOT-fine-tuned shared
   weights, the per-instance oracle (right when any order is), the predictor's agreement with the oracle on the
   instances where some orders are right and some wrong, the usage of each order; each stand-alone order; the
   routed model's paired differences against each (scores/seed<k>.json).

The baseline is the order whose stand-alone fine-tunings score best on the mean over seeds (chosen on the dev set:
in its favour). The goal's test: routed minus that baseline, mean over seeds, more than 2 standard errors above 0
(the seeds' spread with 2 or more, else the paired per-instance error). iot-finetune.json / .md / .png in OUT; cost
in core-minutes. Resumable: finished runs and seeds are kept.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import layout
from ..atomic import write_text
from ..errors import UserError
from ..iot.method import IOTMethod
from ..options import flat_group, opt
from ..safeio import read_json
from .common import StudyOptions, log, shown_path
from .driver import Plan, Study, Unit, run_units
from .iot_report import bar_plot, pm, settings_text
from .iot_stats import goal_test, seed_spread
from .stats import markdown_table

RESULT = "iot-finetune.json"
SOURCE = "start (one of)"
FT = "fine-tuning (lvbert finetune's recipe)"
QUICK = {"max_steps": 8, "batch_size": 8, "max_train_examples": 64, "max_dev_examples": 64}


@dataclass(frozen=True)
class IOTFinetuneOptions(StudyOptions):
    TRAINS_MODELS = False
    out: str = f"{layout.STUDY}/iot-finetune"
    iot_study: str | None = opt(None, "an `lvbert study iot` directory: seed s's IOT run (OUT/iot/seed<s>) is "
                                      "fine-tuned with seed s", metavar="DIR", group=SOURCE, exclusive="source")
    iot: str | None = opt(None, "one IOT run directory (`lvbert iot train`), fine-tuned with each seed",
                          metavar="RUN", group=SOURCE, exclusive="source")
    task: str | None = opt(None, "a classification task: sotu-era (embedded), a GLUE task with --task-data (cola, sst-2, "
                        "mrpc, qqp, mnli, qnli, rte, wnli), or your name with --task-data FILE_OR_FOLDER and "
                        "--text-column/--label-column", group="")
    task_data: str | None = opt(None, "the GLUE folder, or a folder with train.*/dev.*, or a train file",
                                metavar="PATH", group="")
    text_column: str | None = opt(None, "your files: the (first) text column", group="")
    text_pair_column: str | None = opt(None, "your files: the second text column, if any", group="")
    label_column: str | None = opt(None, "your files: the label column", group="")
    num_seeds: int | None = opt(None, "seeds: with --iot-study its first N seeds (default all of its seeds; quick "
                                      "1); with --iot --seed .. --seed+N-1 (default 3; quick 1)", group="")
    seed: int = opt(0, "with --iot: the first fine-tuning seed", group="")
    epochs: float | None = opt(None, "fine-tuning epochs (default the task's: 3, 10 for RTE)", group=FT)
    max_steps: int | None = opt(None, f"cap on the steps of every fine-tuning (quick {QUICK['max_steps']})", group=FT)
    lr: float | None = opt(None, "peak lr (default 3e-4, as lvbert finetune)", group=FT)
    batch_size: int | None = opt(None, f"batch size (default 32; quick {QUICK['batch_size']})", group=FT)
    max_length: int | None = opt(None, "sequence length (default 128, at most the model's position table)",
                                 group=FT)
    warmup_fraction: float = opt(0.1, "share of the steps warming up linearly", group=FT)
    weight_decay: float = opt(0.01, "AdamW weight decay", group=FT)
    layer_decay: float = opt(0.8, "layer-wise lr decay per block of two slots (1 = off)", group=FT)
    classifier_dropout: float = opt(0.1, "dropout on the [CLS] state", group=FT)
    max_train_examples: int | None = opt(None, f"N training examples spread evenly over the split (quick "
                                               f"{QUICK['max_train_examples']})", group=FT)
    max_dev_examples: int | None = opt(None, "N dev examples spread evenly over the split (quick "
                                             f"{QUICK['max_dev_examples']})", group=FT)
    method: IOTMethod = flat_group(IOTMethod)

    @classmethod
    def not_offered(cls) -> tuple[str, ...]:
        return ("models", "warmup_steps", "dropout", "data_seed", "val_tokens")

    def quick_or(self, name: str):
        v = getattr(self, name)
        return QUICK[name] if v is None and self.quick else v


def sources(opts: IOTFinetuneOptions) -> list[tuple[int, Path]]:
    """(seed, IOT run directory) per seed, every run checked to be finished."""
    from ..iot.rundir import REQUIRED
    from ..rundir import RunDir

    if bool(opts.iot_study) == bool(opts.iot):
        raise UserError("give the IOT runs to fine-tune: --iot-study DIR (a `lvbert study iot` directory) or --iot RUN")
    if opts.num_seeds is not None and opts.num_seeds < 1:
        raise UserError(f"--num-seeds must be at least 1, got {opts.num_seeds}")
    if opts.iot:
        k = opts.num_seeds or (1 if opts.quick else 3)
        pairs = [(opts.seed + i, Path(opts.iot)) for i in range(k)]
    else:
        study = Path(opts.iot_study)
        stored = RunDir(study, "study").stored_options()
        if stored is None:
            raise UserError(f"{study} is not an `lvbert study iot` directory (no options.json)")
        done = study / "iot.json"
        if done.is_file():
            seeds = list(read_json(done)["seeds"])
        else:
            n = stored.get("num_seeds") or (1 if stored.get("quick") else 3)
            seeds = list(range(stored.get("seed", 0), stored.get("seed", 0) + n))
        k = opts.num_seeds or (1 if opts.quick else len(seeds))
        if k > len(seeds):
            raise UserError(f"--num-seeds {k}: the IOT study {study} has {len(seeds)} seeds")
        pairs = [(s, study / "iot" / f"seed{s}") for s in seeds[:k]]
    for seed, path in pairs:
        RunDir(path, "IOT").require(REQUIRED, f"IOT (seed {seed})")
    return pairs


def load(opts: IOTFinetuneOptions, run: Path):
    """(task, tokenizer, max length, train rows, {dev name: rows}) for the IOT run `run` (`iot.finetune_task`)."""
    from ..iot.finetune_task import task_rows  # transformers: once the options are checked

    return task_rows(run, opts.task, opts.task_data, (opts.text_column, opts.text_pair_column, opts.label_column),
                     opts.max_length, opts.quick_or("max_train_examples"), opts.quick_or("max_dev_examples"))


def recipe(opts: IOTFinetuneOptions, task, n_train: int):
    from ..iot.finetune import Recipe

    batch = opts.quick_or("batch_size") or 32
    if batch < 1 or n_train < batch:
        raise UserError(f"the training split has {n_train} examples, fewer than one batch of {batch}; lower "
                        "--batch-size")
    epochs = opts.epochs if opts.epochs is not None else task.epochs
    steps = max(1, round(epochs * (n_train // batch)))
    cap = opts.quick_or("max_steps")
    steps = min(steps, cap) if cap else steps
    return Recipe(steps=steps, batch_size=batch, lr=opts.lr or 3e-4, warmup_fraction=opts.warmup_fraction,
                  weight_decay=opts.weight_decay, layer_decay=opts.layer_decay,
                  classifier_dropout=opts.classifier_dropout,
                  method=opts.method)


@dataclass
class FinetunePlan(Plan):
    """The study's inputs (`plan_finetune`): (seed, IOT run) pairs, the task and its encoded rows (from the first
    run's tokenizer), the recipe, the orders and the device."""

    pairs: list
    task: Any
    tok: Any
    length: int
    train_rows: list
    dev: dict
    recipe: Any
    orders: list
    device: str

    @property
    def dev_rows(self) -> list:
        return [r for rows in self.dev.values() for r in rows]

    @property
    def dev_names(self) -> list[str]:
        return [n for n, rows in self.dev.items() for _ in rows]


def plan_finetune(opts: IOTFinetuneOptions) -> FinetunePlan:
    from ..rundir import RunDir

    pairs = sources(opts)
    task, tok, length, train_rows, dev = load(opts, pairs[0][1])
    rec = recipe(opts, task, len(train_rows))
    orders = RunDir(pairs[0][1], "IOT").read_json("orders.json")["orders"]
    import torch  # once the options are checked

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return FinetunePlan(opts, pairs, task, tok, length, train_rows, dev, rec, orders, device)


def units(plan: FinetunePlan, out: Path) -> list[Unit]:
    """One per seed (scores/seed<k>.json), each made of its fine-tunings (runs/seed<k>/iot.json, order<j>.json)."""
    n = len(plan.pairs)
    return [Unit(out / "scores" / f"seed{seed}.json", lambda i=i, seed=seed, run=run: _seed(plan, out, i, seed, run),
                 skipped=f"[seed {seed} {i + 1}/{n}] finished earlier: skipped")
            for i, (seed, run) in enumerate(plan.pairs)]


def _seed(plan: FinetunePlan, out: Path, i: int, seed: int, run: Path) -> dict:
    """One seed: IOT fine-tuning, then each order alone from the same weights; scored on the dev split."""
    from ..cost import scoring_minutes
    from ..iot.finetune import score_seed, train_and_predict
    from ..rundir import RunDir

    opts, rec, dev_rows = plan.opts, plan.recipe, plan.dev_rows
    task, tok, train_rows = plan.task, plan.tok, plan.train_rows
    if i:
        task, tok, _, train_rows, _ = load(opts, run)
    m = len(RunDir(run, "IOT").read_json("orders.json")["orders"])
    head = f"[seed {seed} {i + 1}/{len(plan.pairs)}]"
    log(f"{head} {shown_path(run)} on {task.name}: {rec.steps} steps of batch {rec.batch_size} per fine-tuning "
        f"({len(train_rows)} training, {len(dev_rows)} dev examples): IOT over {m} orders, then each order alone")

    def part(file: str, what: str, short: str, orders) -> Unit:
        def train():
            log(f"{head} {what}: training")
            return train_and_predict(run, orders, train_rows, dev_rows, task.num_labels, tok.pad_token_id, rec,
                                     seed, plan.device, log=lambda s: log(f"{head} {short}: {s}"))

        return Unit(out / "runs" / f"seed{seed}" / file, train, skipped=f"{head} {what}: finished earlier, skipped")

    (iot,) = run_units([part("iot.json", "IOT fine-tuning", "IOT", None)])
    alone = run_units([part(f"order{k}.json", f"order {k} ({iot['orders'][k]}) alone", f"order {k}", [k])
                       for k in range(m)])
    res = {"seed": seed, "iot_run": shown_path(run), "orders": iot["orders"],
           **score_seed(task, plan.dev_names, iot, alone),
           "core_minutes": {"iot": scoring_minutes(iot["train_seconds"] + iot["eval_seconds"]),
                            "standalone": {a["orders"][0]: scoring_minutes(a["train_seconds"] + a["eval_seconds"])
                                           for a in alone}}}
    log(f"{head} routed {res['routed']['mean']:.4f}, oracle {res['oracle']['mean']:.4f}, orders (IOT weights) "
        + ", ".join(f"{o['mean']:.4f}" for o in res["orders_iot"]) + "; alone "
        + ", ".join(f"{v['mean']:.4f}" for v in res["standalone"].values()))
    return res


def summarize_study(plan: FinetunePlan, out: Path, per_seed: list) -> dict:
    task = plan.task
    result = summarize(per_seed)
    result.update(study="iot-finetune", task=task.name, metric="+".join(task.metrics),
                  seeds=[s for s, _ in plan.pairs], iot_runs=[shown_path(r) for _, r in plan.pairs],
                  m=len(plan.orders), recipe=plan.recipe.to_dict(), max_length=plan.length,
                  train_examples=len(plan.train_rows), dev_examples=len(plan.dev_rows), device=plan.device)
    return result


def summarize(per_seed: list[dict]) -> dict:
    """Means over seeds (standard error from the seeds' spread with 2+, else the per-instance one), the baseline
    (the order best fine-tuned alone, by the task's score on the mean over seeds) and the goal's test."""
    k = len(per_seed)
    archs = list(per_seed[0]["standalone"])

    def over(get) -> dict:
        v = np.array([get(s)["mean"] for s in per_seed])
        spread = seed_spread(v)
        inst = float(np.sqrt(np.sum(np.square([get(s)["se"] for s in per_seed]))) / k)
        return {"mean": float(v.mean()), "se": spread if spread is not None else inst, "se_seeds": spread,
                "se_instances": inst, "per_seed": v.tolist()}

    def scores(get) -> dict:
        return over(lambda s: {"mean": get(s), "se": 0.0})

    base = max(archs, key=lambda a: (np.mean([s["standalone"][a]["score"] for s in per_seed]),
                                     np.mean([s["standalone"][a]["mean"] for s in per_seed])))
    agree = [s["agreement"] for s in per_seed if s["agreement"] is not None]
    chance = [s["agreement_by_chance"] for s in per_seed if s["agreement_by_chance"] is not None]
    return {
        "orders": per_seed[0]["orders"], "per_seed": per_seed,
        "mean": {"routed": over(lambda s: s["routed"]), "oracle": over(lambda s: s["oracle"]),
                 "orders_iot": {a: over(lambda s, i=i: s["orders_iot"][i]) for i, a in enumerate(archs)},
                 "standalone": {a: over(lambda s, a=a: s["standalone"][a]) for a in archs},
                 "routed_score": scores(lambda s: s["routed_score"]),
                 "standalone_score": {a: scores(lambda s, a=a: s["standalone"][a]["score"]) for a in archs},
                 "agreement": float(np.mean(agree)) if agree else None,
                 "agreement_by_chance": float(np.mean(chance)) if chance else None,
                 "mixed_instances": float(np.mean([s["mixed_instances"] for s in per_seed])),
                 "usage": np.mean([s["usage"] for s in per_seed], 0).tolist(),
                 "iot_core_minutes": float(np.mean([s["core_minutes"]["iot"] for s in per_seed])),
                 "baseline_core_minutes": float(np.mean([s["core_minutes"]["standalone"][base] for s in per_seed]))},
        "goal": goal_test(base, over(lambda s: s["standalone"][base]["routed_minus_this"])),
    }


def answer(result: dict, file: Path) -> dict:
    return {"seeds": result["seeds"], "orders": result["orders"], "result": str(file), "goal": result["goal"]}


def _report(result: dict, out: Path) -> None:
    r, mean, goal = result["recipe"], result["mean"], result["goal"]
    base, archs = goal["baseline"], result["orders"]
    n = len(result["seeds"])
    rows = [[p["seed"], pm(p["routed"]), pm(p["oracle"]),
             "n/a" if p["agreement"] is None else f"{p['agreement']:.3f} ({p['mixed_instances']})",
             " / ".join(f"{100 * u:.0f}" for u in p["usage"]), pm(p["standalone"][base]),
             pm(p["standalone"][base]["routed_minus_this"], "+"), f"{p['core_minutes']['iot']:.2f}",
             f"{p['core_minutes']['standalone'][base]:.2f}"] for p in result["per_seed"]]
    agreement = "n/a" if mean["agreement"] is None else f"{mean['agreement']:.3f}"
    rows.append(["mean", pm(mean["routed"]), pm(mean["oracle"]), agreement,
                 " / ".join(f"{100 * u:.0f}" for u in mean["usage"]), pm(mean["standalone"][base]),
                 pm(goal["routed_minus_standalone"], "+"), f"{mean['iot_core_minutes']:.2f}",
                 f"{mean['baseline_core_minutes']:.2f}"])
    z = "n/a" if goal["z"] is None else f"{goal['z']:.2f}"
    chance = "n/a" if mean["agreement_by_chance"] is None else f"{mean['agreement_by_chance']:.3f}"
    md = [f"# IOT fine-tuning on {result['task']} against the best single order fine-tuned alone ({n} seed"
          f"{'s' * (n > 1)}, M = {result['m']})\n",
          f"IOT runs: {', '.join(f'`{x}`' for x in dict.fromkeys(result['iot_runs']))}. Orders: "
          f"{', '.join(f'`{a}`' for a in archs)}. Every fine-tuning: {r['steps']} steps of batch {r['batch_size']}, lr "
          f"{r['lr']:g} (warm-up {r['warmup_fraction']:g}, layer decay {r['layer_decay']:g}), length "
          f"{result['max_length']}, {result['train_examples']} training examples; [CLS] -> dropout "
          f"{r['classifier_dropout']:g} -> linear (lvbert finetune's head). IOT: {settings_text(r)}. Dev accuracy on "
          f"{result['dev_examples']} examples; ± is a standard error (per seed: over instances; the mean: over "
          "seeds, or the instance-level error with one seed).\n",
          f"- **goal** (routed beats `{base}` fine-tuned alone by more than 2 standard errors): "
          f"**{'met' if goal['met'] else 'not met'}**: routed − alone = {pm(goal['routed_minus_standalone'], '+')} "
          f"(z = {z})",
          f"- headroom: oracle − routed = {mean['oracle']['mean'] - mean['routed']['mean']:+.4f}; where the orders "
          f"disagree (mean {mean['mixed_instances']:.0f} instances) the predictor picks a right order on {agreement} "
          f"of them (by chance {chance})",
          f"- {result['metric']} (0-100): routed {pm(mean['routed_score'], digits=2)}, `{base}` alone "
          f"{pm(mean['standalone_score'][base], digits=2)}",
          f"- cost (core-minutes per seed, {result['device']}): IOT fine-tuning {mean['iot_core_minutes']:.2f}, "
          f"`{base}` alone {mean['baseline_core_minutes']:.2f}\n",
          markdown_table(["seed", "routed", "oracle", "agreement (instances)", "usage %", f"`{base}` alone",
                          "routed − alone", "IOT core-min", "alone core-min"], rows),
          markdown_table(["order", "IOT-fine-tuned weights", "fine-tuned alone", "usage %"],
                         [[f"`{a}`", pm(mean["orders_iot"][a]), pm(mean["standalone"][a]), f"{100 * u:.0f}"]
                          for a, u in zip(archs, mean["usage"])])]
    write_text(out / "iot-finetune.md", "\n".join(md))
    _plot(result, out / "iot-finetune.png")


def _plot(result: dict, path: Path) -> None:
    mean, archs = result["mean"], result["orders"]
    bars = ([(f"order {k}\nIOT-tuned", mean["orders_iot"][a], "tab:blue") for k, a in enumerate(archs)]
            + [("routed", mean["routed"], "tab:green"), ("oracle", mean["oracle"], "tab:gray")]
            + [(f"order {k}\nalone", mean["standalone"][a], "tab:orange") for k, a in enumerate(archs)])
    bar_plot(bars, path, f"{result['task']} dev accuracy (± 2 se)",
             f"IOT fine-tuning, {len(result['seeds'])} seed(s): orders, routed, oracle, alone",
             xlabel="; ".join(f"order {k}: {a}" for k, a in enumerate(archs)), cap=1.0)


STUDY = Study("iot-finetune", RESULT, plan_finetune, units, summarize_study, _report, answer)
