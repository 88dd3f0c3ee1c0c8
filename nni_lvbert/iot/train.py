"""Train IOT: NasExperiment(space, Lightning evaluator, IOTStrategy) from a trained supernet or from scratch.

Mirrors `lvbert supernet train`: presets, refusal of a non-empty run directory, atomic Lightning checkpoint for
--resume, CSV/TensorBoard logs, safetensors weights, meta.json, DDP through Lightning, NNI intermediate/final
results when running as an nnictl trial (whose tuner parameters, e.g. tau or c1, override the options).
"""
from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from .. import layout
from ..errors import UserError
from ..options import flat_group, opt
from ..presets import presets
from ..ranks import launcher_is_rank_zero
from ..train_options import VAL_FRACTION, DataOptions, TrainOptions
from ..training import Training, prepare_data
from .method import IOTMethod

START = "start (one of)"
ORDERS = f"candidate orders (one source; default: top-M of {layout.SEARCH})"

# options an nnictl tuner may set (search-space keys)
HPO_KEYS = {"tau": float, "tau_min": float, "tau_decay": float, "tau_every": int, "c1": float, "c2": float,
            "clamp": float, "gumbel": bool, "lr": float, "warmup_steps": int, "max_steps": int, "seed": int}


@dataclass(frozen=True)
class IOTData(DataOptions):
    """IOT's data group: from a supernet its data by default, --corpus/--tokenizer only from scratch."""

    # a prepared data directory (default: the supernet's, or prepared from --corpus)
    data: str | None = opt(None, "a prepared data directory (default: the supernet's)", metavar="DIR")
    corpus: list[str] | None = opt(None, "from scratch: text/jsonl/parquet files, folder or glob, or a Hugging Face "
                                         "hub dataset NAME[:CONFIG] (default: embedded corpus)")
    tokenizer: str | None = opt(None, "from scratch: existing tokenizer directory or vocab.txt (default: train one)")


@dataclass(frozen=True)
class IOTOptions(TrainOptions):
    PRESETS: ClassVar[dict[str, dict]] = presets("iot")  # paper: continued pre-training of a small supernet
    GROUP: ClassVar[str] = IOTMethod.GROUP

    out: str = layout.IOT
    supernet: str | None = opt(None, "start from a trained supernet run", metavar="RUN_DIR", group=START)
    space: str | None = opt(None, "train from scratch on this search space (name or YAML)", group=START)
    size: str | None = opt(None, "from scratch: tiny | small | medium | base (default: the space's)", group=START)
    inputs: IOTData = flat_group(IOTData)
    orders_from: str | None = opt(None, "top-M distinct architectures of a search's history.jsonl",
                                  metavar="SEARCH_DIR", group=ORDERS)
    orders: list[str] | None = opt(None, "explicit orders: compact strings (c=dc s=sa f=ff g=glu), names or JSON "
                                         "files", metavar="ARCH", group=ORDERS)
    block: str | None = opt(None, "IOT-style: M distinct permutations of a block (e.g. sa,ff,dc or sfc) repeated "
                                  "over the slots", metavar="TYPES", group=ORDERS)
    m: int | None = opt(None, "number of orders M (default 4; with --orders: their number)", group=ORDERS)
    method: IOTMethod = flat_group(IOTMethod)
    seed: int = opt(0, "seed of the batches, Gumbel noise and initialisation", group="")
    dropout: float | None = opt(None, "dropout, from scratch only")

    def default_size(self) -> str | None:
        """The supernet's size (its meta.json), from scratch the space's."""
        from ..config import load_space
        from ..rundir import RunDir

        try:
            if self.supernet:
                return RunDir(self.supernet, "supernet").meta.get("size")
            return load_space(self.space).size if self.space else None
        except UserError:  # a missing supernet or space: the run says so
            return None

    def stored_presets(self) -> list[str]:
        # from a supernet the dropout is the supernet's: --dropout stays unset (and refused, see `_source`)
        return [k for k in super().stored_presets() if not (self.supernet and k == "dropout")]


