"""Train the supernet: NasExperiment(space, Lightning evaluator, SeededRandomOneShot).

Every step samples one layer type per slot (SPOS, LV-BERT §3.2) from (seed, global step), so the run is
reproducible, resumable with the same future paths, and DDP ranks agree on the path. `--sampling fair` (FairNAS)
trains m paths per step instead, every choice of every slot once, and steps once: m times SPOS's compute per step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .. import layout
from ..errors import UserError
from ..options import opt
from ..presets import presets
from ..train_options import TrainOptions
from ..trainer import state_digest
from ..training import Training

WEIGHTS = "supernet.safetensors"


@dataclass(frozen=True)
class SupernetOptions(TrainOptions):
    PRESETS: ClassVar[dict[str, dict]] = presets("supernet")  # LV-BERT Table 5; tiny: ~10 min on 2 CPU cores

    out: str = layout.SUPERNET
    space: str = opt("lvbert", "search-space name or YAML", group="")
    size: str | None = opt(None, "tiny | small | medium | base (default: the space's size)", group="")
    seed: int = opt(0, "seed of the paths, batches and initialisation", group="")
    sharing: str | None = opt(None, "cross-layer sharing (ALBERT)", choices=["none", "type"], group="")
    sampling: str = opt("spos", "spos: one uniform path per step (default); fair: FairNAS strict fairness, the "
                                "gradients of 4 paths that train every layer type of every slot once, then one step "
                                "(4x the compute)", choices=["spos", "fair"], group="")
    warm_start: str | None = opt(None, "start from this supernet run's weights (same space and shape)", metavar="RUN",
                                 group="")
    fix: list[str] | None = opt(None, "slots every sampled path takes as given, e.g. layer00=sa (a sub-space: "
                                      "few-shot NAS)", metavar="LABEL=TYPE", group="")
    record_paths: bool = opt(False, "write every sampled path and a weight digest per rank (debug/tests)", group="")

    def default_size(self) -> str | None:
        from ..config import load_space

        try:
            return load_space(self.space).size
        except UserError:  # an unknown space: the run says so
            return None


# options an nnictl tuner may set in a supernet trial (values kept as sent)
TUNABLE = dict.fromkeys(("lr", "warmup_steps", "max_steps", "batch_size", "dropout", "weight_decay", "seed"))


def train_supernet(opts: SupernetOptions) -> dict:
    from ..config import load_size, load_space

    t = Training.begin(opts, "supernet", tunable=TUNABLE)
    opts = t.opts
    spec = load_space(opts.space)
    if not opts.size:
        opts = t.update(size=spec.size)
    cfg = load_size(opts.size, dropout=opts.resolved("dropout"), attention_dropout=opts.resolved("dropout"),
                    sharing=opts.sharing)
    # torch, NNI and Lightning only now: the run directory's, space's and size's mistakes are one line at once
    from ..data import MLMDataModule
    from ..space import LVBertSpace
    from .lightning_module import MLMModule
    from .strategy import SAMPLINGS, SeededRandomOneShot

    if opts.sampling not in SAMPLINGS:
        raise UserError(f"--sampling must be one of {', '.join(SAMPLINGS)}, got {opts.sampling!r}")
    fixed = parse_fix(opts.fix, spec)
    if fixed and opts.sampling == "fair":
        raise UserError("--fix and --sampling fair exclude each other (fair sampling trains every choice)")
    micro_batch = t.check()
    data = t.data(cfg)
    cfg.vocab_size = data.vocab_size  # a given tokenizer decides the vocabulary
    warm = warm_start_run(opts.warm_start, spec, cfg) if opts.warm_start and not opts.resume else None
    run = t.open(spec, cfg, data)
    dm = MLMDataModule(data, batch_size=micro_batch, seed=opts.seed, num_workers=opts.hardware.num_workers)
    space = LVBertSpace(spec, cfg)
    if warm is not None:  # a resumed run continues from its own checkpoint instead
        warm.load_weights(space, WEIGHTS, "its space.yaml/model_config.json")
    result = t.fit(MLMModule(**t.schedule()), dm, space=space,
                   strategy=SeededRandomOneShot(seed=opts.seed, record_paths=opts.record_paths,
                                                 sampling=opts.sampling, fixed=fixed))
    trainer = result.trainer
    if opts.record_paths:
        _record_rank(run, trainer, space, trainer.lightning_module.path_log)
    if not trainer.is_global_zero:
        return {}
    run.save_weights(space, WEIGHTS)
    final = t.history[-1]["val_mlm_acc"] if t.history else result.previous.get("final_val_mlm_acc")
    return t.finish(result, data, {"space": spec.to_dict(), "sampling": opts.sampling, "fixed": fixed,
                                        "warm_start": opts.warm_start, "final_val_mlm_acc": final}, final=final)


def parse_fix(items: list[str] | None, spec) -> dict[str, str]:
    """--fix LABEL=TYPE ... as {label: type}, checked against the space."""
    from ..arch import slot_label

    fixed = {}
    labels = [slot_label(i) for i in range(spec.slots)]
    for item in items or []:
        label, _, choice = item.partition("=")
        if label not in labels or choice not in spec.candidates:
            raise UserError(f"--fix {item!r}: give LABEL=TYPE with LABEL one of {labels[0]}..{labels[-1]} and TYPE "
                            f"one of {', '.join(spec.candidates)}")
        fixed[label] = choice
    return fixed


def warm_start_run(run_path: str, spec, cfg):
    """The supernet run --warm-start names, checked to have this run's space and shape (else one error line)."""
    from .rundir import supernet_dir

    run = supernet_dir(run_path)
    if (run.spec.slots, list(run.spec.candidates)) != (spec.slots, list(spec.candidates)) or \
            run.cfg.to_dict() != cfg.to_dict():
        raise UserError(f"--warm-start {run_path}: its space or shape differs from this run's (train with the same "
                        "--space, --size and data)")
    return run


def _record_rank(run, trainer, space, path_log) -> None:
    from ..arch import to_compact

    run.write_json(f"ranks/rank{trainer.global_rank}.json", {
        "rank": trainer.global_rank,
        "paths": [[step, to_compact([path[k] for k in sorted(path)])] for step, path in path_log],
        "weights_sha256": state_digest(space),
    })
