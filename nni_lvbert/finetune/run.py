"""`lvbert finetune` / `lvbert glue`: one Lightning run per task × seed, then one results table.

    OUT/options.json                  the options (what --resume continues with)
    OUT/<task>/seed<k>/               a training run directory (nni_lvbert.training conventions):
        options.json, checkpoints/last.ckpt (while running), logs/, meta.json (when finished),
        model/ (--save-model: the fine-tuned model, `from_pretrained` loads it with its head and labels)
    OUT/results.json, results.md      median over seeds and every seed's value, per task (+ GLUE score)
    OUT/dev_curve.png                 dev score per epoch, one line per seed, one panel per task

Each task kind trains through the same loop (`run_one`) with its task adapter: module.SequenceAdapter (GLUE,
labelled files), qa_module.QAAdapter (SQuAD, `--task squad|squad_v2`).

Everything the input could get wrong (task, files, columns, labels, model, tokenizer, lengths) is checked before
OUT is created. `--resume` skips finished task×seed runs (meta.json) and continues an interrupted one from its
checkpoint with the very batches an uninterrupted run would see.
"""
from __future__ import annotations

import dataclasses
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from .. import layout
from ..atomic import write_json
from ..errors import UserError
from ..options import FlatOptions, OutputOptions, flat_group, opt, to_dict
from ..ranks import launcher_is_rank_zero
from ..rundir import RunDir
from ..train_options import HardwareOptions, TrainOptions, parse_devices
from ..trainer import check_compile_backend
from ..training import fit, no_library_progress_bars
from . import metrics as M
from .recipe import DECAY, default_lr
from .tasks import TaskData, load_task

KIND = "finetune"
MODEL = "model"  # OUT/<task>/seed<k>/model/ with --save-model


YOUR_FILES = "your files (--task NAME with --data)"
QA = "extractive QA (squad, squad_v2)"


@dataclass(frozen=True)
class FinetuneOptions(FlatOptions, OutputOptions):
    GROUP: ClassVar[str] = "recipe (LV-BERT Table 6 / ELECTRA defaults)"

    hardware: HardwareOptions = flat_group(HardwareOptions)  # first: the flags' order (after --out ...)

    out: str = layout.FINETUNE
    model: str = opt("", "a model directory (lvbert export / pretrain, or any BERT-style transformers directory)",
                     metavar="DIR", group="")
    tasks: list[str] = opt(help="cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli (GLUE files), squad, squad_v2 "
                                "(SQuAD JSON, or the hub without --data), glue:NAME (hub), sotu-era (embedded), or "
                                "your name with --text-column/--label-column; several: one after the other",
                           default_factory=list, flag="--task", metavar="TASK", group="")
    data: str | None = opt(None, "GLUE folder, or a folder with train.*/dev.* (csv, tsv, jsonl, parquet), or a train "
                                 "file; SQuAD: train-v1.1.json (dev-v1.1.json beside it) or their folder (v2.0 "
                                 "likewise)", metavar="PATH", group="")
    dev_data: str | None = opt(None, "dev file when --data is a train file", metavar="FILE", group=YOUR_FILES)
    text_column: str | None = opt(None, "the column of the (first) text", group=YOUR_FILES)
    text_pair_column: str | None = opt(None, "the column of the second text, if any", group=YOUR_FILES)
    label_column: str | None = opt(None, "the label column", group=YOUR_FILES)
    task_type: str = opt("classification", "what the labels are", choices=["classification", "regression"],
                         group=YOUR_FILES)
    positive_label: str | None = opt(None, "two classes: the label F1 counts as positive (default: the second "
                                           "label in sorted order; the summary names it)", metavar="LABEL",
                                     group=YOUR_FILES)
    seeds: list[int] = opt(help="one run per seed; median reported (default 0; the paper uses 10)",
                           default_factory=lambda: [0], group="")
    lr: float | None = opt(None, "peak lr (default 3e-4; hidden size >= 768: 1e-4, 2e-4 on SQuAD)")
    epochs: float | None = opt(None, "default: 10 for RTE and STS-B, 2 for SQuAD, 3 otherwise")
    batch_size: int = opt(32, "global batch size")
    max_length: int = opt(128, "sequence length (pairs truncated)")
    warmup_fraction: float = opt(0.1, "share of the steps warming up linearly")
    weight_decay: float = opt(0.01, "AdamW weight decay")
    layer_decay: float = opt(DECAY, "layer-wise lr decay per block of two slots (1 = off)")
    adam_eps: float = opt(1e-6, "AdamW epsilon")
    max_steps: int | None = opt(None, "cap on training steps per run (quick runs)")
    max_train_examples: int | None = opt(None, "use the first N training examples")
    ckpt_every: int | None = opt(None, "checkpoint every N steps (default: per epoch, at most 500)")
    max_query_length: int = opt(64, "question tokens kept", group=QA)
    doc_stride: int = opt(128, "tokens between window starts", group=QA)
    n_best: int = opt(20, "start/end candidates per window", group=QA)
    max_answer_length: int = opt(30, "answer tokens at most", group=QA)
    null_threshold: float = opt(0.0, "v2.0: answer nothing when null score - best span score > this", group=QA)
    save_model: bool = opt(False, "keep each fine-tuned model: OUT/<task>/seed<k>/model/ (loads with "
                                  "from_pretrained)", group="")
    given: list[str] | None = field(default=None, compare=False)