def _source(t: Training):
    """(space, spec, cfg, supernet meta or None); the space is mutated when it comes from a supernet. The run's
    size is settled here (`t.update`): the supernet's, else the space's when not given."""
    from ..config import load_size, load_space

    opts = t.opts
    if opts.supernet and opts.space:
        raise UserError("--supernet and --space exclude each other (a supernet brings its own space)")
    if opts.supernet:
        from ..supernet.rundir import load_supernet

        sn = load_supernet(opts.supernet)
        for flag, v in (("--size", opts.size if opts.size != sn.meta.get("size") else None),
                        ("--dropout", opts.dropout), ("--corpus", opts.inputs.corpus),
                        ("--tokenizer", opts.inputs.tokenizer), ("--max-docs", opts.inputs.max_docs)):
            if v is not None:
                raise UserError(f"{flag} applies when training from scratch (--space); a supernet fixes it "
                                "(use --data to give another prepared data directory)")
        sn.space.train()  # load_supernet hands it back in eval mode; Lightning keeps submodule modes as they are
        if opts.size != sn.meta.get("size"):
            t.update(size=sn.meta.get("size"))  # the tiny preset for a tiny supernet
        return sn.space, sn.spec, sn.cfg, sn.meta
    if not opts.space:
        raise UserError("give --supernet RUN_DIR (start from a trained supernet) or --space NAME (train from scratch)")
    spec = load_space(opts.space)
    if not opts.size:
        opts = t.update(size=spec.size)
    d = opts.resolved("dropout")
    cfg = load_size(opts.size, dropout=d, attention_dropout=d)
    return None, spec, cfg, None


def _data(opts: IOTOptions, cfg, smeta: dict | None):
    from ..data import PreparedData, prepare
    from ..rundir import RunDir

    if opts.inputs.data or smeta is None:
        data = prepare_data(opts, cfg)
        if smeta is None:
            return data
    else:
        path = (smeta.get("data") or {}).get("path")
        if path and Path(path).is_dir():
            data = PreparedData.load(path)
        else:
            so = smeta.get("options") or {}
            tok = Path(opts.supernet) / "tokenizer"
            if not so or not tok.is_dir():
                raise UserError(f"the supernet's data directory {path} is gone and {opts.supernet}/meta.json cannot "
                                "rebuild it; pass --data PREPARED_DIR")
            data = prepare(corpus=so.get("corpus"), size=so.get("size") or "small", max_length=cfg.max_length,
                           tokenizer=str(tok), val_fraction=so.get("val_fraction", VAL_FRACTION),
                           seed=so.get("data_seed", so.get("seed", 0)),
                           cache_dir=opts.inputs.cache_dir or so.get("cache_dir"), max_docs=so.get("max_docs"))
    if data.vocab_size != cfg.vocab_size:
        raise UserError(f"data {data.path} has a {data.vocab_size}-token vocabulary but the supernet expects "
                        f"{cfg.vocab_size}")
    RunDir(opts.supernet, "supernet").check_data_tokenizer(data.path)
    return data


def _record(trainer, pl_module) -> dict | None:
    """IOT's validation record: routed accuracy and loss, the best single order, the oracle, order usage."""
    stats = getattr(pl_module, "last_validation", None)
    if not stats:
        return None
    return {"val_mlm_acc": stats["routed"]["val_mlm_acc"], "val_loss": stats["routed"]["val_loss"],
            "best_single_acc": stats["best_single"]["val_mlm_acc"], "oracle_acc": stats["oracle"]["val_mlm_acc"],
            "usage_entropy": stats["usage_entropy"], "usage": [o["usage"] for o in stats["orders"]],
            "order_acc": [o["val_mlm_acc"] for o in stats["orders"]]}


def _nni_metric(stats: dict) -> dict:
    """NNI metric dict: `default` = routed validation MLM accuracy (the web UI plots it), plus context."""
    return {"default": stats["routed"]["val_mlm_acc"], "best_single": stats["best_single"]["val_mlm_acc"],
            "oracle": stats["oracle"]["val_mlm_acc"], "usage_entropy": stats["usage_entropy"]}


ORDER_OPTIONS = ("orders", "orders_from", "block", "m")


