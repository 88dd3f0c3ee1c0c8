"""The one training driver behind every Lightning training command (supernet, IOT, pre-training; fine-tuning uses
its `fit`). A command supplies its configuration, model, data module and extra metadata; `Training` does the rest:

    t = Training.begin(opts, "supernet", tunable=TUNABLE)   # nnictl tuner parameters; --resume / DDP options
    cfg = ...                                                # the stage's config from t.opts
    micro_batch = t.check()                                  # step/batch numbers, the batch over the devices
    data = t.data(cfg)                                       # prepared data (before anything is written)
    run = t.open(spec, cfg, data)                            # the run directory, options.json, seed
    module, dm = ...
    result = t.fit(module, dm, space=space, strategy=oneshot)   # validation history, nnictl intermediate results
    if not result.trainer.is_global_zero: return {}
    run.save_weights(...); t.finish(result, data, {...extra meta}, final=metric)   # meta.json, nnictl final result

The lifecycle steps behind it (`begin`, `open_run`, `fit`, `common_meta`) live here too; the options are
`train_options.py`'s, the Lightning Trainer `trainer.py`'s and its callbacks `callbacks.py`'s, the cost `cost.py`'s.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from . import interrupt, threads
from .errors import UserError

# NNI 3.0 workarounds (trial reporting, running a NasExperiment)
from .nni_compat import TrialReporter, in_nni_trial, run_nas_experiment
from .options import replace_options, to_dict
from .rundir import CHECKPOINT, META, RunDir
from .train_options import SCHEDULE, TrainOptions, check_positive, parse_devices


def begin(opts: TrainOptions, kind: str) -> TrainOptions:
    """The options a training command runs with (`RunDir.begin`: with --resume, the run directory's, given options
    checked against them; on DDP ranks > 0, rank 0's), resolved (`TrainOptions.resolve`: the size and every preset
    value written out, as options.json stores them). Call first, before anything is built from the options."""
    if opts.hardware.compile:
        from .trainer import check_compile_backend

        check_compile_backend(opts.hardware.compile)
    if not opts.progress:
        no_library_progress_bars()
    opts = RunDir(opts.out, kind).begin(opts, marker=CHECKPOINT)
    return opts if opts.resume else opts.resolve()  # once, here: a resumed run's stored options are resolved


def no_library_progress_bars() -> None:
    """--no-progress: transformers' bars too ("Loading weights", "Writing model shards"), for the process."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def open_run(opts: TrainOptions, kind: str) -> RunDir:
    """Rank 0, once every option is checked: `RunDir.open` (check/empty/create the directory, store options.json, the
    options `begin` resolved, publish them to the DDP ranks). Other ranks only get the RunDir."""
    return RunDir(opts.out, kind).open(opts, to_dict(opts), marker=CHECKPOINT)


