"""The one training entry behind every Lightning training command (supernet, IOT, and later pre-training).

    opts = begin(opts, "supernet")     # resume: the run directory's options; ranks > 0: rank 0's options
    ...                                # build space/model/data from opts
    run = open_run(opts, "supernet")   # rank 0: check + create the directory, store options.json, publish
    result = fit(run, opts, module, datamodule, callbacks=..., space=space, strategy=oneshot)
    run.save_weights(...); run.write_json("meta.json", {**common_meta(run, opts, result, data), ...})

Plus the trainer conventions (atomic last.ckpt, CSV+TensorBoard logs, DDP defaults, progress bar, quiet start-up)
and nnictl trial plumbing.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import ClassVar

# NNI 3.0 workarounds (trial reporting, running a NasExperiment), re-exported for the training commands
from .nni_compat import TrialReporter, in_nni_trial, quiet_nni_logging, run_nas_experiment  # noqa: F401
from .nni_compat import DropMessage
from .options import MAY_CHANGE, launcher_is_rank_zero, to_dict  # noqa: F401  (re-exported)
from .data.split import DEFAULT_VAL_FRACTION as VAL_FRACTION  # default held-out share of documents
from .errors import UserError
from .rundir import CHECKPOINT, META, RunDir

DATA_SEED = 0  # default seed of the fixed validation masking: every run over one corpus scores the same tokens


@dataclass
class DataOptions:
    """Where a run's text comes from (`cliargs.add_data_args` makes the flags)."""

    data: str | None = None  # a prepared data directory (`lvbert data prepare`) instead of corpus/tokenizer
    corpus: list[str] | None = None  # None = embedded corpus
    tokenizer: str | None = None
    cache_dir: str | None = None
    max_docs: int | None = None
    val_fraction: float = VAL_FRACTION
    data_seed: int = DATA_SEED

    def data_options(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(DataOptions)}


@dataclass
class TrainOptions(DataOptions):
    """Options common to the Lightning trainings; None means "the size's preset" (see `resolved`).

    The CLI flags take their defaults from here (`add_training_args`)."""

    PRESETS: ClassVar[dict[str, dict]] = {}  # "tiny" and "paper": defaults of the None-able fields below
    out: str = "runs/run"
    size: str | None = None
    seed: int = 0
    lr: float | None = None
    warmup_steps: int | None = None
    max_steps: int | None = None
    batch_size: int | None = None
    dropout: float | None = None
    weight_decay: float = 0.0
    val_every: int | None = None
    val_batches: int | None = None
    ckpt_every: int | None = None
    accelerator: str = "auto"
    devices: str = "1"
    num_nodes: int = 1
    ddp_strategy: str | None = None
    precision: str | None = None
    num_workers: int = 0
    resume: bool = False
    overwrite: bool = False
    progress: bool = True
    compile: str | None = None  # a torch.compile backend ("inductor", ...) for every layer block; None = eager
    model_summary: bool = True  # Lightning's table of modules at the start (no flag; a study's many runs skip it)
    given: list[str] | None = field(default=None, compare=False)  # options typed on the command line

    def preset(self) -> dict:
        return self.PRESETS["tiny" if self.size == "tiny" else "paper"]

    def stored_presets(self) -> list[str]:
        """The options a new run writes out from the size's preset when not given (`with_presets`)."""
        return [k for k in self.preset() if k not in MAY_CHANGE]

    def resolved(self, key: str):
        value = getattr(self, key)
        return self.preset()[key] if value is None else value


def begin(opts: TrainOptions, kind: str) -> TrainOptions:
    """The options a training command runs with (`RunDir.begin`: with --resume, the run directory's, given options
    checked against them; on DDP ranks > 0, rank 0's). Call first, before anything is built from the options."""
    if opts.compile:
        check_compile_backend(opts.compile)
    if not opts.progress:
        no_library_progress_bars()
    return RunDir(opts.out, kind).begin(opts, marker=CHECKPOINT)


def with_presets(opts: TrainOptions) -> TrainOptions:
    """`opts` with each option left to the size's preset written out (hardware and display options excepted), as
    a new run stores them: its --resume then continues with the values it started with, even under a later
    version whose presets differ."""
    import dataclasses

    return dataclasses.replace(opts, **{k: opts.resolved(k) for k in opts.stored_presets()
                                        if getattr(opts, k, 0) is None})