# FinetuneOptions `lvbert glue` does not take (it finds the GLUE tasks' files and formats itself)
NOT_GLUE = ("dev_data", "text_column", "text_pair_column", "label_column", "task_type", "positive_label",
            "max_query_length",
            "doc_stride", "n_best", "max_answer_length", "null_threshold")


@dataclass(frozen=True)
class RunOptions(TrainOptions):
    """What `training.fit` reads for one task × seed run (every value given, no presets)."""


def check_model_weights(path: Path) -> None:
    """Every safetensors file of a model directory holds the bytes its header announces (safeio's check), so a
    damaged or truncated weights file is one line here instead of safetensors' traceback inside from_pretrained."""
    from ..safeio import check_safetensors

    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise UserError(f"--model {path}: no weights (*.safetensors) in it; make one with `lvbert export` or "
                        "`lvbert pretrain`")
    for f in files:
        check_safetensors(f, fix="write the model directory again (`lvbert export` / `lvbert pretrain`)")


def load_model_dir(path: str):
    """(config, tokenizer) of a model directory, checked against each other; one line when unusable."""
    from transformers import AutoConfig, AutoTokenizer

    import nni_lvbert  # noqa: F401  (registers the LV-BERT classes with the Auto factories)

    p = Path(path)
    if not (p / "config.json").is_file():
        from ..pretrain.hf_output import not_a_model_dir

        raise UserError(not_a_model_dir(p))
    check_model_weights(p)
    try:
        config = AutoConfig.from_pretrained(str(p))
        tok = AutoTokenizer.from_pretrained(str(p))
    except Exception as exc:  # noqa: BLE001
        raise UserError(f"--model {p}: cannot load its config/tokenizer ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0][:120] if str(exc) else ''})") from None
    if len(tok) != config.vocab_size:
        raise UserError(f"--model {p}: its tokenizer has {len(tok)} tokens but the model a vocabulary of "
                        f"{config.vocab_size} (a tokenizer of another model?)")
    if tok.pad_token_id is None or tok.pad_token_id != getattr(config, "pad_token_id", tok.pad_token_id):
        raise UserError(f"--model {p}: the tokenizer pads with id {tok.pad_token_id}, the model with "
                        f"{config.pad_token_id}")
    return config, tok


