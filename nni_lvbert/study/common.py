"""What the studies share: their options, the stand-alone training budget and the study directory. The driver is
`driver.py`, the model store `standalone/`, the statistics and tables `stats.py`.

A study directory:

    OUT/options.json     the study's options (what --resume continues with)
    OUT/models/          the model store (or --models DIR, shared between studies): one `lvbert pretrain` run
                         directory per stand-alone model, named <letters>-<objective>-seed<k>-<digest>
    OUT/<study>.json     the measured answer (written last), plus <study>.md and <study>.png
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from .. import layout
from ..options import OutputOptions, opt
from ..presets import presets
from ..standalone.scoring import ALL_TOKENS
from ..standalone.store import Budget, log  # noqa: F401 (the studies' names)
from ..threads import HELP as THREADS_HELP

QUICK_VAL_TOKENS = 4096  # ... and with --quick (scoring on a whole split is minutes per model on a real corpus)

# Stand-alone budgets: the "study" rows of the one preset table (presets.py; "tiny" and the CI-sized "quick"), by
# Budget's names (steps is --max-steps).
BUDGETS = {name: {"steps": row.pop("max_steps"), **row} for name, row in presets("study").items()}


_T, _Q = BUDGETS["tiny"], BUDGETS["quick"]


@dataclass(frozen=True)
class StudyOptions(OutputOptions):
    """Options every study has; each study adds its own fields."""

    TRAINS_MODELS = True  # False: the study trains no stand-alone model (its options.json stores no budget)
    # options a resumed study may change (resume.resume_from), stored for the next --resume
    MAY_CHANGE_ON_RESUME: ClassVar[frozenset[str]] = frozenset()
    GROUP: ClassVar[str] = "stand-alone budget (the same for every model)"

    out: str = opt(layout.STUDY, "study directory", metavar="DIR")
    quick: bool = opt(False, "CI-sized run: checks that everything runs, not what wins", group="")
    models: str | None = opt(None, "model store for the stand-alone pre-trainings (default OUT/models; share it "
                                   "between studies to train each model once)", metavar="DIR", group="")
    # stand-alone budget (Budget); None = the preset (quick or tiny)
    max_steps: int | None = opt(None, f"training steps (default {_T['steps']}; quick {_Q['steps']})")
    lr: float | None = opt(None, f"peak learning rate (default {_T['lr']:g})")
    warmup_steps: int | None = opt(None, f"linear warm-up (default {_T['warmup_steps']})")
    batch_size: int | None = opt(None, f"batch size (default {_T['batch_size']}; quick {_Q['batch_size']})")
    dropout: float | None = opt(None, f"dropout (default {_T['dropout']:g})")
    seed: int = opt(0, "seed of the stand-alone trainings and the study's draws", group="")
    data_seed: int = opt(0, "seed of the fixed validation masking", group="")
    val_tokens: int | None = opt(None, "validation tokens every model is scored on (default: the whole "
                                       f"validation split; quick {QUICK_VAL_TOKENS:,})", group="")
    threads: int | None = opt(None, THREADS_HELP, group="")
    given: list[str] | None = field(default=None, compare=False)

    @classmethod
    def not_offered(cls) -> tuple[str, ...]:
        """Options a study without stand-alone models does not take."""
        return () if cls.TRAINS_MODELS else ("models", "max_steps", "lr", "warmup_steps", "batch_size", "dropout")

    def budget(self) -> Budget:
        preset = dict(BUDGETS["quick" if self.quick else "tiny"])
        if not self.quick and getattr(self, "objective", "mlm") == "electra":
            from ..pretrain.train import PretrainOptions  # one home for ELECTRA's tiny lr (see its preset's note)

            preset["lr"] = PretrainOptions(size="tiny", objective="electra").resolved("lr")
        given = Budget.from_options(self)
        budget = Budget(**{k: preset[k] if given[k] is None else given[k] for k in preset})
        budget.check()
        return budget

    def validation_tokens(self) -> int:
        """--val-tokens, else the whole split (--quick: QUICK_VAL_TOKENS)."""
        if self.val_tokens is not None:
            return self.val_tokens
        return QUICK_VAL_TOKENS if self.quick else ALL_TOKENS

    def store(self) -> Path:
        return Path(self.models) if self.models else Path(self.out) / "models"


# options a study with stand-alone trainings may change when resumed: writing its experiment again (`nnictl.py`)
NNICTL_OPTIONS: frozenset[str] = frozenset({"nnictl", "trial_concurrency"})


@dataclass(frozen=True)
class StandaloneStudyOptions(StudyOptions):
    """A study whose stand-alone pre-trainings can run as an nnictl experiment instead (`nnictl.py`): ranking, iot
    and downstream. The two flags mean the same in each."""

    MAY_CHANGE_ON_RESUME: ClassVar[frozenset[str]] = NNICTL_OPTIONS

    nnictl: str | None = opt(None, "write the study's stand-alone pre-trainings (ranking: the ground truth and "
                                   "short:N; iot: each order's stand-alone baseline; downstream: each arch's "
                                   "pre-training) as an nnictl experiment into DIR (standalone.yml, its space, "
                                   "models.json) and stop: nothing trained, nothing written into --out. Run it with "
                                   "nnictl, then this study again with the same options without --nnictl: it trains "
                                   "only the models still missing and does the rest in its own process (ranking: "
                                   "rerank:K:N and the scoring; iot: IOT itself; downstream: the fine-tunings)",
                             metavar="DIR", group="")
    trial_concurrency: int = opt(2, "with --nnictl: trialConcurrency of a newly written standalone.yml", group="")


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
