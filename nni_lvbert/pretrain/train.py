"""Pre-train one fixed architecture (MLM or ELECTRA, optional SOP): plain Lightning through `training.Training`.

    Training.begin -> prepared data -> open -> fit(PretrainModule) -> weights, HF dirs -> finish (meta.json)

Run directory (besides options.json, model_config.json, space.yaml, tokenizer/, checkpoints/, logs/):

    arch.json                 the architecture (NNI dict + compact letters)
    generator_config.json     ELECTRA: the generator's ModelConfig
    pretrain.safetensors      every trained weight (objective module: MLM model or generator + discriminator, SOP head)
    hf/                       Hugging Face model directory: the MLM model (LVBertForMaskedLM) or, for ELECTRA, the
                              discriminator (LVBertForPreTraining) -- the encoder to fine-tune
    hf-generator/             ELECTRA only: the generator as LVBertForMaskedLM (fill-mask)
    pretrain_curve.png        validation curves
    meta.json                 written last: the run is finished
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from .. import layout
from ..errors import UserError
from ..options import opt
from ..presets import presets
from ..rundir import RunDir
from ..train_options import TrainOptions
from ..training import Training

KIND = "pretrain"
WEIGHTS = "pretrain.safetensors"
CURVE = "pretrain_curve.png"
DEFAULT_SIZE = "small"


@dataclass(frozen=True)
class PretrainOptions(TrainOptions):
    PRESETS: ClassVar[dict[str, dict]] = presets("pretrain")  # per size; tiny-electra: ELECTRA's tiny lr
    GROUP: ClassVar[str] = "objective"

    out: str = layout.PRETRAIN
    # any Arch spelling; stored as compact letters
    arch: str | None = opt(None, "best_arch.json, a name (bert, dynamicconv, sandwich, lvbert-small), letters "
                                 "(ccsf...: c=dc s=sa f=ff g=glu) or digits (0=dc 1=sa 2=ff)", group="")
    size: str | None = opt(None, "tiny | small | medium | base (default small; tiny: a CPU preset)", group="")
    model_config: str | None = opt(None, "a model_config.json (e.g. SUPERNET/model_config.json) giving the shape "
                                         "instead of --size; --size still picks the training preset", metavar="FILE",
                                   group="")
    objective: str = opt("electra", "mlm | electra", group="")
    sop: bool = opt(False, "add ALBERT sentence-order prediction", group="")
    sharing: str | None = opt(None, "none | type: cross-layer sharing per layer type (ALBERT)")
    weight_decay: float = 0.01  # not on LayerNorm weights and biases
    clip_grad: float = opt(1.0, "global gradient-norm clipping (0 = off)")
    generator_fraction: float | None = opt(None, "ELECTRA generator hidden size / discriminator's (default 1/4 for "
                                                 "tiny and small, 1/3 for medium and base)")
    disc_weight: float = opt(50.0, "ELECTRA discriminator loss weight")

    def default_size(self) -> str | None:
        return DEFAULT_SIZE

    def stored_presets(self) -> list[str]:
        # the generator's size is ELECTRA's alone: an MLM run leaves it unset (and refuses it, see `check_options`)
        return [k for k in super().stored_presets() if self.objective == "electra" or k != "generator_fraction"]

    def preset(self) -> dict:
        size = self.size or DEFAULT_SIZE
        return self.PRESETS.get(f"{size}-{self.objective}", self.PRESETS.get(size, self.PRESETS["paper"]))


def check_options(opts: PretrainOptions) -> None:
    """One clear line for a bad size / objective / combination, before anything is written."""
    from ..config import size_names
    from ..options import given_fields
    from .objectives import OBJECTIVES

    if opts.arch is None:
        raise UserError("give the architecture to pre-train with --arch (best_arch.json, a name such as bert or "
                        "lvbert-small, or letters such as ccsf...)")
    if opts.objective not in OBJECTIVES:
        raise UserError(f"unknown objective {opts.objective!r}; choose one of {', '.join(OBJECTIVES)}")
    if opts.size not in size_names():
        raise UserError(f"unknown size {opts.size!r}; choose one of: {', '.join(size_names())}")
    electra_only = sorted({"generator_fraction", "disc_weight"} & given_fields(opts))
    if opts.objective != "electra" and electra_only:
        flags = ", ".join("--" + f.replace("_", "-") for f in electra_only)
        raise UserError(f"{flags} apply(ies) to --objective electra only, not {opts.objective}")
    if opts.sharing not in (None, "none", "type"):
        raise UserError(f"--sharing must be none or type, got {opts.sharing!r}")
    if opts.clip_grad < 0 or opts.disc_weight < 0:
        raise UserError("--clip-grad and --disc-weight must not be negative")


def model_shape(opts: PretrainOptions):
    """The ModelConfig to train: --size's, or --model-config's (a supernet's shape: the study of its ranking trains
    subnets stand-alone at exactly that shape); dropout and sharing from the options either way."""
    from ..config import ModelConfig, load_size
    from ..safeio import read_json

    overrides = {"dropout": opts.resolved("dropout"), "attention_dropout": opts.resolved("dropout")}
    if opts.sharing is not None:
        overrides["sharing"] = opts.sharing
    if opts.model_config is None:
        return load_size(opts.size, **overrides)
    own = Path(opts.out) / "model_config.json"
    if opts.resume and not Path(opts.model_config).is_file() and own.is_file():
        return ModelConfig.from_dict(read_json(own, "run model config"))  # the file moved or went: the run's copy
    values = read_json(Path(opts.model_config), "--model-config file")
    try:
        return ModelConfig.from_dict({**values, **{k: v for k, v in overrides.items() if v is not None}})
    except (UserError, TypeError, ValueError) as exc:
        raise UserError(f"--model-config {opts.model_config}: {exc}") from None


def train_pretrain(opts: PretrainOptions) -> dict:
    from ..arch import parse_arch
    from ..config import SpaceSpec

    if opts.arch is not None:  # one spelling on disk: --resume compares like with like
        opts = dataclasses.replace(opts, arch=parse_arch(opts.arch).compact)
    t = Training.begin(opts, KIND)
    opts = t.opts
    # torch and Lightning only now: the arch's and the run directory's mistakes are one line at once
    from .data import PretrainDataModule
    from .module import COMPILED_POSITIONS, PretrainModule
    from .objectives import build_objective, generator_config

    if not opts.size:
        opts = t.update(size=DEFAULT_SIZE)
    check_options(opts)
    arch = parse_arch(opts.arch)
    cfg = model_shape(opts)
    gen_cfg = generator_config(cfg, opts.resolved("generator_fraction")) if opts.objective == "electra" else None
    micro_batch = t.check()
    data = t.data(cfg)
    if opts.resume:
        _check_resumed_data(RunDir(opts.out, KIND), data)
    cfg.vocab_size = data.vocab_size  # a given tokenizer decides the vocabulary
    if gen_cfg is not None:
        gen_cfg.vocab_size = data.vocab_size
    run = t.open(SpaceSpec(name="pretrain", slots=len(arch), candidates=sorted(set(arch))), cfg, data)
    if run.is_rank_zero:
        run.write_json("arch.json", {"arch": arch.dict, "compact": arch.compact})
        if gen_cfg is not None:
            run.write_json("generator_config.json", gen_cfg.to_dict())

    model = build_objective(opts.objective, cfg, arch, sop=opts.sop,
                            generator_fraction=opts.resolved("generator_fraction"), disc_weight=opts.disc_weight)
    dm = PretrainDataModule(data, objective=opts.objective, sop=opts.sop, data_seed=opts.inputs.data_seed,
                            batch_size=micro_batch, seed=opts.seed, num_workers=opts.hardware.num_workers,
                            positions_multiple=COMPILED_POSITIONS if opts.hardware.compile else 1)
    module = PretrainModule(model, opts.objective, **t.schedule(), clip_grad=opts.clip_grad, seed=opts.seed,
                            data_seed=opts.inputs.data_seed, disc_weight=opts.disc_weight)
    result = t.fit(module, dm)
    if not result.trainer.is_global_zero:
        return {}

    from .hf_output import write_hf_dirs

    model.eval()
    run.save_weights(model, WEIGHTS)
    hf = write_hf_dirs(run, model, opts.objective, cfg, gen_cfg, arch,
                       provenance={"source": "pretrain", "run": str(run.path.resolve()), "objective": opts.objective,
                                   "sop": opts.sop, "run_steps": result.trainer.global_step})
    plot_curves(result.validation, opts.objective, run / CURVE)
    final = result.validation[-1] if result.validation else {}
    return t.finish(result, data, {"arch": arch.compact, "objective": opts.objective, "sop": opts.sop,
                                   "generator_config": gen_cfg.to_dict() if gen_cfg else None, "final": final,
                                   "hf": hf, "curve": CURVE})


def _check_resumed_data(run, data) -> None:
    """The data of a resumed run must be tokenized as the run was (same tokens and ids, same vocabulary)."""
    run.check_data_tokenizer(data.path)
    if run.has("model_config.json"):
        stored = run.read_json("model_config.json").get("vocab_size")
        if stored is not None and stored != data.vocab_size:
            raise UserError(f"the data has a vocabulary of {data.vocab_size} but {run.path} was trained with "
                            f"{stored}; resume with the data it was started with")


def plot_curves(history: list[dict], objective: str, path) -> None:
    """Validation curves (accuracy-like metrics, 0..1) against steps, written through a temp file."""
    from ..atomic import pyplot, save_figure

    plt = pyplot()
    names = [("val_gen_mlm_acc", "generator MLM accuracy"), ("val_mlm_acc", "MLM accuracy"),
             ("val_disc_acc", "discriminator accuracy"), ("val_disc_auc", "discriminator AUC"),
             ("val_disc_precision", "discriminator precision"), ("val_disc_recall", "discriminator recall"),
             ("val_sop_acc", "SOP accuracy")]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key, label in names:
        points = [(h["step"], h[key]) for h in history if key in h]
        if points:
            ax.plot(*zip(*points), marker="o", ms=3, label=label)
    base = [(h["step"], 1 - h["val_disc_replaced"]) for h in history if "val_disc_replaced" in h]
    if base:  # what always answering "original" scores
        ax.plot(*zip(*base), ls="--", color="gray", lw=1, label="discriminator base rate (all original)")
    ax.set_xlabel("training step")
    ax.set_ylim(0, 1)
    ax.set_title(f"{objective.upper()} pre-training: validation")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    save_figure(fig, path, dpi=110, bbox_inches="tight")
