"""`lvbert run`: the whole pipeline in one command — data -> supernet (SPOS) -> search -> best_arch.json + plot.

    OUT/options.json  the options of the run (`--resume` continues with them)
    OUT/supernet/     supernet run directory (lvbert supernet train)
    OUT/search/       best_arch.json, history.jsonl, search_curve.png (lvbert search run)
    OUT/pretrain/     with --objective mlm|electra: the searched architecture pre-trained (lvbert pretrain), its
                      Hugging Face model in OUT/pretrain/hf (ELECTRA: + the generator in OUT/pretrain/hf-generator)

`--resume` continues whichever stage was interrupted; finished stages are kept. With `--devices N > 1`
Lightning's DDP launcher re-runs this command for ranks 1..N-1: they only join the supernet training (with rank
0's options) and leave the search to rank 0. Ranks started from outside (`--num-nodes N` on each node, torchrun,
SLURM) do the same with their own command line, and on --resume read the run directory as rank 0 does (a disk
every node shares): they join the supernet stage where it is not finished. With --objective, rank 0 then launches
ranks afresh for the pre-training stage (`STAGE_ENV` tells them which stage to join); that needs Lightning's own
launcher on one node, so under torchrun/SLURM or with `--num-nodes` > 1 `--objective` with several devices is
refused (pre-train afterwards with `lvbert pretrain`). Every hardware option (`HardwareOptions`) goes to the
supernet and pre-training stages as given.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

from . import layout
from .errors import UserError
from .options import FlatOptions, OutputOptions, derive, flat_group, opt
from .ranks import RANK0_ENV, launcher_is_rank_zero
from .rundir import CHECKPOINT, META
from .search.options import LatencyOptions, RerankOptions, StrategyOptions
from .train_options import DataOptions, HardwareOptions

KIND = "pipeline"
STAGE_ENV = "LVBERT_RUN_STAGE"  # set by rank 0 for the ranks it launches: the stage they join (default supernet)


@dataclass(frozen=True)
class PipelineOptions(FlatOptions, StrategyOptions, RerankOptions, LatencyOptions, OutputOptions):
    hardware: HardwareOptions = flat_group(HardwareOptions)  # before the pipeline's own: the flags' order
    inputs: DataOptions = flat_group(DataOptions)
    out: str = layout.RUN
    space: str = opt("lvbert", "search-space name or YAML")
    size: str = opt("tiny", "supernet size (tiny: minutes on 2 CPU cores)")
    seed: int = opt(0, "seed of every stage: paths, batches, initialisation, search")
    supernet_max_steps: int | None = opt(None, "supernet training steps (default: the size's preset)")
    val_every: int | None = opt(None, "validate the supernet every N steps (default: the size's preset; it always "
                                      "validates at its last step)")
    # None: no pre-training stage; mlm | electra: pre-train the searched architecture
    objective: str | None = opt(None, "then pre-train the searched architecture at --size: mlm | electra (default: "
                                      "no pre-training)", metavar="OBJECTIVE")
    pretrain_max_steps: int | None = opt(None, "pre-training steps (default: the size's preset)")
    given: list[str] | None = field(default=None, compare=False)


def register(sub) -> None:
    from .cliargs import add_command

    add_command(sub, "run", "whole pipeline: data -> supernet -> search -> best_arch.json + plot", PipelineOptions,
                run_cli)


def run_cli(args) -> dict:
    from .cliargs import options_from_args

    return run(options_from_args(PipelineOptions, args))


# --- each stage's options, derived from the pipeline's (`options.derive`; `out`: the pipeline's directory) --------
def supernet_options(opts: PipelineOptions, out, resume: bool):
    """Stage 1: the data and hardware groups and --progress as given, the space, size and seed."""
    from .supernet.train import SupernetOptions

    return derive(SupernetOptions, opts, (DataOptions, HardwareOptions, OutputOptions), out=str(out / "supernet"),
                  space=opts.space, size=opts.size, seed=opts.seed, max_steps=opts.supernet_max_steps,
                  val_every=opts.val_every, resume=resume, overwrite=not resume)


def search_options(opts: PipelineOptions, out, resume: bool):
    """Stage 2: the strategy, re-ranking and latency groups and --progress as given, over stage 1's supernet."""
    from .search.run import SearchOptions

    return derive(SearchOptions, opts, (StrategyOptions, RerankOptions, LatencyOptions, OutputOptions),
                  out=str(out / "search"), supernet=str(out / "supernet"), seed=opts.seed,
                  threads=opts.hardware.threads, resume=resume,
                  overwrite=not resume)


