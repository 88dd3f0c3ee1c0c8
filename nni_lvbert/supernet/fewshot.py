"""Few-shot NAS (Zhao et al., ICML 2021): split the space on one decision into K sub-supernets, each warm-started
from the one-shot supernet and trained further on its own sub-space only; an order is scored by the
sub-supernet that owns it.

`lvbert supernet few-shot --warm-start RUN --split slot:I --out DIR` splits on slot I's layer type (K = the
number of candidates). DIR holds

    fewshot.json     the split, the owner of each choice, the steps and the cost (written when all are trained)
    sub-<type>/      one ordinary supernet run directory per choice (`lvbert supernet train --warm-start RUN
                     --fix layerI=<type>`): resumable, loadable by every command that loads a supernet

The compute is RUN's steps plus K x --max-steps; compare with a one-shot supernet trained that many steps.
`search.scorer.open_scorer` routes each order to its owner, so `lvbert search run --supernet DIR`, `lvbert
search score` and `lvbert study ranking --rankers few-shot=DIR` take DIR like a one-shot run directory.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from .. import layout
from ..errors import UserError
from ..options import opt
from ..rundir import META, RunDir
from .train import SupernetOptions

SPEC = "fewshot.json"


def parse_split(split: str, spec) -> int:
    """`slot:I` -> I (the one kind of split implemented: one slot's layer type)."""
    kind, _, value = split.partition(":")
    if kind != "slot" or not value.isdigit() or int(value) >= spec.slots:
        raise UserError(f"--split {split!r}: use slot:I with I in 0..{spec.slots - 1} (split on slot I's layer type)")
    return int(value)


def is_fewshot(path) -> bool:
    return (Path(path) / SPEC).is_file()


@dataclasses.dataclass(frozen=True)
class FewShotOptions(SupernetOptions):
    out: str = opt(layout.FEWSHOT, "few-shot directory (fewshot.json + one supernet run per sub-space)", metavar="DIR")
    warm_start: str | None = opt(None, "the trained one-shot supernet to split", metavar="RUN", group="")
    split: str = opt("slot:0", "the decision to split on: slot:I = slot I's layer type, one sub-supernet per type",
                     metavar="slot:I", group="")
    max_steps: int | None = opt(None, "training steps of each sub-supernet")


# SupernetOptions a few-shot split does not take: each sub-supernet has the space, shape, sampling and prepared data
# (or --data) of its base
NOT_FEWSHOT = ("space", "size", "sharing", "sampling", "fix", "corpus", "tokenizer", "max_docs")


def train_fewshot(opts: FewShotOptions) -> dict:
    """Train every sub-supernet of opts.split into opts.out/sub-<type> (finished ones kept, interrupted ones
    resumed), then write fewshot.json."""
    from ..arch import slot_label
    from ..atomic import write_json
    from ..cost import core_minutes
    from .rundir import supernet_dir
    from .train import train_supernet

    run = RunDir(opts.out, "few-shot", "few-shot directory")
    opts = run.begin(opts)
    if not opts.warm_start:
        raise UserError("give the one-shot supernet to split with --warm-start RUN")
    base = supernet_dir(opts.warm_start)
    slot = parse_split(opts.split, base.spec)
    if opts.sampling != "spos":
        raise UserError("few-shot sub-supernets train with --sampling spos")
    run.open(opts)
    label = slot_label(slot)
    stored = base.read_json("options.json") if base.has("options.json") else {}
    plain = {f.name: getattr(opts, f.name) for f in dataclasses.fields(SupernetOptions)}
    plain.update(space=str(base.path / "space.yaml"), size=opts.size or stored.get("size"),
                 data=opts.inputs.data or (base.meta.get("data") or {}).get("path") or stored.get("data"), given=None,
                 overwrite=False)  # the one-shot run's prepared data: the same tokens and vocabulary
    owners, metas = {}, []
    for i, choice in enumerate(base.spec.candidates):
        sub = run.path / f"sub-{choice}"
        owners[choice] = sub.name
        flags = RunDir(sub, "supernet").continuation()
        print(f"[{i + 1}/{len(base.spec.candidates)}] sub-supernet {label}={choice}: "
              f"{'done' if flags is None else 'training'} -> {sub}", file=sys.stderr, flush=True)
        if flags is not None:
            train_supernet(SupernetOptions.flat(**{**plain, "out": str(sub), "fix": [f"{label}={choice}"], **flags}))
        metas.append(RunDir(sub, "supernet").read_json(META))
    result = {"split": f"slot:{slot}", "label": label, "owners": owners, "warm_start": str(Path(opts.warm_start)),
              "warm_start_steps": base.meta.get("steps"), "steps_each": [m["steps"] for m in metas],
              "total_steps": (base.meta.get("steps") or 0) + sum(m["steps"] for m in metas),
              "core_minutes": core_minutes(base.meta) + sum(core_minutes(m) for m in metas),
              "final_val_mlm_acc": {c: m.get("final_val_mlm_acc") for c, m in zip(owners, metas)}}
    write_json(run.path / SPEC, result)
    return {"out": str(run.path), **result}


def read_fewshot(path) -> dict:
    from ..safeio import read_json

    spec = read_json(Path(path) / SPEC, "few-shot supernet (fewshot.json)")
    for sub in spec["owners"].values():
        if not (Path(path) / sub / META).is_file():
            raise UserError(f"few-shot supernet {path}: its sub-supernet {sub} is not finished "
                            f"(continue with lvbert supernet few-shot --out {path} --resume)")
    return spec
