"""What the three studies share: the study directory, the stand-alone training budget, the model store (one
stand-alone pre-training per (arch, objective, shape, budget, data, seed), reused across studies), MLM accuracy
of a stand-alone model on fixed validation tokens, rank statistics with bootstrap intervals, Markdown tables.

A study directory:

    OUT/options.json     the study's options (what --resume continues with)
    OUT/models/          the model store (or --models DIR, shared between studies): one `lvbert pretrain` run
                         directory per stand-alone model, named <letters>-<objective>-seed<k>-<digest>
    OUT/<study>.json     the measured answer (written last), plus <study>.md and <study>.png
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from ..options import to_dict
from ..rundir import META, RunDir
from ..atomic import write_json

OPTIONS = "options.json"
ALL_TOKENS = 10**9  # --val-tokens default: the whole validation split

# Stand-alone budgets. "tiny" is the CPU regime of the README's study (the README's study section says how it was chosen);
# "quick" is CI-sized: it checks that everything runs, not what wins.
BUDGETS = {
    "quick": dict(steps=30, lr=2e-3, warmup_steps=3, batch_size=8, dropout=0.0),
    "tiny": dict(steps=1500, lr=2e-3, warmup_steps=100, batch_size=32, dropout=0.0),
}


@dataclass(frozen=True)
class Budget:
    """One stand-alone training budget: every compared model gets the same steps, batch and schedule."""

    steps: int
    lr: float
    warmup_steps: int
    batch_size: int
    dropout: float = 0.0

    def options(self) -> dict:
        """As study options (the flags): steps is --max-steps."""
        values = dataclasses.asdict(self)
        return {"max_steps": values.pop("steps"), **values}

    @staticmethod
    def from_options(opts) -> dict:
        """The budget fields a study's options give (None: the preset's)."""
        return {"steps": opts.max_steps, **{k: getattr(opts, k) for k in ("lr", "warmup_steps", "batch_size",
                                                                          "dropout")}}

    def check(self) -> None:
        for name, flag in (("steps", "--max-steps"), ("batch_size", "--batch-size")):
            if getattr(self, name) < 1:
                raise UserError(f"{flag} must be at least 1, got {getattr(self, name)}")
        if self.lr <= 0 or self.warmup_steps < 0 or not 0 <= self.dropout < 1:
            raise UserError("--lr must be positive, --warmup-steps not negative and --dropout in [0, 1)")


@dataclass
class StudyOptions:
    """Options every study has; each study adds its own fields."""

    TRAINS_MODELS = True  # False: the study trains no stand-alone model (its options.json stores no budget)

    out: str = "runs/study"
    quick: bool = False
    models: str | None = None  # model store (default OUT/models)
    max_steps: int | None = None  # stand-alone budget (Budget.steps); None = the preset (quick or tiny)
    lr: float | None = None
    warmup_steps: int | None = None
    batch_size: int | None = None
    dropout: float | None = None
    seed: int = 0  # seed of the stand-alone trainings and of the study's own draws
    data_seed: int = 0
    val_tokens: int = ALL_TOKENS
    threads: int | None = None
    progress: bool = True
    resume: bool = False
    overwrite: bool = False
    given: list[str] | None = field(default=None, compare=False)

    def budget(self) -> Budget:
        preset = dict(BUDGETS["quick" if self.quick else "tiny"])
        if not self.quick and getattr(self, "objective", "mlm") == "electra":
            from ..pretrain.train import PretrainOptions  # one home for ELECTRA's tiny lr (see its preset's note)

            preset["lr"] = PretrainOptions(size="tiny", objective="electra").resolved("lr")
        given = Budget.from_options(self)
        budget = Budget(**{k: preset[k] if given[k] is None else given[k] for k in preset})
        budget.check()
        return budget

    def store(self) -> Path:
        return Path(self.models) if self.models else Path(self.out) / "models"


def shown_path(path) -> str:
    """A path as a result file records it, so that results read the same on another machine: relative to the
    working directory when inside it, `~/...` when inside the home directory, else absolute."""
    path = Path(path).expanduser().resolve()
    for base, prefix in ((Path.cwd(), ""), (Path.home(), "~/")):
        with contextlib.suppress(ValueError):
            return prefix + str(path.relative_to(base.resolve()))
    return str(path)


def shown_stats(stats: dict) -> dict:
    """Validation statistics with their data path as `shown_path` gives it."""
    return {**stats, "data": shown_path(stats["data"])}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def begin(opts: StudyOptions, what: str) -> StudyOptions:
    """Check OUT (refuse non-empty without --resume/--overwrite); on --resume take the stored options
    (`RunDir.begin`)."""
    opts = RunDir(opts.out, "study", f"{what} directory").begin(opts)
    if opts.threads:
        import torch

        torch.set_num_threads(opts.threads)
    return opts


def start(opts: StudyOptions) -> Path:
    """Create OUT (emptied on --overwrite) and store the options, once every input is checked (`RunDir.open`)."""
    run = RunDir(opts.out, "study", "study directory")
    if opts.resume:  # the stored options (the budget written out) stay as they are
        return run.path
    budget = opts.budget().options() if opts.TRAINS_MODELS else {}  # a resumed study keeps it under later presets
    return run.open(opts, to_dict(dataclasses.replace(opts, **budget))).path


# --- stand-alone models ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Standalone:
    """What a stand-alone pre-training is a function of (its store key)."""

    arch: str  # compact letters
    objective: str
    size: str  # the training preset's size name (tiny, small, ...)
    model_config: dict  # the shape (a ModelConfig dict)
    budget: Budget
    data: str  # prepared data directory
    seed: int
    data_seed: int

    def key(self) -> str:
        blob = json.dumps({**dataclasses.asdict(self), "data": str(Path(self.data).resolve())}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]

    def dirname(self) -> str:
        return f"{self.arch}-{self.objective}-seed{self.seed}-{self.key()}"


def train_standalone(spec: Standalone, store: Path, progress: bool = True) -> Path:
    """Pre-train `spec` from scratch into the store (skipped when finished, resumed when interrupted; while another
    process trains it, waits for that)."""
    if not _finished(store, spec):
        store.mkdir(parents=True, exist_ok=True)
        with store_lock(_lock(store, spec)):  # another study sharing the store may be training it
            _train_unless_done(spec, store, progress)
    return store / spec.dirname()


def train_all(specs: list[tuple[str, Standalone]], store: Path, progress: bool = True) -> list[Path]:
    """Pre-train every (description, spec) into the store, each once, sharing the work with any other process that
    trains the same specs into the same store (see `one_process_each`)."""
    store.mkdir(parents=True, exist_ok=True)

    def work(item):
        i, (what, spec) = item
        log(f"[{i + 1}/{len(specs)}] {what}")
        _train_unless_done(spec, store, progress)

    one_process_each(list(enumerate(specs)), lambda item: _lock(store, item[1][1]), work,
                     skip=lambda item: _finished(store, item[1][1]))
    return [store / spec.dirname() for _, spec in specs]


def one_process_each(items: list, lock_of, work, skip=lambda item: False) -> None:
    """work(item) for every item not skipped, each under its lock (`lock_of(item)`, a file path). An item whose lock
    another process holds is left for later and the next one is worked on meanwhile, so the same study started in
    two processes (one per core or GPU) splits the items between them instead of queueing; when every item left
    is held elsewhere, this waits for the first and re-checks it (`work` must skip what is finished)."""
    pending = [item for item in items if not skip(item)]
    while pending:
        deferred = []
        for item in pending:
            with store_lock(lock_of(item), wait=False) as held:
                if held:
                    work(item)
                else:
                    log(f"left for later: another process holds {lock_of(item).name}")
                    deferred.append(item)
        if deferred and len(deferred) == len(pending):
            log(f"{len(deferred)} left, each being worked on by another process: waiting")
            with store_lock(lock_of(deferred[0])):
                work(deferred.pop(0))
        pending = deferred


def _lock(store: Path, spec: Standalone) -> Path:
    return store / f".{spec.dirname()}.lock"


def _finished(store: Path, spec: Standalone) -> bool:
    return RunDir(store / spec.dirname(), "pretrain").state() == "done"


def _train_unless_done(spec: Standalone, store: Path, progress: bool) -> None:
    """(under the spec's lock) train it, or resume it, unless finished."""
    path = store / spec.dirname()
    state = RunDir(path, "pretrain").state()
    if state != "done":
        _train(spec, path, store, progress, resume=state == "resume" and (path / OPTIONS).is_file())


@contextlib.contextmanager
def store_lock(path: Path, wait: bool = True):
    """An exclusive lock (flock: released when the holder exits, even by kill -9), so studies running side by side
    on one model store train each model once. Yields True once held; with wait=False it yields False at once when
    another process holds it."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): one study per store at a time
        yield True
        return
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _train(spec: Standalone, path: Path, store: Path, progress: bool, resume: bool) -> None:
    from ..pretrain.train import PretrainOptions, train_pretrain

    config = store / f".{spec.dirname()}.model_config.json"
    write_json(config, spec.model_config)
    b = spec.budget
    opts = PretrainOptions(
        out=str(path), arch=spec.arch, size=spec.size, model_config=str(config), objective=spec.objective,
        data=spec.data, data_seed=spec.data_seed, seed=spec.seed, lr=b.lr, warmup_steps=b.warmup_steps,
        max_steps=b.steps, batch_size=b.batch_size, dropout=b.dropout, val_every=b.steps, val_batches=4,
        ckpt_every=max(1, min(250, b.steps // 4)), progress=progress, resume=resume,
        overwrite=not resume and path.exists(), accelerator="cpu" if _cpu_only() else "auto",
        model_summary=False)  # a table per model would drown the study's log
    train_pretrain(opts)


def _cpu_only() -> bool:
    import torch

    return not torch.cuda.is_available()


def mlm_model(run_path: Path):
    """The MLM model of a finished pre-training run (ELECTRA: its generator), weights loaded, eval mode."""
    from ..arch import parse_arch
    from ..pretrain.objectives import build_objective
    from ..pretrain.train import WEIGHTS

    run = RunDir(run_path, "pretrain")
    run.require([WEIGHTS, "model_config.json", "arch.json", META])
    meta = run.meta
    gen = meta.get("generator_config")
    fraction = gen["hidden_size"] / run.cfg.hidden_size if gen else 0.25
    model = build_objective(meta["objective"], run.cfg, parse_arch(run.read_json("arch.json")["compact"]),
                            sop=bool(meta.get("sop")), generator_fraction=fraction)
    run.load_weights(model, WEIGHTS, "its model_config.json")
    model.eval()
    return model.mlm if meta["objective"] == "mlm" else model.generator


def standalone_accuracy(run_path: Path, batches) -> float:
    """MLM accuracy of a stand-alone model on the given fixed-masked validation batches (search.scorer's)."""
    import torch

    from ..search.scorer import batches_accuracy

    model = mlm_model(run_path)
    device = batches[0].input_ids.device
    model.to(device)
    with torch.inference_mode():
        hidden = [model.encode(b.input_ids, b.mask, b.token_type_ids) for b in batches]
        return batches_accuracy(model.head, hidden, batches)


def validation_batches(data_path: str, cfg, val_tokens: int):
    """The fixed-masked validation batches every compared model is scored on (the first `val_tokens` tokens)."""
    from ..search.scorer import load_val_batches

    return load_val_batches(data_path, val_tokens, 64, cfg.pad_token_id, cfg.vocab_size, cfg.max_position)


# --- statistics ------------------------------------------------------------------------------------------------
def rank_correlations(x, y, resamples: int = 2000, seed: int = 0) -> dict:
    """Kendall tau-b and Spearman rho (scipy) of paired values, each with a percentile bootstrap 95 % interval
    over resampled pairs (resamples with fewer than 3 distinct pairs or constant values are skipped)."""
    import numpy as np
    from scipy.stats import kendalltau, spearmanr

    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3:
        raise UserError(f"rank correlations need at least 3 architectures, got {len(x)}")
    out = {"n": int(len(x)), "kendall_tau": None, "spearman_rho": None, "kendall_tau_ci95": None,
           "spearman_rho_ci95": None, "bootstrap_resamples": 0}
    with warnings.catch_warnings():  # scipy warns on constant input; that case is reported as undefined below
        warnings.simplefilter("ignore")
        tau, rho = float(kendalltau(x, y).statistic), float(spearmanr(x, y).statistic)
    if len(np.unique(x)) < 2 or len(np.unique(y)) < 2 or not (np.isfinite(tau) and np.isfinite(rho)):
        out["undefined"] = "constant scores on one side"  # every model scored alike (too short a budget?)
        return out
    out.update(kendall_tau=tau, spearman_rho=rho)
    rng = np.random.default_rng(seed)
    taus, rhos = [], []
    for _ in range(resamples):
        idx = rng.integers(0, len(x), len(x))
        a, b = x[idx], y[idx]
        if len(set(idx.tolist())) < 3 or a.std() == 0 or b.std() == 0:
            continue
        taus.append(kendalltau(a, b).statistic)
        rhos.append(spearmanr(a, b).statistic)
    for name, values in (("kendall_tau", taus), ("spearman_rho", rhos)):
        values = [v for v in values if v == v]  # NaN-free
        out[f"{name}_ci95"] = ([float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]
                               if values else None)
    out["bootstrap_resamples"] = len(taus)
    return out


def markdown_table(header: list[str], rows: list[list]) -> str:
    def cell(v) -> str:
        if isinstance(v, float):
            return f"{v:.4f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def save_figure(fig, path: Path) -> None:
    from ..atomic import save_figure as save

    save(fig, path, dpi=110, bbox_inches="tight")


def pyplot():
    from ..atomic import pyplot as agg

    return agg()
