"""The options of every Lightning training command (supernet, IOT, pre-training, fine-tuning): where the data comes
from (`DataOptions`), where it runs (`HardwareOptions`), and the optimisation with its size presets (`TrainOptions`,
presets in `presets.py`). Pure Python: the command line is built from these before anything heavy is imported.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from .data.split import DEFAULT_VAL_FRACTION as VAL_FRACTION  # default held-out share of documents
from .errors import UserError
from .options import MAY_CHANGE, FlatOptions, OutputOptions, flag, flat_group, opt
from .threads import HELP as THREADS_HELP

DATA_SEED = 0  # default seed of the fixed validation masking: every run over one corpus scores the same tokens


@dataclass(frozen=True)
class DataOptions:
    """Where a run's text comes from: a prepared directory, or a corpus (+ tokenizer) prepared and cached."""

    GROUP: ClassVar[str] = "data"

    data: str | None = opt(None, "a prepared data directory (`lvbert data prepare`)", metavar="DIR")
    corpus: list[str] | None = opt(None, "text/jsonl/parquet files, folder or glob, or a Hugging Face hub dataset "
                                         "NAME[:CONFIG] (hf:NAME forces the hub; online only) (default: embedded "
                                         "corpus)")
    tokenizer: str | None = opt(None, "existing tokenizer directory or vocab.txt (default: train one)")
    cache_dir: str | None = opt(None, "data cache (default: $LVBERT_CACHE or ~/.cache/nni-lvbert)")
    max_docs: int | None = opt(None, "use only the first N documents (quick runs)")
    val_fraction: float = opt(VAL_FRACTION, "held-out share of documents")
    data_seed: int = opt(DATA_SEED, "seed of the fixed validation masking (keep it to compare runs)")


@dataclass(frozen=True)
class HardwareOptions:
    """Where a Lightning training runs (supernet, IOT, pre-training, fine-tuning); may change between sessions."""

    GROUP: ClassVar[str] = "hardware (Lightning; may change when resuming)"

    accelerator: str = opt("auto", "cpu | gpu | auto")
    devices: str = opt("1", "devices per node (DDP when > 1; the global batch is split over them)")
    num_nodes: int = opt(1, "nodes (torchrun / SLURM)")
    ddp_strategy: str | None = opt(None, "Lightning strategy (default ddp_find_unused_parameters_true with more than "
                                         "one device)")
    precision: str | None = opt(None, "32-true | bf16-mixed (default bf16-mixed on GPU)")
    num_workers: int = opt(0, "data-loader worker processes")
    # `threads.settle`, in `training.fit`; meta.json records it, and a --resume decides the share anew
    threads: int | None = opt(None, THREADS_HELP, stored=False)
    # a torch.compile backend ("inductor", ...); None = eager
    compile: str | None = opt(None, "torch.compile for training (backend: inductor when not named); opt-in, for "
                                    "GPUs: pre-training compiles its whole objective (CUDA graphs on a GPU), other "
                                    "training each layer block", nargs="?", const="inductor", metavar="BACKEND")


@dataclass(frozen=True)
class TrainOptions(FlatOptions, OutputOptions):
    """Options common to the Lightning trainings; None means "the size's preset" (see `resolved`). The hardware
    and data groups are values of their own (`opts.hardware.devices`, `opts.inputs.corpus`), flat outside them
    (`options.flat_group`); `TrainOptions.flat(devices="2", ...)` builds one from flat keyword arguments."""

    GROUP: ClassVar[str] = "optimisation (default: the size's preset)"
    PRESETS: ClassVar[dict[str, dict]] = {}  # "tiny" and "paper": defaults of the None-able fields below

    hardware: HardwareOptions = flat_group(HardwareOptions)  # first: the flags' order (after --out ...)
    inputs: DataOptions = flat_group(DataOptions)  # `data` would read opts.data.data
    size: str | None = opt(None, "tiny | small | medium | base (tiny: a CPU preset)", group="")
    seed: int = opt(0, "seed of the batches, masks, samples and initialisation", group="")
    lr: float | None = opt(None, "peak learning rate")
    warmup_steps: int | None = opt(None, "linear warm-up steps")
    max_steps: int | None = opt(None, "training steps")
    batch_size: int | None = opt(None, "global batch size (split over devices)")
    dropout: float | None = opt(None, "dropout")
    weight_decay: float = opt(0.0, "AdamW weight decay, not on biases and LayerNorm")
    val_every: int | None = opt(None, "validate every N steps (and always at the last step)")
    val_batches: int | None = opt(None, "validation batches per check")
    ckpt_every: int | None = opt(None, "write checkpoints/last.ckpt every N steps (and at Ctrl-C: the step in "
                                       "progress is kept)")
    model_summary: bool = True  # Lightning's table of modules at the start (no flag; a study's many runs skip it)
    hpo: dict = field(default_factory=dict)  # as an nnictl trial: the tuner's parameters, applied to these options
    given: list[str] | None = field(default=None, compare=False)  # options typed on the command line

    def preset(self) -> dict:
        return self.PRESETS["tiny" if self.size == "tiny" else "paper"]

    def stored_presets(self) -> list[str]:
        """The options a new run writes out from the size's preset when not given (`with_presets`)."""
        return [k for k in self.preset() if k not in MAY_CHANGE]

    def resolved(self, key: str):
        value = getattr(self, key)
        return self.preset()[key] if value is None else value

    def default_size(self) -> str | None:
        """The size a run without --size gets (a command whose default depends on its inputs overrides this)."""
        return self.size

    def resolve(self) -> TrainOptions:
        """The options a new run goes on with (and `--print-config` shows): the size and every preset value written
        out, so nothing downstream resolves them again and options.json holds what the run used."""
        return with_presets(dataclasses.replace(self, size=self.size or self.default_size()))


def with_presets(opts: TrainOptions) -> TrainOptions:
    """`opts` with each option left to the size's preset written out (hardware and display options excepted), as
    a new run stores them: its --resume then continues with the values it started with, even under a later
    version whose presets differ."""
    return dataclasses.replace(opts, **{k: opts.resolved(k) for k in opts.stored_presets()
                                        if getattr(opts, k, 0) is None})


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
            raise UserError(f"{flag(name)} must be at least 1, got {v}")


SCHEDULE = ("max_steps", "batch_size", "val_every", "val_batches", "ckpt_every")  # resolved numbers that must be >= 1