def end_ddp_session() -> None:
    """Let a later DDP `fit` in this process launch ranks of its own (`lvbert run --pretrain --devices N`).

    Lightning's script launcher leaves MASTER_ADDR/MASTER_PORT/LOCAL_RANK/NODE_RANK/WORLD_SIZE in rank 0's
    environment and its process group open until the process exits. A second DDP Trainer would take those as
    ranks started from outside and wait for the first run's ranks, which have exited. Close the group and forget
    the variables, as a fresh process would have them."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    for var in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE"):
        os.environ.pop(var, None)


def prepare_data(opts: TrainOptions, cfg, run: RunDir | None = None):
    """The prepared data of a training run: `--data DIR`, or corpus/tokenizer prepared (cached) for the size."""
    from .data import PreparedData, prepare

    if opts.inputs.data:
        if opts.inputs.corpus or opts.inputs.tokenizer or opts.inputs.max_docs:
            raise UserError("--data gives prepared data: --corpus/--tokenizer/--max-docs do not apply")
        data = PreparedData.load(opts.inputs.data)
        if data.max_length > cfg.max_position:
            raise UserError(f"{data.path} holds {data.max_length}-token sequences; the model's position table has "
                            f"{cfg.max_position}")
        return data
    d = opts.inputs
    return prepare(corpus=d.corpus, size=opts.size, vocab_size=None if d.tokenizer else cfg.vocab_size,
                   max_length=cfg.max_length, tokenizer=d.tokenizer, val_fraction=d.val_fraction, seed=d.data_seed,
                   cache_dir=d.cache_dir, max_docs=d.max_docs)


@dataclass
class FitResult:
    trainer: object
    precision: str
    train_seconds: float  # over every session of the run
    validation: list  # validation records of earlier sessions + this one
    previous: dict  # meta.json of the earlier session (resume), else {}
    earlier: list  # validation records not in `history` (an old checkpoint's run: meta.json's), else []


def fit(run: RunDir, opts: TrainOptions, module, datamodule, *, callbacks=(), history: list | None = None,
        record=None, reporter=None, report=None, space=None, strategy=None) -> FitResult:
    """Train `module` with our Lightning conventions. With `strategy` (an NNI one-shot strategy) the run is
    `NasExperiment(space, Lightning(module, ...), strategy)`; without, a plain `trainer.fit`. Resumes from
    checkpoints/last.ckpt with --resume. With `history`, the one validation-history callback
    (`callbacks.ValidationHistory`: `record`, `reporter`, `report`) fills it; restored from the checkpoint, it holds
    every session's records and time, so a run resumed after kill -9 keeps them."""
    from .callbacks import Compile, ValidationHistory
    from .trainer import build_trainer

    threads.settle(opts.hardware.threads)  # a fair share of the cores unless given (threads.py)
    tracker = ValidationHistory(history, record, reporter, report) if history is not None else None
    backend = opts.hardware.compile
    callbacks = [*([tracker] if tracker else []), *callbacks, *([Compile(backend)] if backend else [])]
    trainer, precision = build_trainer(run.path, opts, callbacks)
    ckpt = run / CHECKPOINT
    if opts.resume and run.has(CHECKPOINT):
        from .safeio import check_checkpoint

        check_checkpoint(ckpt)
    previous = run.read_json(META) if opts.resume and run.has(META) else {}
    start = time.time()
    resume_from = str(ckpt) if opts.resume and run.has(CHECKPOINT) else None  # none: a run stopped before step 1
    with interrupt.listening():  # Ctrl-C: stop after the step, checkpoint kept (interrupt.py)
        if strategy is not None:
            from nni.nas.evaluator.pytorch import Lightning

            evaluator = Lightning(module, trainer, datamodule=datamodule,
                                  fit_kwargs={"ckpt_path": resume_from} if resume_from else None)
            if run.is_rank_zero:
                run_nas_experiment(space, evaluator, strategy, run.path / "nni")
            else:  # a DDP rank > 0 (another node too, on a shared disk): its NNI files stay out of the run directory
                import tempfile
                from pathlib import Path

                with tempfile.TemporaryDirectory(prefix="lvbert-nni-", ignore_cleanup_errors=True) as workdir:
                    run_nas_experiment(space, evaluator, strategy, Path(workdir))
        else:
            trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from)
    session = time.time() - start
    if tracker is not None and tracker.restored:  # the checkpoint carried the earlier sessions' records and time
        seconds, earlier = tracker.seconds_before + session, []
    else:  # a new run, or a checkpoint of an older version: the earlier sessions from meta.json
        seconds, earlier = previous.get("train_seconds", 0.0) + session, previous.get("validation", [])
    return FitResult(trainer, precision, seconds, earlier + list(history or []), previous, earlier)


def common_meta(run: RunDir, opts: TrainOptions, result: FitResult, data) -> dict:
    """The meta.json fields every training run has."""
    import torch

    return {
        "kind": run.kind,
        "run_dir": str(run.path),
        "size": opts.size,
        "seed": opts.seed,
        "steps": result.trainer.global_step,
        "train_seconds": result.train_seconds,
        "validation": result.validation,
        "data": {"path": str(data.path), "settings": data.settings, "stats": data.stats},
        "tokenizer": "tokenizer",
        "options": to_dict(opts),
        "world_size": result.trainer.world_size,
        "precision": result.precision,
        "device_type": result.trainer.strategy.root_device.type,  # with cpu_threads: the cost in core-minutes
        "cpu_threads": torch.get_num_threads(),
        "cpu_threads_decision": threads.decision(),  # why that many (threads.settle): flag, env, share
    }


