"""`lvbert study downstream`: the searched order against the baselines after stand-alone pre-training.

Each architecture is pre-trained from scratch with one budget (MLM or ELECTRA, the size's shape, the same data)
into the model store, once per pre-training seed (`--pretrain-seeds`, default `--seed`), scored by MLM accuracy on
the same fixed-masked validation tokens (ELECTRA: its generator's), then each model is fine-tuned on each task with
several seeds (`lvbert finetune`, OUT/finetune/<arch>/, or OUT/finetune/<arch>-pretrain<seed>/ with several
pre-training seeds). The table gives the median and the min-max range over every (pre-training seed, fine-tuning
seed) run, and for every arch whether its difference from the searched one is larger than that spread (the two
min-max ranges do not overlap). With `--nnictl DIR` the pre-trainings are written as an nnictl experiment instead,
and nothing else is done (`nnictl.py`); the study run again without it fine-tunes here.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import layout
from ..arch import Arch, named_arch, parse_arch
from ..atomic import pyplot, save_figure, write_text
from ..errors import UserError
from ..options import opt
from ..rundir import RunDir
from ..safeio import read_json
from ..standalone.scoring import standalone_accuracy, validation_batches
from ..standalone.store import Standalone, train_all
from .common import Budget, StandaloneStudyOptions, log, shown_path, shown_stats
from .driver import Plan, Study, Unit
from .stats import markdown_table

RESULT = "downstream.json"
DEFAULT_ARCHS = ["searched", "bert", "dynamicconv", "lvbert-small", "sandwich"]


def _comma_list(text: str) -> list[str]:
    return [a.strip() for a in text.split(",") if a.strip()]


@dataclass(frozen=True)
class DownstreamOptions(StandaloneStudyOptions):
    out: str = f"{layout.STUDY}/downstream"
    archs: list[str] = opt(help=f"comma-separated (default {','.join(DEFAULT_ARCHS)}); the first is the reference of "
                                "the comparisons", default_factory=lambda: list(DEFAULT_ARCHS), type=_comma_list,
                           group="")
    # best_arch.json, a search directory or any arch spelling
    searched: str | None = opt(None, "the searched architecture: a search directory, best_arch.json or letters",
                               metavar="DIR|FILE|ARCH", group="")
    size: str = opt("tiny", "tiny | small | medium | base", group="")
    objective: str = opt("mlm", "mlm | electra", group="")
    data: str | None = opt(None, "prepared pre-training data (default: the embedded corpus prepared for --size)",
                           metavar="DIR", group="")
    cache_dir: str | None = opt(None, "data cache (default: $LVBERT_CACHE or ~/.cache/nni-lvbert)", group="")
    tasks: list[str] = opt(help="fine-tuning tasks (default the embedded sotu-era; any `lvbert finetune --task`)",
                           default_factory=lambda: ["sotu-era"], flag="--task", group="")
    task_data: str | None = opt(None, "the tasks' data (`lvbert finetune --data`)", metavar="PATH", group="")
    pretrain_seeds: list[int] | None = opt(None, "pre-training seeds: each arch is pre-trained once per seed and each "
                                                 "model fine-tuned with every --finetune-seeds (default: --seed only)",
                                           group="")
    finetune_seeds: list[int] | None = opt(None, "fine-tuning seeds (default 0 1 2)", group="")
    finetune_max_steps: int | None = opt(None, "cap on steps per fine-tuning run", group="")
    slots: int = 24  # depth of the named baselines (a searched arch brings its own)


def _resolve_archs(opts: DownstreamOptions, slots: int) -> list[tuple[str, str]]:
    """(label, compact letters) per requested arch; `searched` comes from --searched."""
    from ..config import SpaceSpec

    out = []
    for name in opts.archs:
        if name == "searched":
            if not opts.searched:
                raise UserError("--archs lists 'searched': give the searched architecture with --searched "
                                "(best_arch.json, a search directory or letters)")
            src = Path(opts.searched)
            value = str(src / "best_arch.json") if src.is_dir() else opts.searched
            out.append(("searched", parse_arch(value).compact))
        else:
            letters = named_arch(name, slots)
            arch = Arch.parse(letters or name, SpaceSpec(name="study", slots=slots))
            out.append((name, arch.compact))
    labels = [lab for lab, _ in out]
    if len(set(labels)) != len(labels):
        raise UserError("an architecture is listed twice in --archs")
    return out


def _tag(label: str, p: int, pretrain_seeds: list[int]) -> str:
    return label + (f", pre-training seed {p}" if len(pretrain_seeds) > 1 else "")


@dataclass
class DownstreamPlan(Plan):
    """The study's inputs (`plan_downstream`): budget, pre-training seeds, the shape, the archs, the prepared data,
    {(label, pre-training seed): (description, spec)}; the validation batches once OUT is started."""

    budget: Budget
    pretrain_seeds: list[int]
    cfg: Any
    archs: list
    data: Any
    specs: dict
    validation: tuple | None = None

    def standalone(self) -> list:
        return list(self.specs.values())

    def ft_seeds(self) -> list[int]:
        return self.opts.finetune_seeds or ([0, 1] if self.opts.quick else [0, 1, 2])

    def ft_cap(self) -> int | None:
        return self.opts.finetune_max_steps if self.opts.finetune_max_steps is not None else (
            4 if self.opts.quick else None)

    def ft_dir(self, out: Path, key) -> Path:
        label, p = key
        return out / "finetune" / (label if len(self.pretrain_seeds) == 1 else f"{label}-pretrain{p}")


def plan_downstream(opts: DownstreamOptions) -> DownstreamPlan:
    """The study's inputs, checked, nothing written into OUT (`drive` and the --nnictl experiment share it, so both
    train the same model keys)."""
    from ..config import load_size
    from ..data import PreparedData, prepare
    from ..pretrain.objectives import OBJECTIVES

    if opts.objective not in OBJECTIVES:
        raise UserError(f"unknown objective {opts.objective!r}; choose one of {', '.join(OBJECTIVES)}")
    budget = opts.budget()
    pretrain_seeds = list(opts.pretrain_seeds or [opts.seed])
    if len(set(pretrain_seeds)) != len(pretrain_seeds):
        raise UserError("a seed is listed twice in --pretrain-seeds")
    cfg = load_size(opts.size, dropout=budget.dropout, attention_dropout=budget.dropout)
    archs = _resolve_archs(opts, opts.slots)
    data = PreparedData.load(opts.data) if opts.data else prepare(size=opts.size, seed=opts.data_seed,
                                                                   cache_dir=opts.cache_dir)
    cfg.vocab_size = data.vocab_size
    specs = {(label, p): (f"{_tag(label, p, pretrain_seeds)} ({letters}): stand-alone {opts.objective.upper()} "
                          "pre-training",
                          Standalone(arch=letters, objective=opts.objective, size=opts.size, model_config=cfg.to_dict(),
                                     budget=budget, data=str(data.path), seed=p, data_seed=opts.data_seed))
             for label, letters in archs for p in pretrain_seeds}
    return DownstreamPlan(opts, budget, pretrain_seeds, cfg, archs, data, specs)


def units(plan: DownstreamPlan, out: Path) -> list[Unit]:
    """Every arch x pre-training seed pre-trained into the store (`train_all`), then one unit per model: its
    fine-tunings (OUT/finetune/<arch>[-pretrain<seed>]/results.json, finished when made from this model)."""
    from ..finetune.run import FinetuneOptions, finetune

    opts, ft_seeds = plan.opts, plan.ft_seeds()
    plan.validation = validation_batches(str(plan.data.path), plan.cfg, opts.validation_tokens())
    runs = dict(zip(plan.specs, train_all(list(plan.specs.values()), opts.store(), opts.progress)))
    (out / "finetune").mkdir(exist_ok=True)

    def unit(i: int, key) -> Unit:
        d = plan.ft_dir(out, key)

        def tune() -> None:
            log(f"[{i + 1}/{len(runs)}] {_tag(*key, plan.pretrain_seeds)}: fine-tuning on {', '.join(opts.tasks)}, "
                f"seeds {ft_seeds}")
            # results.json of another model (its pre-training was redone): resumed, --resume checks the model
            flags = RunDir(d, "finetune").continuation(done="results.json", marker="options.json") or {
                "resume": True, "overwrite": False}
            finetune(FinetuneOptions.flat(model=str(runs[key] / "hf"), tasks=list(opts.tasks), data=opts.task_data,
                                          out=str(d), seeds=list(ft_seeds), max_length=plan.cfg.max_length,
                                          max_steps=plan.ft_cap(), max_train_examples=64 if opts.quick else None,
                                          accelerator="cpu", progress=opts.progress, **flags))

        def tuned() -> bool:
            done = d / "results.json"
            return done.is_file() and read_json(done).get("model") == str(runs[key] / "hf")

        return Unit(d / "results.json", tune, save=None, lock=out / "finetune" / f".{d.name}.lock", finished=tuned)

    return [unit(i, key) for i, key in enumerate(runs)]


def summarize(plan: DownstreamPlan, out: Path, tuned: list) -> dict:
    from ..info import param_counts

    opts, (batches, val_stats), ft_seeds = plan.opts, plan.validation, plan.ft_seeds()
    ft = dict(zip(plan.specs, tuned))
    rows = []
    for label, letters in plan.archs:
        per_seed = []  # one entry per pre-training seed
        for p in plan.pretrain_seeds:
            run = Path(opts.store()) / plan.specs[label, p][1].dirname()
            per_seed.append({"seed": p, "run": str(run), "mlm_acc": standalone_accuracy(run, batches),
                             "disc_auc": read_json(run / "meta.json").get("final", {}).get("val_disc_auc"),
                             "tasks": {t: [r["score_per_seed"][str(s)] for s in ft_seeds]
                                       for t, r in ft[label, p]["tasks"].items()}})
        rows.append(_row(label, letters, param_counts(plan.cfg, parse_arch(letters))["backbone"], per_seed))
    return {"study": "downstream", "size": opts.size, "objective": opts.objective, "budget": plan.budget.__dict__,
            "seed": opts.seed, "data": shown_path(plan.data.path), "validation": shown_stats(val_stats),
            "tasks": list(opts.tasks), "pretrain_seeds": plan.pretrain_seeds, "ft_seeds": ft_seeds,
            "ft_max_steps": plan.ft_cap(), "rows": rows, "comparisons": compare(rows)}


def _row(label: str, letters: str, backbone_params: int, per_seed: list[dict]) -> dict:
    """One arch's row: MLM accuracy (median over pre-training seeds) and, per task, every (pre-training seed,
    fine-tuning seed) score in `per_seed` (pre-training seed major) with their median; one pre-training seed gives
    the single-seed layout of before (plus `pretrain`)."""
    accs = [s["mlm_acc"] for s in per_seed]
    aucs = [s["disc_auc"] for s in per_seed if s["disc_auc"] is not None]
    tasks = {}
    for t in per_seed[0]["tasks"]:
        values = [v for s in per_seed for v in s["tasks"][t]]
        tasks[t] = {"median": statistics.median(values), "per_seed": values,
                    "per_pretrain_seed": {str(s["seed"]): statistics.median(s["tasks"][t]) for s in per_seed}}
    return {"label": label, "arch": letters, "run": per_seed[0]["run"], "backbone_params": backbone_params,
            "mlm_acc": statistics.median(accs), "disc_auc": statistics.median(aucs) if aucs else None,
            "pretrain": [{k: s[k] for k in ("seed", "run", "mlm_acc", "disc_auc")} for s in per_seed],
            "tasks": tasks}


def compare(rows: list[dict]) -> dict:
    """Every arch against the first row (the searched one when listed first): per task the difference of medians
    and whether it exceeds the seed spread (min-max ranges over all runs do not overlap); with several
    pre-training seeds the same for MLM accuracy over them (`mlm`)."""
    if not rows:
        return {}

    def versus(a: list[float], b: list[float]) -> dict:
        return {"diff_median": statistics.median(a) - statistics.median(b),
                "beyond_seed_spread": max(a) < min(b) or max(b) < min(a)}

    ref = rows[0]
    out = {"reference": ref["label"],
           "tasks": {t: {r["label"]: versus(ref["tasks"][t]["per_seed"], r["tasks"][t]["per_seed"])
                         for r in rows[1:]} for t in ref["tasks"]}}
    if len(ref.get("pretrain", [])) > 1:
        accs = [[s["mlm_acc"] for s in r["pretrain"]] for r in rows]
        out["mlm"] = {r["label"]: versus(accs[0], acc) for r, acc in zip(rows[1:], accs[1:])}
    return out


def _report(result: dict, out: Path) -> None:
    rows, tasks = result["rows"], result["tasks"]
    comp = result["comparisons"]
    ref = comp.get("reference")
    seeds = result.get("pretrain_seeds", [result["seed"]])
    several = len(seeds) > 1
    header = (["arch", "letters", "backbone params", "MLM acc" + (" median [min–max]" if several else "")]
              + [f"{t} median [min–max]" for t in tasks])
    if ref:
        header += [f"{t}: {ref} − this" for t in tasks]
    body = []
    for r in rows:
        accs = [x["mlm_acc"] for x in r.get("pretrain", [])]
        mlm = f"{r['mlm_acc']:.4f} [{min(accs):.4f}–{max(accs):.4f}]" if several else r["mlm_acc"]
        line = [r["label"], f"`{r['arch']}`", f"{r['backbone_params'] / 1e6:.2f}M", mlm]
        for t in tasks:
            v = r["tasks"][t]
            line.append(f"{v['median']:.2f} [{min(v['per_seed']):.2f}–{max(v['per_seed']):.2f}]")
        if ref:
            for t in tasks:
                c = comp["tasks"][t].get(r["label"])
                line.append("—" if c is None else
                            f"{c['diff_median']:+.2f}" + (" (beyond seed spread)" if c["beyond_seed_spread"] else ""))
        body.append(line)
    b = result["budget"]
    md = [f"# Stand-alone {result['objective'].upper()} pre-training, then fine-tuning ({result['size']})\n",
          f"Every arch: {b['steps']} steps, batch {b['batch_size']}, lr {b['lr']:g}, warm-up {b['warmup_steps']}, "
          f"pre-training seed{'s' if several else ''} {', '.join(map(str, seeds))}; MLM accuracy on the same "
          f"{result['validation']['masked_tokens']} masked validation tokens; fine-tuning seeds {result['ft_seeds']}"
          f"{' of every pre-trained model (medians and ranges over all of these runs)' if several else ''}.\n",
          markdown_table(header, body)]
    write_text(out / "downstream.md", "\n".join(md))
    plt = pyplot()
    n = 1 + len(tasks)
    fig, axes = plt.subplots(1, n, figsize=(3.6 * n, 3.6), squeeze=False)
    labels = [r["label"] for r in rows]
    if several:
        accs = [[x["mlm_acc"] for x in r["pretrain"]] for r in rows]
        mid = [r["mlm_acc"] for r in rows]
        axes[0][0].bar(labels, mid, color="tab:gray", capsize=4,
                       yerr=[[m - min(a) for m, a in zip(mid, accs)], [max(a) - m for m, a in zip(mid, accs)]])
        axes[0][0].set_title("stand-alone MLM accuracy\n(median, min–max over pre-training seeds)", fontsize=10)
    else:
        axes[0][0].bar(labels, [r["mlm_acc"] for r in rows], color="tab:gray")
        axes[0][0].set_title("stand-alone MLM accuracy", fontsize=10)
    for ax, t in zip(axes[0][1:], tasks):
        med = [r["tasks"][t]["median"] for r in rows]
        lo = [m - min(r["tasks"][t]["per_seed"]) for m, r in zip(med, rows)]
        hi = [max(r["tasks"][t]["per_seed"]) - m for m, r in zip(med, rows)]
        ax.bar(labels, med, yerr=[lo, hi], capsize=4)
        ax.set_title(f"{t}: median, min–max over {'all runs' if several else 'seeds'}", fontsize=10)
    for ax in axes[0]:
        ax.tick_params(axis="x", rotation=35, labelsize=8)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    save_figure(fig, out / "downstream.png", dpi=110, bbox_inches="tight")


STUDY = Study("downstream", RESULT, plan_downstream, units, summarize, _report, lambda result, file: result)
