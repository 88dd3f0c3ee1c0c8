"""Command-line options shared by the commands, with their defaults taken from the options dataclasses.

One spelling per meaning: `--out` is every command's output directory (`--run-dir` is its old spelling),
`--ddp-strategy` the Lightning strategy and `--search` the search strategies (both once spelled `--strategy`).
Old spellings still work for one release and print a deprecation note.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from .training import DATA_SEED, VAL_FRACTION, TrainOptions

_DEFAULTS = TrainOptions()


class DeprecatedAlias(argparse.Action):
    """Stores like the wrapped action but notes on stderr when the old spelling (`old`) was used."""

    def __init__(self, option_strings, dest, old: str, new: str, store_const=None, **kwargs):
        self.old, self.new, self.store_const = old, new, store_const
        if store_const is not None:
            kwargs["nargs"] = 0
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string == self.old:
            print(f"note: {self.old} is deprecated; use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, self.store_const if self.store_const is not None else values)


def add_out_arg(p, default: str, help_: str = "output directory") -> None:
    p.add_argument("--out", "--run-dir", dest="out", default=default, action=DeprecatedAlias, old="--run-dir",
                   new="--out", metavar="DIR", help=f"{help_} (default {default})")


def add_data_args(p, scratch: str = "") -> None:
    """Where the training text comes from: a prepared directory, or a corpus (+ tokenizer) prepared and cached."""
    p.add_argument("--data", default=None, metavar="DIR", help="a prepared data directory (`lvbert data prepare`)")
    p.add_argument("--corpus", nargs="+", default=None,
                   help=f"{scratch}text/jsonl/parquet files, folder or glob, or a Hugging Face hub dataset "
                        "NAME[:CONFIG] (hf:NAME forces the hub; online only) (default: embedded corpus)")
    p.add_argument("--tokenizer", default=None, help=f"{scratch}existing tokenizer directory or vocab.txt "
                                                     "(default: train one)")
    p.add_argument("--cache-dir", default=None, help="data cache (default: $LVBERT_CACHE or ~/.cache/nni-lvbert)")
    p.add_argument("--max-docs", type=int, default=None, help=f"{scratch}use only the first N documents (quick runs)")
    p.add_argument("--val-fraction", type=float, default=VAL_FRACTION,
                   help=f"{scratch}held-out share of documents (default {VAL_FRACTION})")
    p.add_argument("--data-seed", type=int, default=DATA_SEED,
                   help=f"seed of the fixed validation masking (default {DATA_SEED}; keep it to compare runs)")


def add_training_args(t, title: str, dropout_help: str | None = None) -> None:
    """Optimisation, hardware and resume options shared by the Lightning trainings (supernet, IOT, ...)."""
    g = t.add_argument_group(title)
    g.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the size's preset)")
    g.add_argument("--warmup-steps", type=int, default=None, help="linear warm-up steps (default: the size's preset)")
    g.add_argument("--max-steps", type=int, default=None, help="training steps (default: the size's preset)")
    g.add_argument("--batch-size", type=int, default=None, help="global batch size (split over devices)")
    g.add_argument("--dropout", type=float, default=None, help=dropout_help or "dropout (default: the size's preset)")
    g.add_argument("--weight-decay", type=float, default=_DEFAULTS.weight_decay,
                   help=f"AdamW weight decay, not on biases and LayerNorm (default {_DEFAULTS.weight_decay:g})")
    g.add_argument("--val-every", type=int, default=None, help="validate every N steps")
    g.add_argument("--val-batches", type=int, default=None, help="validation batches per check")
    g.add_argument("--ckpt-every", type=int, default=None, help="write checkpoints/last.ckpt every N steps")
    add_hardware_args(t)
    add_resume_args(t, "continue from checkpoints/last.ckpt with the run directory's options")
    t.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    add_json_arg(t)


def add_hardware_args(t) -> None:
    """Where a Lightning training runs (every training command: supernet, IOT, pretrain, finetune/glue)."""
    h = t.add_argument_group("hardware (Lightning; may change when resuming)")
    h.add_argument("--accelerator", default=_DEFAULTS.accelerator, help="cpu | gpu | auto")
    h.add_argument("--devices", default=_DEFAULTS.devices, help="devices per node (DDP when > 1; the global batch "
                                                                "is split over them)")
    h.add_argument("--num-nodes", type=int, default=_DEFAULTS.num_nodes, help="nodes (torchrun / SLURM)")
    h.add_argument("--ddp-strategy", "--strategy", dest="ddp_strategy", default=None, action=DeprecatedAlias,
                   old="--strategy", new="--ddp-strategy",
                   help="Lightning strategy (default ddp_find_unused_parameters_true with more than one device)")
    h.add_argument("--precision", default=None, help="32-true | bf16-mixed (default bf16-mixed on GPU)")
    h.add_argument("--num-workers", type=int, default=_DEFAULTS.num_workers,
                   help=f"data-loader worker processes (default {_DEFAULTS.num_workers})")
    add_compile_arg(h)


def add_compile_arg(g) -> None:
    g.add_argument("--compile", nargs="?", const="inductor", default=None, metavar="BACKEND",
                   help="torch.compile for training (backend: inductor when not named); opt-in, for GPUs: "
                        "pre-training compiles its whole objective (CUDA graphs on a GPU), other training each "
                        "layer block")


def add_resume_args(p, resume_help: str) -> None:
    r = p.add_mutually_exclusive_group()
    r.add_argument("--resume", action="store_true", help=resume_help)
    r.add_argument("--overwrite", action="store_true", help="replace a non-empty output directory")


def add_json_arg(p) -> None:
    """Every command that prints a result takes --json; its function returns the result as a dict (cli.main prints
    it with `print_result`)."""
    p.add_argument("--json", action="store_true", help="print the result as one JSON object (default: one readable "
                                                       "line per field)")


def _shown(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
        return " ".join(_shown(v) for v in value)
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value)
    return str(value)


def print_result(result: dict, as_json: bool) -> None:
    """A command's result on stdout: with --json one JSON object on one line (nothing else is printed to stdout by
    our code), else one aligned `field  value` line per field."""
    if as_json:
        print(json.dumps(result))
        return
    width = max((len(k) for k in result), default=0)
    for key, value in result.items():
        print(f"{key:<{width}}  {_shown(value)}")


def run_training(args, options_cls, train, summary) -> dict:
    """A training command: its options from the command line, the run, and `summary(meta)` as its result (nothing
    on a DDP rank > 0: rank 0 reports)."""
    meta = train(options_from_args(options_cls, args))
    return summary(meta) if meta else {}


def options_from_args(cls, args, **extra):
    """`cls` (an options dataclass) from parsed args: every field with a same-named argument, plus `given` = the
    fields typed on the command line (what a resumed run checks against its stored options)."""
    fields = {f.name for f in dataclasses.fields(cls)}
    values, given = {}, []
    for name, value in vars(args).items():
        if name in fields and name != "given":
            values[name] = value
            if name in getattr(args, "given", ()):
                given.append(name)
    values.update(extra)
    if "given" in fields:
        values["given"] = sorted(given)
    return cls(**values)