def apply_tuner_parameters(opts, allowed: dict, what: str):
    """As an nnictl trial, the tuner's parameters (e.g. {"lr": 0.002}) override the command-line options.

    `allowed` maps each tunable option to a converter (None: keep the value as sent); anything else is one clear
    line. Returns a new options value: the parameters applied, and received in its `hpo`."""
    import nni

    params = nni.get_next_parameter() or {}
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise UserError(f"tuner parameter(s) {', '.join(unknown)} are not {what} options; use {', '.join(allowed)}")
    from .options import replace_options

    return replace_options(opts, **{k: allowed[k](v) if allowed[k] else v for k, v in params.items()},
                           hpo=dict(params))


@dataclass
class Training:
    """One training command's run from its options to meta.json (see the module docstring)."""

    opts: TrainOptions
    kind: str
    reporter: TrialReporter | None = None  # as an nnictl trial: where intermediate and final results go
    run: RunDir | None = None
    history: list = field(default_factory=list)  # this session's validation records

    @classmethod
    def begin(cls, opts: TrainOptions, kind: str, tunable: dict | None = None) -> Training:
        """As an nnictl trial, the tuner's parameters (`tunable`: option -> converter) override the options and
        a reporter is made (before NasExperiment swaps NNI's trial channel); then `begin` settles the options
        (--resume, DDP ranks)."""
        reporter = None
        if tunable is not None and in_nni_trial():
            opts = apply_tuner_parameters(opts, tunable, kind)
            reporter = TrialReporter()
        return cls(begin(opts, kind), kind, reporter)

    def update(self, **changes) -> TrainOptions:
        """The run's options with `changes` (a value only the loaded space or supernet settles, e.g. the size):
        a new options value, which the run then goes on with."""
        self.opts = replace_options(self.opts, **changes)
        return self.opts

    def check(self) -> int:
        """Every resolved step/batch/validation/checkpoint number is >= 1 and the global batch splits evenly over
        the devices of every node; returns the batch size per device."""
        o = self.opts
        check_positive(num_nodes=o.hardware.num_nodes, **{k: o.resolved(k) for k in SCHEDULE})
        batch = o.resolved("batch_size")
        _, n = parse_devices(o.hardware.devices, batch)
        nodes = o.hardware.num_nodes
        ranks = n * nodes  # --num-nodes N: the global batch is split over N x devices ranks, not N x batch
        if batch % ranks:
            raise UserError(f"batch size {batch} is not divisible by {ranks} devices ({n} per node x {nodes} "
                            "nodes)")
        return batch // ranks

    def schedule(self) -> dict:
        """The optimisation settings of an `MLMModule` (and its subclasses)."""
        o = self.opts
        return {"lr": o.resolved("lr"), "warmup_steps": o.resolved("warmup_steps"),
                "max_steps": o.resolved("max_steps"), "weight_decay": o.weight_decay}

    def data(self, cfg):
        return prepare_data(self.opts, cfg)

    def open(self, spec, cfg, data) -> RunDir:
        """The run directory opened (`open_run`), its space/config/tokenizer written (rank 0), and every seed set."""
        import pytorch_lightning as pl

        self.run = open_run(self.opts, self.kind)
        if self.run.is_rank_zero:
            self.run.save_static(spec, cfg, data.tokenizer_dir)
        pl.seed_everything(self.opts.seed, workers=True, verbose=False)
        return self.run

    def fit(self, module, datamodule, *, record=None, report=None, callbacks=(), space=None,
            strategy=None) -> FitResult:
        """`fit` with the validation-history callback (`record`/`report`: see callbacks.ValidationHistory), and one
        validation more at the last step when the run did not end on a validation step (`--max-steps` not a multiple
        of `--val-every`, or shorter): every run's meta.json, curve and nnictl result then describe its final
        weights."""
        result = fit(self.run, self.opts, module, datamodule, callbacks=callbacks, history=self.history,
                     record=record, reporter=self.reporter, report=report, space=space, strategy=strategy)
        trainer = result.trainer
        if not any(h["step"] == trainer.global_step for h in result.validation):
            trainer.validate(trainer.lightning_module, datamodule=datamodule, verbose=False)
            result.validation = result.earlier + list(self.history)
        return result

    def finish(self, result: FitResult, data, extra: dict, final=None) -> dict:
        """meta.json (the common fields + `extra`), and `final` to nnictl as the trial's final result."""
        meta = {**common_meta(self.run, self.opts, result, data), **extra}
        self.run.write_json(META, meta)
        if self.reporter is not None and final is not None:
            self.reporter.final(final)
        return meta