def check(opts: FinetuneOptions):
    """Everything that can be checked before writing: returns (config, tokenizer, [TaskData])."""
    if not opts.model:
        raise UserError("no model given (--model DIR)")
    if not opts.tasks:
        raise UserError("no task given (--task)")
    if len(set(opts.seeds)) != len(opts.seeds) or not opts.seeds:
        raise UserError(f"--seeds must be distinct, got {' '.join(map(str, opts.seeds))}")
    for name in ("batch_size", "max_length", "max_query_length", "doc_stride", "n_best", "max_answer_length"):
        if getattr(opts, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")
    if opts.task_type not in ("classification", "regression"):
        raise UserError(f"--task-type must be classification or regression, got {opts.task_type}")
    if opts.hardware.compile:
        check_compile_backend(opts.hardware.compile)
    config, tok = load_model_dir(opts.model)
    positions = getattr(config, "max_position_embeddings", None)
    if positions is not None and opts.max_length > positions:
        raise UserError(f"--max-length {opts.max_length} exceeds the model's position table ({positions}); "
                        f"use --max-length {positions} or less")
    tasks = [load_task(t, opts.data, opts.dev_data, opts.text_column, opts.text_pair_column, opts.label_column,
                       opts.task_type, opts.positive_label) for t in opts.tasks]
    if any(t.kind == "qa" for t in tasks):
        if not getattr(tok, "is_fast", False):
            raise UserError(f"--model {opts.model}: extractive QA needs a fast tokenizer (tokenizer.json)")
        if opts.max_length < opts.max_query_length + 4:
            raise UserError(f"--max-length {opts.max_length} leaves no room for the context after a question of up "
                            f"to {opts.max_query_length} tokens; raise it or lower --max-query-length")
    return config, tok, tasks


def finetune(opts: FinetuneOptions) -> dict:
    """Every task x seed run, then the reports. Under DDP (--devices N) Lightning's launcher re-runs the command for
    ranks > 0: they adopt rank 0's options, join each run's training and leave every file to rank 0."""
    rank_zero = launcher_is_rank_zero()
    run = RunDir(opts.out, KIND, "output directory")
    opts = run.begin(opts)
    if not opts.progress:
        no_library_progress_bars()
    config, tok, tasks = check(opts)
    if rank_zero:
        parse_devices(opts.hardware.devices, opts.batch_size)  # the global batch must split evenly over devices
    out = run.open(opts).path
    results = {}
    for k, task in enumerate(tasks):
        per_seed = {}
        for seed in opts.seeds:
            label = f"[{task.name} {k + 1}/{len(tasks)}, seed {seed}]"
            per_seed[seed] = run_one(opts, config, tok, task, seed, out / task.name / f"seed{seed}", label)
        results[task.name] = {"metrics": list(task.metrics), "score": task.score_text(), "dev_sets": list(task.dev),
                              "num_labels": task.num_labels, "labels": task.label_names,
                              "train_examples": len(task.train), "skipped_lines": task.skipped,
                              **M.summarize(per_seed),
                              "curves": {str(s): per_seed[s]["history"] for s in per_seed}}
    if not rank_zero:
        return {}
    from .report import write_reports

    return write_reports(out, opts, results)


def run_options(opts: FinetuneOptions, path: Path, seed: int, task, steps_per_epoch: int, lr: float,
                resume: bool) -> tuple[RunOptions, int, float]:
    """(the Lightning run's options, total steps, epochs) of one task x seed run: the task's epochs (or --epochs)
    capped by --max-steps, validation once per epoch; written to its options.json."""
    epochs = opts.epochs if opts.epochs is not None else task.epochs
    total = max(1, round(epochs * steps_per_epoch))
    if opts.max_steps:
        total = min(total, opts.max_steps)
    ropts = RunOptions(out=str(path), seed=seed, lr=opts.lr or lr, warmup_steps=0,
                       max_steps=total, batch_size=opts.batch_size, dropout=0.0, weight_decay=opts.weight_decay,
                       val_every=min(steps_per_epoch, total), val_batches=1.0,
                       ckpt_every=opts.ckpt_every or min(steps_per_epoch, 500),
                       hardware=dataclasses.replace(opts.hardware, devices=str(opts.hardware.devices)), resume=resume,
                       progress=opts.progress)
    if launcher_is_rank_zero():  # DDP: rank 0 writes the run directory
        path.mkdir(parents=True, exist_ok=True)
        write_json(path / "options.json", to_dict(ropts))
    return ropts, total, epochs


def run_one(opts: FinetuneOptions, config, tok, task: TaskData, seed: int, path: Path, label: str,
            model=None) -> dict:
    """One task x seed run in `path`; `model` (a sequence-classification model to train in place) instead of
    loading `opts.model` (the fine-tuning benchmark trains a transformers BERT twin through this very loop)."""
    import pytorch_lightning as pl
    from transformers.utils import logging as hf_logging

    from .module import SequenceAdapter
    from .qa_module import QAAdapter

    run = RunDir(path, "finetune")
    state = run.state()
    if state == "done":
        print(f"{label} finished earlier: skipped", file=sys.stderr)
        return run.read_json("meta.json")
    resume = state == "resume"
    if not resume and path.exists() and launcher_is_rank_zero():
        shutil.rmtree(path)  # interrupted before its first checkpoint: start it again
    adapter = QAAdapter() if task.kind == "qa" else SequenceAdapter()
    dm, counts, what = adapter.data(opts, tok, task, seed)
    spe = dm.steps_per_epoch
    ropts, total, epochs = run_options(opts, path, seed, task, spe, default_lr(config, qa=adapter.qa), resume)
    print(f"{label} {what}, {total} steps ({spe}/epoch), lr {ropts.lr:g}" + (" (resumed)" if resume else ""),
          file=sys.stderr)

    pl.seed_everything(seed, workers=True, verbose=False)
    if model is None:
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # "newly initialized classifier / qa_outputs" is expected here
        try:
            model = adapter.load_model(opts.model, task)
        finally:
            hf_logging.set_verbosity(verbosity)
    module = adapter.module(model, task, dm, lr=ropts.lr, total_steps=total, warmup_fraction=opts.warmup_fraction,
                            weight_decay=opts.weight_decay, layer_decay=opts.layer_decay, adam_eps=opts.adam_eps,
                            steps_per_epoch=spe, seed=seed)
    # the dev curve: every validation's record, kept in the checkpoints (a resumed run has the earlier ones)
    history: list[dict] = []
    result = fit(run, ropts, module, dm, history=history, record=lambda trainer, m: m.take_record())
    if not history or history[-1]["step"] != total:  # the last step was not a validation step
        result.trainer.validate(module, datamodule=dm, verbose=False)
    final = history[-1]
    meta = {"task": task.name, "seed": seed, "steps": total, "epochs": epochs, "steps_per_epoch": spe,
            "train_seconds": result.train_seconds, **counts,
            "examples_per_second": total * opts.batch_size / max(result.train_seconds, 1e-9),
            "score": final["score"], "dev": final["dev"], "history": history, "world_size": result.trainer.world_size,
            "options": to_dict(ropts)}
    return finish_run(run, opts, model, tok, meta, label)


def finish_run(run: RunDir, opts: FinetuneOptions, model, tok, meta: dict, label: str) -> dict:
    """The end of a task x seed run: the fine-tuned model (--save-model), then meta.json (marks it finished);
    written by DDP rank 0 only."""
    if not launcher_is_rank_zero():
        return meta
    if opts.save_model:
        meta["model"] = str(save_finetuned(model, tok, opts.model, run / MODEL, meta))
    run.write_json("meta.json", meta)
    (run / "checkpoints" / "last.ckpt").unlink(missing_ok=True)  # finished: meta.json marks it; free the space
    print(f"{label} dev score {meta['score']:.2f} "
          + " ".join(f"{d}/{k} {v:.2f}" for d, ms in meta["dev"].items() for k, v in ms.items()), file=sys.stderr)
    return meta


def save_finetuned(model, tok, source: str, out: Path, meta: dict) -> Path:
    """The fine-tuned model as a model directory `from_pretrained` loads (with its head, labels and tokenizer):
    LV-BERT models through `hf.save_hf_model` (bundled code included), others through `save_pretrained`."""
    from ..hf.modeling_lvbert import LVBertPreTrainedModel

    model.eval()
    provenance = {"source": "finetune", "base_model": str(Path(source).resolve()), "task": meta["task"],
                  "seed": meta["seed"], "steps": meta["steps"], "dev_score": meta["score"]}
    if isinstance(model, LVBertPreTrainedModel):
        from ..hf import save_hf_model

        return save_hf_model(model, tokenizer_dir=source, out_dir=out, overwrite=True, provenance=provenance)
    from ..atomic import atomic_directory

    with atomic_directory(out) as tmp:
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        write_json(tmp / "finetune.json", provenance)
    return out