def no_library_progress_bars() -> None:
    """--no-progress: transformers' bars too ("Loading weights", "Writing model shards"), for the process."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def open_run(opts: TrainOptions, kind: str) -> RunDir:
    """Rank 0, once every option is checked: `RunDir.open` (check/empty/create the directory, store options.json with
    the presets written out for a new run, publish the options to the DDP ranks). Other ranks only get the RunDir."""
    return RunDir(opts.out, kind).open(opts, to_dict(opts if opts.resume else with_presets(opts)), marker=CHECKPOINT)


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

    if opts.data:
        if opts.corpus or opts.tokenizer or opts.max_docs:
            raise UserError("--data gives prepared data: --corpus/--tokenizer/--max-docs do not apply")
        data = PreparedData.load(opts.data)
        if data.max_length > cfg.max_position:
            raise UserError(f"{data.path} holds {data.max_length}-token sequences; the model's position table has "
                            f"{cfg.max_position}")
        return data
    return prepare(corpus=opts.corpus, size=opts.size, vocab_size=None if opts.tokenizer else cfg.vocab_size,
                   max_length=cfg.max_length, tokenizer=opts.tokenizer, val_fraction=opts.val_fraction,
                   seed=opts.data_seed, cache_dir=opts.cache_dir, max_docs=opts.max_docs)


@dataclass
class FitResult:
    trainer: object
    precision: str
    train_seconds: float  # over every session of the run
    validation: list  # validation records of earlier sessions + this one
    previous: dict  # meta.json of the earlier session (resume), else {}


def fit(run: RunDir, opts: TrainOptions, module, datamodule, *, callbacks=(), history: list | None = None,
        space=None, strategy=None) -> FitResult:
    """Train `module` with our Lightning conventions. With `strategy` (an NNI one-shot strategy) the run is
    `NasExperiment(space, Lightning(module, ...), strategy)`; without, a plain `trainer.fit`. Resumes from
    checkpoints/last.ckpt with --resume; `history` collects this session's validation records."""
    devices, n_dev = parse_devices(opts.devices, opts.resolved("batch_size"))
    trainer, precision = build_trainer(
        run.path, max_steps=opts.resolved("max_steps"), devices=devices, n_devices=n_dev, num_nodes=opts.num_nodes,
        accelerator=opts.accelerator, strategy=opts.ddp_strategy, precision=opts.precision,
        val_every=opts.resolved("val_every"), val_batches=opts.resolved("val_batches"),
        ckpt_every=opts.resolved("ckpt_every"), progress=opts.progress, model_summary=opts.model_summary,
        callbacks=[*callbacks, *([compile_callback(opts.compile)] if opts.compile else [])])
    ckpt = run / CHECKPOINT
    if opts.resume:
        from .safeio import check_checkpoint

        check_checkpoint(ckpt)
    previous = run.read_json(META) if opts.resume and run.has(META) else {}
    start = time.time()
    if strategy is not None:
        from nni.nas.evaluator.pytorch import Lightning

        evaluator = Lightning(module, trainer, datamodule=datamodule,
                              fit_kwargs={"ckpt_path": str(ckpt)} if opts.resume else None)
        run_nas_experiment(space, evaluator, strategy, run.path / "nni")
    else:
        trainer.fit(module, datamodule=datamodule, ckpt_path=str(ckpt) if opts.resume else None)
    return FitResult(trainer, precision, previous.get("train_seconds", 0.0) + (time.time() - start),
                     previous.get("validation", []) + list(history or []), previous)


def adamw(groups: list[dict], **kwargs):
    """torch's AdamW over parameter `groups`, fused (one kernel for every parameter) when all are on a GPU; torch's
    default elsewhere. Every training's optimizer (supernet/IOT/pre-training, fine-tuning) is made here."""
    import torch

    fused = all(p.is_cuda for g in groups for p in g["params"]) or None
    return torch.optim.AdamW(groups, fused=fused, **kwargs)


def check_compile_backend(backend: str) -> None:
    import torch._dynamo

    known = torch._dynamo.list_backends(exclude_tags=())
    if backend not in known:
        raise UserError(f"--compile {backend}: not a torch.compile backend; choose one of {', '.join(known)}")