def pretrain_options(opts: PipelineOptions, out, arch: str | None, resume: bool):
    """Stage 3 (--objective): the data and hardware groups and --progress as given, the size, objective and seed."""
    from .pretrain.train import PretrainOptions

    return derive(PretrainOptions, opts, (DataOptions, HardwareOptions, OutputOptions), out=str(out / "pretrain"),
                  arch=None if resume else arch, size=opts.size, objective=opts.objective, seed=opts.seed,
                  max_steps=opts.pretrain_max_steps, resume=resume, overwrite=not resume)


def run(opts: PipelineOptions) -> dict:
    from .rundir import RunDir
    from .search.run import run_search
    from .supernet.train import train_supernet

    out = RunDir(opts.out, KIND, "output directory")
    supernet_dir, search_dir = out / "supernet", out / "search"

    if not launcher_is_rank_zero():  # a DDP rank > 0 re-running this command: join one stage's training only
        if os.environ.get(STAGE_ENV) == "pretrain":
            from .pretrain.train import PretrainOptions, train_pretrain

            # the hardware as given; every other option then rank 0's (published)
            train_pretrain(derive(PretrainOptions, opts, (HardwareOptions,), out=str(out / "pretrain")))
        elif RANK0_ENV in os.environ:  # started by rank 0's launcher: its published options
            train_supernet(supernet_options(opts, out, False))
        else:  # started from outside (another node, torchrun, SLURM): settle what rank 0 settles, from the disk
            opts = out.begin(opts)  # --resume: OUT/options.json (`RunDir.adopt`)
            _check_pretrain(opts)  # rank 0's refusal here too, rather than waiting for it
            flags = RunDir(supernet_dir, "supernet").continuation() if opts.resume else {"resume": False}
            if flags is None:  # the supernet is trained: nothing to join
                print(f"note: {supernet_dir} is trained; the search runs on rank 0 only", file=sys.stderr)
            else:
                train_supernet(supernet_options(opts, out, flags["resume"]))
        return 0

    opts = out.begin(opts)
    opts.evolution.validate()
    _check_pretrain(opts)
    _check_latency(opts)
    if opts.hardware.compile:
        from .trainer import check_compile_backend

        check_compile_backend(opts.hardware.compile)
    out.open(opts)
    clock = PartClock(out)
    try:
        stages = 3 if opts.objective else 2

        supernet_meta = stage(f"[1/{stages}] supernet", RunDir(supernet_dir, "supernet"), opts.resume,
                              f"({opts.space}, size {opts.size})",
                              lambda resume: train_supernet(supernet_options(opts, out, resume)))
        clock.save()
        best = stage(f"[2/{stages}] search", RunDir(search_dir, "search"), opts.resume,
                     f"{', '.join(opts.strategies)} over the supernet",
                     lambda resume: run_search(search_options(opts, out, resume)),
                     done="best_arch.json", marker="search.json")
        summary = {
            "best_arch": str(search_dir / "best_arch.json"),
            "arch": best["compact"],
            "score": best.get("score"),
            "supernet_val_mlm_acc": supernet_meta.get("final_val_mlm_acc"),
            "plot": str(search_dir / "search_curve.png"),
        }
        if opts.pareto:
            summary["pareto"] = str(search_dir / "pareto.png")
        clock.save()
        if opts.objective:
            summary.update(pretrain_stage(opts, out, best["compact"]))
        summary["minutes"] = round(clock.total() / 60, 1)  # every part of a resumed run
        summary["minutes_this_part"] = round(clock.this_part() / 60, 1)
        return summary
    finally:
        clock.save()  # also when interrupted: the next part's summary counts this one (not after kill -9)


