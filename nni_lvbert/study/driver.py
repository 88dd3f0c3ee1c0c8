"""The one study driver. A study declares its options, its plan (a `Plan`: its inputs checked, its stand-alone model
specs), its units (`Unit`: each with its own result file, so an interrupted study resumes unit by unit), its
summary and its report; `drive` does the rest, the same for every study:

    begin (check OUT; --resume takes the stored options) -> plan -> with --nnictl: the plan's stand-alone trainings
    written as an nnictl experiment, and stop (`nnictl.py`) -> start (create OUT, store the options) -> every unit
    (a finished one read back, the others made under their locks, split with any other process running the same
    study) -> summarize -> OUT/<study>.md and .png (`report`) -> OUT/<study>.json, written last.

`render(result, out)` writes the report of a stored result again (the artefacts in docs/study/ re-render the same).
"""
from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..atomic import write_json
from ..errors import UserError
from ..options import to_dict
from ..rundir import RunDir
from ..safeio import read_json
from ..standalone.store import one_process_each
from ..threads import settle
from .common import StudyOptions, log

# study name (as results record it) -> its module, which holds STUDY
MODULES = {"ranking": "ranking", "search": "search", "downstream": "downstream", "iot": "iot",
           "iot-finetune": "iot_finetune"}


@dataclass
class Plan:
    """A study's inputs, checked, nothing written: the options as resumed; `standalone()` the stand-alone
    pre-trainings it runs (what --nnictl writes as an experiment)."""

    opts: StudyOptions

    def standalone(self) -> list:
        return []


@dataclass
class Unit:
    """One resumable piece of a study: finished when its result file is there (or `finished()` says so), then
    read back by `load`; else `make()` computes it and `save` writes it (None: `make` writes its file, read back), under
    `lock` when given (another process running the same study takes the next unit meanwhile)."""

    file: Path
    make: Callable[[], Any]
    load: Callable[[Path], Any] = read_json
    save: Callable[[Path, Any], None] | None = write_json
    lock: Path | None = None
    skipped: str | None = None  # logged for a unit finished earlier
    finished: Callable[[], bool] | None = None

    def done(self) -> bool:
        return self.finished() if self.finished else self.file.is_file()


def run_units(units: list[Unit]) -> list:
    """Every unit's value, in order. Finished units are read first (a unit made with other settings is refused
    before anything is computed), then the others made."""
    values = {}
    for i, unit in enumerate(units):
        if unit.done():
            if unit.skipped:
                log(unit.skipped)
            values[i] = unit.load(unit.file)

    def work(item) -> None:
        i, unit = item
        if unit.done():  # by another process meanwhile
            values[i] = unit.load(unit.file)
            return
        value = unit.make()
        if unit.save:
            unit.save(unit.file, value)
        values[i] = value if unit.save else unit.load(unit.file)

    todo = [(i, u) for i, u in enumerate(units) if i not in values]
    if todo and all(u.lock for _, u in todo):
        one_process_each(todo, lambda item: item[1].lock, work, skip=lambda item: item[0] in values)
    else:
        for item in todo:
            work(item)
    return [values[i] for i in range(len(units))]


@dataclass(frozen=True)
class Study:
    """What a study declares (the module's STUDY)."""

    name: str  # as its result records it ("study")
    result: str  # its result file, e.g. ranking.json; the report is <stem>.md and .png
    plan: Callable[[StudyOptions], Plan]  # options as begun -> the plan (every input checked)
    units: Callable[[Plan, Path], list[Unit]]
    summarize: Callable[[Plan, Path, list], dict]  # (plan, OUT, the units' values) -> the result
    report: Callable[[dict, Path], None]  # (result, OUT) -> .md and .png
    answer: Callable[[dict, Path], dict]  # (result, its file) -> what the command prints


def drive(study: Study, opts: StudyOptions) -> dict:
    """Run a study (see the module docstring)."""
    plan = study.plan(begin(opts, "study"))
    if getattr(plan.opts, "nnictl", None):  # the trainings as an nnictl experiment: nothing else done here
        from .nnictl import write_study_experiment

        return write_study_experiment(plan.opts, plan.standalone())
    out = start(plan.opts)
    result = study.summarize(plan, out, run_units(study.units(plan, out)))
    study.report(result, out)
    write_json(out / study.result, result)
    return study.answer(result, out / study.result)


def study_of(name: str) -> Study:
    if name not in MODULES:
        raise UserError(f"{name!r} is not a study's result (one of {', '.join(MODULES)})")
    return importlib.import_module(f"{__package__}.{MODULES[name]}").STUDY


def render(result: dict, out: Path) -> Path:
    """A stored result's report (.md, .png) written again into `out`; the Markdown file's path."""
    study = study_of(result.get("study"))
    study.report(result, out)
    return out / Path(study.result).with_suffix(".md").name


def need_supernet(opts, takes: str, seeds: int) -> None:
    """--supernet given (`takes`: what the study takes from it) and at least one seed (its resolved --num-seeds)."""
    if not opts.supernet:
        raise UserError(f"give the reference supernet with --supernet RUN ({takes})")
    if seeds < 1:
        raise UserError(f"--num-seeds must be at least 1, got {seeds}")


def begin(opts: StudyOptions, what: str) -> StudyOptions:
    """Check OUT (refuse non-empty without --resume/--overwrite); on --resume take the stored options
    (`RunDir.begin`)."""
    opts = RunDir(opts.out, "study", f"{what} directory").begin(opts)
    if opts.threads:  # the study's trainings keep it (threads.settle); else each decides (torch: not imported yet)
        settle(opts.threads)
    return opts


def start(opts: StudyOptions) -> Path:
    """Create OUT (emptied on --overwrite) and store the options, once every input is checked (`RunDir.open`)."""
    run = RunDir(opts.out, "study", "study directory")
    if opts.resume:  # the stored options (the budget written out) stay, but for MAY_CHANGE_ON_RESUME
        stored, now = run.stored_options() or {}, to_dict(opts)
        changed = {k: now[k] for k in opts.MAY_CHANGE_ON_RESUME if k in now and stored.get(k) != now[k]}
        if changed:
            run.save_options(stored | changed)
        return run.path
    budget = opts.budget().options() if opts.TRAINS_MODELS else {}  # a resumed study keeps it under later presets
    return run.open(opts, to_dict(dataclasses.replace(opts, **budget))).path