def compile_layers(module, backend: str = "inductor") -> int:
    """torch.compile every layer block (DC/SA/FF/GLU) of `module` in place (`nn.Module.compile`: parameter names,
    checkpoints and exports stay as they are). One compiled graph per block fuses its projections' epilogues,
    dropout, residual and LayerNorm; a supernet's path sampling stays eager between the blocks, so a new path
    needs no recompilation. Returns the number of blocks compiled."""
    from .layers import LAYER_CLASSES

    names = {cls.__name__ for cls in LAYER_CLASSES.values()}  # by name: a trust_remote_code copy has its own classes
    blocks = [m for m in module.modules() if type(m).__name__ in names]
    for m in blocks:
        m.compile(backend=backend)
    return len(blocks)


def compile_callback(backend: str):
    """At fit start, the module Lightning trains compiles itself (`compile_for_training(backend)`, which returns
    what it compiled: pre-training compiles its whole objective), or else its layer blocks are compiled: for a
    supernet that module is NNI's one-shot module, whose path-sampling layers hold the very candidate blocks
    (compiling before NNI builds it could miss blocks it copies)."""
    import pytorch_lightning as pl

    class Compile(pl.Callback):
        def on_fit_start(self, trainer, pl_module):
            own = getattr(pl_module, "compile_for_training", None)
            what = own(backend) if own else f"{compile_layers(pl_module, backend)} layer blocks compiled"
            if trainer.is_global_zero:
                print(f"--compile {backend}: {what}", file=sys.stderr, flush=True)

    return Compile()


def common_meta(run: RunDir, opts: TrainOptions, result: FitResult, data) -> dict:
    """The meta.json fields every training run has."""
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
    }


def apply_tuner_parameters(opts, allowed: dict, what: str) -> dict:
    """As an nnictl trial, the tuner's parameters (e.g. {"lr": 0.002}) override the command-line options.

    `allowed` maps each tunable option to a converter (None: keep the value as sent); anything else is one clear
    line. Returns the parameters received."""
    import nni

    params = nni.get_next_parameter() or {}
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise UserError(f"tuner parameter(s) {', '.join(unknown)} are not {what} options; use {', '.join(allowed)}")
    for k, v in params.items():
        setattr(opts, k, allowed[k](v) if allowed[k] else v)
    return dict(params)


def parse_devices(devices: str | int, batch_size: int) -> tuple[int | str, int]:
    """(devices for Lightning, device count); the global batch must split evenly over devices."""
    parsed = int(devices) if str(devices).isdigit() else devices
    n = parsed if isinstance(parsed, int) else 1
    if batch_size % n:
        raise UserError(f"batch size {batch_size} is not divisible by {n} devices")
    return parsed, n


def check_positive(**values) -> None:
    for name, v in values.items():
        if v < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {v}")


def atomic_checkpoint_callback(run_dir: Path, every: int):
    import pytorch_lightning as pl

    class AtomicLastCheckpoint(pl.Callback):
        """checkpoints/last.ckpt every N steps, written to a temp file then renamed: a kill -9 never leaves a
        truncated checkpoint behind."""

        def _save(self, trainer):
            final = run_dir / "checkpoints" / "last.ckpt"
            tmp = final.with_suffix(".ckpt.tmp")
            trainer.save_checkpoint(tmp, weights_only=False)  # collective: every rank calls, rank 0 writes
            if trainer.is_global_zero:
                os.replace(tmp, final)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step % every == 0:
                self._save(trainer)

        def on_train_end(self, trainer, pl_module):
            self._save(trainer)

    return AtomicLastCheckpoint()


def build_trainer(run_dir: Path, *, max_steps: int, devices, n_devices: int, accelerator: str, strategy: str | None,
                  precision: str | None, val_every: int, val_batches: int, ckpt_every: int, callbacks: list,
                  progress: bool, num_nodes: int = 1, model_summary: bool = True):
    """NNI's traced Lightning Trainer with our conventions; returns (trainer, precision)."""
    import torch
    from nni.nas.evaluator.pytorch import Trainer
    from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger

    quiet_lightning()
    precision = precision or ("bf16-mixed" if torch.cuda.is_available() else "32-true")
    trainer = Trainer(
        max_steps=max_steps, accelerator=accelerator, devices=devices, num_nodes=num_nodes, precision=precision,
        strategy=strategy or ("ddp_find_unused_parameters_true" if n_devices * num_nodes > 1 else "auto"),
        val_check_interval=val_every, check_val_every_n_epoch=None, limit_val_batches=val_batches,
        num_sanity_val_steps=0,
        logger=[CSVLogger(run_dir / "logs", name="", version=_free_name(run_dir / "logs", "csv")),
                TensorBoardLogger(run_dir / "logs", name="", version="tensorboard")],
        callbacks=[atomic_checkpoint_callback(run_dir, ckpt_every), *([progress_bar()] if progress else []),
                   *([module_summary()] if model_summary else []), *callbacks], enable_checkpointing=False,
        enable_progress_bar=progress, enable_model_summary=False,  # ours, module_summary(), when model_summary
        log_every_n_steps=10,
        use_distributed_sampler=False,  # MLMDataModule shards each global batch over ranks itself
    )
    return trainer, precision