class PartClock:
    """Wall time of a run over its parts (each `--resume` starts one), kept in OUT/elapsed.json."""

    FILE = "elapsed.json"

    def __init__(self, out):
        self.out = out
        self.before = [float(x) for x in (out.read_json(self.FILE).get("parts_seconds", []) if out.has(self.FILE)
                                         else [])]
        self.start = time.time()

    def this_part(self) -> float:
        return time.time() - self.start

    def total(self) -> float:
        return sum(self.before) + self.this_part()

    def save(self) -> None:
        self.out.write_json(self.FILE, {"parts_seconds": [round(x, 1) for x in self.before + [self.this_part()]]})


def stage(title: str, run, resume: bool, what: str, work, done: str = META, marker: str = CHECKPOINT) -> dict:
    """One stage of `lvbert run` in its run directory: kept when finished (`done` there), resumed with --resume when
    interrupted (`marker` there), else started afresh (replacing what an interrupted first attempt left); its
    `done` file's content afterwards."""
    flags = run.continuation(done=done, marker=marker)
    if flags is None:
        print(f"{title}: done already in {run.path}", file=sys.stderr, flush=True)
    else:
        resume = resume and flags["resume"]
        print(f"{title}: {'resuming' if resume else 'running'} {what} -> {run.path}", file=sys.stderr, flush=True)
        work(resume)
    return run.read_json(done)


def _check_latency(opts: PipelineOptions) -> None:
    """A latency table for another size or device, or a budget no order meets, is refused before the supernet trains
    (the search checks it again against the trained supernet)."""
    from .config import load_size, load_space
    from .data.validation import resolve_device
    from .search.latency import LatencySearch

    LatencySearch.from_options(opts.max_latency_ms, opts.latency_table, opts.pareto, load_size(opts.size),
                               load_space(opts.space), resolve_device("auto").type)


def _check_pretrain(opts: PipelineOptions) -> None:
    from .pretrain.objectives import OBJECTIVES

    if opts.objective is None:
        return
    if opts.objective not in OBJECTIVES:
        raise UserError(f"--objective must be one of {', '.join(OBJECTIVES)}, got {opts.objective!r}")
    outside = "LOCAL_RANK" in os.environ or int(os.environ.get("SLURM_NTASKS", "1") or 1) > 1  # torchrun / srun
    # ranks started from outside, not by Lightning's launcher, or on other nodes: rank 0 cannot launch them anew
    if opts.hardware.num_nodes > 1 or (str(opts.hardware.devices) != "1" and outside):
        raise UserError("--objective with several devices needs Lightning's own launcher on one node (plain `lvbert "
                        "run --devices N`); under torchrun/SLURM or with --num-nodes > 1 pre-train afterwards with "
                        f"`lvbert pretrain --arch {opts.out}/search/best_arch.json --devices {opts.hardware.devices} "
                        f"--num-nodes {opts.hardware.num_nodes}`")


def pretrain_stage(opts: PipelineOptions, out, arch: str) -> dict:
    """Stage 3 (--objective): `lvbert pretrain` of the searched architecture at the pipeline's size, into
    OUT/pretrain (resumed when interrupted, kept when finished)."""
    from .pretrain.train import train_pretrain
    from .rundir import RunDir

    pretrain_dir = out / "pretrain"

    def train(resume: bool) -> None:
        if str(opts.hardware.devices) != "1":
            from .training import end_ddp_session

            end_ddp_session()  # the supernet's ranks have exited: Lightning launches new ones, told to pre-train
            os.environ[STAGE_ENV] = "pretrain"
        train_pretrain(pretrain_options(opts, out, arch, resume))

    meta = stage("[3/3] pretrain", RunDir(pretrain_dir, "pretrain"), opts.resume, f"{arch} ({opts.objective}, size "
                 f"{opts.size})", train)
    return {"pretrain": str(pretrain_dir), "pretrain_final": meta.get("final"), "hf": meta["hf"]["hf"],
            "hf_generator": meta["hf"].get("hf_generator")}