def _check_resumed_orders(opts: IOTOptions) -> IOTOptions:
    """On --resume, order options are checked by the orders they give (not by spelling) against orders.json, and
    then left to the stored options: the options returned no longer give them."""
    from ..options import given_fields
    from ..rundir import RunDir
    from .orders import resolve_orders
    from .rundir import ORDERS, read_orders

    given = given_fields(opts) & set(ORDER_OPTIONS)
    run = RunDir(opts.out, "IOT")
    if not given or not run.has(ORDERS):
        return opts
    spec = run.spec
    before, _ = read_orders(run, spec)
    wanted, _ = resolve_orders(spec, opts.orders, opts.orders_from, opts.block, opts.m)
    if wanted != before:
        from ..arch import to_compact

        raise UserError(f"cannot resume: {run / ORDERS} holds other orders ({', '.join(map(to_compact, before))}); "
                        "give the same orders or use --overwrite")
    if opts.given is not None:
        return dataclasses.replace(opts, given=sorted(set(opts.given) - given))
    return dataclasses.replace(opts, **dict.fromkeys(ORDER_OPTIONS))  # API callers: the stored spelling is kept


def train_iot(opts: IOTOptions) -> dict:
    from ..arch import to_compact, to_dict
    from ..supernet.rundir import WEIGHTS
    from . import rundir
    from .orders import resolve_orders

    # validation statistics are reduced exactly over ranks before logging: Lightning's sync_dist hint is moot
    warnings.filterwarnings("ignore", message=r"It is recommended to use `self.log\('(val_|tau)")
    if opts.resume and launcher_is_rank_zero():
        opts = _check_resumed_orders(opts)
    t = Training.begin(opts, "iot", tunable=HPO_KEYS)
    opts = t.opts
    # torch, NNI and Lightning only now: the run directory's mistakes are one line at once
    from ..data import MLMDataModule
    from ..space import LVBertSpace
    from ..supernet.lightning_module import MLMModule
    from .evaluate import evaluate_iot
    from .routing import IOTModel
    from .strategy import IOTStrategy

    space, spec, cfg, smeta = _source(t)
    opts = t.opts
    if opts.resume:  # the stored options name the same order source; the stored orders are what ran
        orders, source = rundir.read_orders(rundir.RunDir(opts.out, "IOT"), spec)
    else:
        orders, source = resolve_orders(spec, opts.orders, opts.orders_from, opts.block, opts.m)
    opts.method.check(len(orders))
    micro_batch = t.check()
    data = _data(opts, cfg, smeta)
    if space is None:
        cfg.vocab_size = data.vocab_size
        space = LVBertSpace(spec, cfg)  # from scratch (mutated by the strategy)
    run = t.open(spec, cfg, data)
    if run.is_rank_zero:
        rundir.save_orders(run, orders, source)
    dm = MLMDataModule(data, batch_size=micro_batch, seed=opts.seed, num_workers=opts.hardware.num_workers)
    oneshot = IOTStrategy([to_dict(o) for o in orders], cfg.embedding_size, **opts.method.settings(), seed=opts.seed,
                          predictor_dropout=cfg.dropout)
    result = t.fit(MLMModule(**t.schedule()), dm, record=_record,
                   report=lambda record, module: _nni_metric(module.last_validation), space=space, strategy=oneshot)
    trainer = result.trainer
    if not trainer.is_global_zero:
        return {}
    predictor = trainer.lightning_module.predictor
    dm.val_batch_size = opts.resolved("batch_size")  # the final evaluation runs on rank 0 alone: global batches
    run.save_weights(space, WEIGHTS)
    run.save_weights(predictor, rundir.PREDICTOR)
    model = IOTModel(space, predictor, orders, spec, cfg)
    final = evaluate_iot(model, dm.val_dataloader(), max_batches=opts.resolved("val_batches"))
    meta = t.finish(result, data, {
        "space": spec.to_dict(),
        "start": {"supernet": str(opts.supernet)} if opts.supernet else {"scratch": True},
        "orders": [to_compact(o) for o in orders],
        "orders_source": source,
        "iot": opts.method.settings(),
        "final": final,
        "final_val_mlm_acc": final["routed"]["val_mlm_acc"],
    }, final=_nni_metric(final))
    return meta