LITLOGGER_TIP = ("💡 Tip: For seamless cloud logging and experiment tracking, try installing "
                 "[litlogger](https://pypi.org/project/litlogger/) to enable LitLogger, which logs metrics and "
                 "artifacts automatically to the Lightning Experiments platform.")
_DROP_LITLOGGER_TIP = DropMessage(LITLOGGER_TIP)


def quiet_lightning() -> None:
    """Two lines Lightning 2.6 prints at every training start that say nothing about the run: its advertisement for
    LitLogger (logged when no LitLogger is among the loggers; only that message is dropped), and torch's
    FutureWarning that `LeafSpec` is deprecated, raised because Lightning's utilities/_pytree.py still builds one
    (torch 2.13 with Lightning 2.6.6; drop the filter once a Lightning pin no longer does)."""
    import logging
    import warnings

    logging.getLogger("pytorch_lightning.utilities.rank_zero").addFilter(_DROP_LITLOGGER_TIP)  # added once
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                            category=FutureWarning)


def progress_bar():
    """Lightning's own bar (rich when rich is installed, else tqdm: Lightning's choice) for our step-based runs,
    without two misleading items: 'v_num', the logger's version (here the fixed 'tensorboard' folder, which the
    bar cuts to 'oard'), and the rich bar's epoch total: Lightning 2.6 prints max_epochs - 1 after the epoch, i.e.
    'Epoch 0/-2' when max_steps ends the run (max_epochs=-1; Lightning issue #21925, fixed upstream by PR #21924:
    drop `_get_train_description` below once a pinned Lightning has that fix)."""
    import importlib.util

    from pytorch_lightning.callbacks import RichProgressBar, TQDMProgressBar

    class NoVersion:
        def get_metrics(self, trainer, pl_module):
            items = super().get_metrics(trainer, pl_module)
            items.pop("v_num", None)
            return items

    class StepTQDM(NoVersion, TQDMProgressBar):
        pass

    class StepRich(NoVersion, RichProgressBar):
        def _get_train_description(self, current_epoch: int) -> str:
            if (self.trainer.max_epochs or 0) >= 0:
                return super()._get_train_description(current_epoch)
            return f"{f'Epoch {current_epoch}':{len(self.validation_description)}}"  # padded as Lightning pads

    return StepRich() if importlib.util.find_spec("rich") else StepTQDM()


def module_summary():
    """Lightning's table of modules without its FLOPs column and "Total Flops" line: Lightning counts FLOPs only by
    running the module's `example_input_array`, which none of ours has (a supernet's forward depends on the sampled
    path), so both would say 0. Lightning's plain table otherwise (its own formatter), logged as Lightning logs it."""
    from pytorch_lightning.callbacks import ModelSummary
    from pytorch_lightning.utilities.model_summary.model_summary import _format_summary_table

    class NoFlopsSummary(ModelSummary):
        def summarize(self, summary_data, total_parameters, trainable_parameters, model_size, total_training_modes,
                      total_flops, **kwargs):
            columns = [c for c in summary_data if c[0] != "FLOPs" or total_flops]
            table = _format_summary_table(total_parameters, trainable_parameters, model_size, total_training_modes,
                                          total_flops, *columns)
            if not total_flops:
                table = table.rsplit("\n", 1)[0]  # the "0 Total Flops" line
            import logging

            logging.getLogger("pytorch_lightning.callbacks.model_summary").info("\n" + table)

    return NoFlopsSummary()


def _free_name(parent: Path, base: str) -> str:
    """csv, then csv-1, csv-2... for resumed sessions: Lightning's CSVLogger would delete an existing metrics.csv."""
    name, i = base, 0
    while (parent / name / "metrics.csv").exists():
        i += 1
        name = f"{base}-{i}"
    return name


def state_digest(model) -> str:
    import hashlib

    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
