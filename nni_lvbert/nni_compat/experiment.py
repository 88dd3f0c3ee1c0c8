"""NNI 3.0 workarounds around an experiment: nnictl's experiment-list lock, running a NasExperiment in process
(its logging, stop and checkpoint loading), its manifest entry, and reading nnictl's experiments."""
from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

from ..errors import UserError
from .strategies import clear_trial_parameter, in_multi_trial


# --- nnictl's experiment-list lock -------------------------------------------------------------------------------
# NNI 3.0's nnictl/common_utils.SimplePreemptiveLock (the lock on ~/nni-experiments/.experiment that every
# NasExperiment.start() and config_utils.Experiments() take) subclasses filelock.SoftFileLock and overrides its
# private _acquire/_release with filelock < 3.12's internals; nni pins filelock<3.12 for it. With a newer filelock
# (nni installed with --no-deps, as on a GPU image, or filelock upgraded later; seen with 4.3.1) the lock never counts
# as held and the first `with lock:` polls forever, printing nothing: `lvbert supernet train` hung so after NNI's
# start-up lines on the H200 (issue #14) and in a Python 3.12 copy of its packages here. PidFileLock keeps NNI's
# protocol (a holder writes <lock>.<pid>; a holder's file older than `stale` seconds is ignored), so it and nnictl
# processes still exclude each other, without filelock.
# nnictl itself (another process) still needs filelock<3.12: `pip install 'filelock<3.12'` where `pip check` says so.
# Drop when: NNI's lock works with the installed filelock; then remove use_pid_file_lock()'s calls.
class PidFileLock:
    """nnictl's experiment-list lock (<lock_file>.<pid> marks the holder) without filelock; re-entrant."""

    def __init__(self, lock_file: str, stale: float = -1, poll: float = 0.05):
        self.lock_file, self.stale, self.poll = str(lock_file), stale, poll
        self.own = f"{self.lock_file}.{os.getpid()}"
        self._fd: int | None = None
        self._depth = 0

    @property
    def is_locked(self) -> bool:
        return self._fd is not None

    def _fresh(self, name: str) -> bool:
        try:
            return self.stale < 0 or time.time() - os.stat(name).st_mtime < self.stale
        except OSError:  # released meanwhile
            return False

    def acquire(self) -> PidFileLock:
        while self._depth == 0:
            if not any(self._fresh(name) for name in glob.glob(glob.escape(self.lock_file) + ".*")):
                try:
                    self._fd = os.open(self.own, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_TRUNC)
                    break
                except FileExistsError:  # another holder won the race, or a stale file of a dead process with our pid
                    if not self._fresh(self.own):
                        try:
                            os.remove(self.own)
                        except OSError:
                            pass
                        continue
            time.sleep(self.poll)
        self._depth += 1
        return self

    def release(self) -> None:
        if self._depth == 0:
            return
        self._depth -= 1
        if self._depth == 0:
            os.close(self._fd)
            self._fd = None
            try:
                os.remove(self.own)
            except OSError:
                pass

    __enter__ = acquire

    def __exit__(self, *exc) -> None:
        self.release()


def use_pid_file_lock() -> None:
    from nni.tools.nnictl import common_utils

    common_utils.SimplePreemptiveLock = PidFileLock  # get_file_lock() looks the class up at each call


def check_nnictl_filelock() -> None:
    """A clear error instead of an nnictl process that waits forever on NNI's lock (see above)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("filelock")
    except PackageNotFoundError:
        return
    major_minor = tuple(int(part) for part in re.findall(r"\d+", found)[:2])
    if major_minor >= (3, 12):
        raise UserError(f"nnictl (NNI 3.0) waits forever on its experiment lock with filelock {found}; NNI needs "
                        "filelock<3.12: pip install 'filelock<3.12'")


# --- NasExperiment: logging, stop, checkpoint loading ------------------------------------------------------------
# NNI 3.0's NasExperiment logs every step at INFO and warns "`training_service` will be ignored for sequential
# execution engine." at each start; after run() the experiment stays "running" until an atexit stop() that logs into
# closed streams. NasExperiment.resume loads its checkpoint with TorchSerializer.load = torch.load(path), torch's
# default weights_only (False before torch 2.6: unpickles anything); ours loads the same files with weights_only=True.
# NNI's one-shot strategy warns "Checkpoint callback is found to be None in evaluator trainer." at each start: our
# trainers write their own atomic checkpoints (training.atomic_checkpoint_callback) and resume from those, not from
# NNI's experiment checkpoint, so the warning only misleads; that one message is filtered out.
# Drop when: run() is quiet at WARNING and stops itself, and TorchSerializer.load (nni/nas/utils/serializer.py)
# passes weights_only=True; then call NasExperiment(...).run() directly.
NO_CHECKPOINT_CALLBACK = "Checkpoint callback is found to be None in evaluator trainer."


class DropMessage(logging.Filter):  # also training.quiet_lightning's
    def __init__(self, message: str):
        super().__init__()
        self.message = message

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != self.message


_DROP_NO_CHECKPOINT_CALLBACK = DropMessage(NO_CHECKPOINT_CALLBACK)


# NNI 3.0's sequential engine and Strategy.run() log every exception that leaves a model's training at ERROR
# ("Model 1 fails to be executed.", "Strategy failed to execute.") before re-raising it, also the `Interrupted` a
# Ctrl-C raises after the training kept its step (interrupt.py), which `lvbert` reports in one line of its own.
# Drop when: NNI lets an exception type pass silently (or logs only Exceptions, not BaseExceptions).
NNI_FAILURE_LOGGERS = ("nni.nas.execution.sequential", "nni.nas.strategy.base")


class DropWhileInterrupted(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        from ..interrupt import requested

        return not requested()


_DROP_WHILE_INTERRUPTED = DropWhileInterrupted()


def quiet_nni_logging() -> None:  # raises levels only: a caller may have set a quieter one
    for name, level in (("nni", logging.WARNING), ("nni.nas.experiment.config.experiment", logging.ERROR)):
        logger = logging.getLogger(name)
        logger.setLevel(max(logger.level, level))
    logging.getLogger("nni.nas.oneshot.pytorch.strategy").addFilter(_DROP_NO_CHECKPOINT_CALLBACK)  # added once
    for name in NNI_FAILURE_LOGGERS:
        logging.getLogger(name).addFilter(_DROP_WHILE_INTERRUPTED)  # added once


class WeightsOnlyTorchSerializer:
    """NNI's Serializer protocol (suffix, save, load): TorchSerializer's files, loaded with weights_only=True."""

    suffix = ".torch"

    def save(self, checkpoint: Any, path: Path) -> None:
        import torch

        torch.save(checkpoint, str(path) + self.suffix)

    def load(self, path: Path) -> Any:
        import torch

        file = Path(str(path) + self.suffix)
        if not file.is_file():  # what NasExperiment.load_checkpoint expects for "no checkpoint"
            raise FileNotFoundError(f"No file found with prefix {path} and suffix {self.suffix}.")
        return torch.load(str(file), weights_only=True)


def use_weights_only_serializer() -> None:
    from nni.nas.utils.serializer import get_default_serializer, set_default_serializer

    if not isinstance(get_default_serializer(), WeightsOnlyTorchSerializer):
        set_default_serializer(WeightsOnlyTorchSerializer())


def run_nas_experiment(space, evaluator, strategy, workdir: Path, config=None, max_trials: int | None = None):
    """NasExperiment(space, evaluator, strategy, config).run() with NNI's files under workdir, its manifest entry
    included (see below), stopped after (also after an error, so the manifest says so); returns the experiment.
    `max_trials` bounds a multi-trial strategy's trials."""
    from nni.nas.experiment import NasExperiment

    use_weights_only_serializer()
    use_pid_file_lock()
    quiet_nni_logging()  # before NasExperiment(): it logs its inferred config at INFO
    workdir = Path(workdir).resolve()
    exp = NasExperiment(space, evaluator, strategy, config=config)
    exp.config.experiment_working_directory = str(workdir)
    if max_trials is not None:
        exp.config.max_trial_number = max_trials
    with manifest_in(workdir):
        try:
            exp.run()
        finally:
            exp.stop()
            if in_multi_trial():  # the sequential engine's last sample, left as the current parameter (strategies.py)
                clear_trial_parameter()
    return exp


# --- The manifest entry of an experiment without an NNI manager ---------------------------------------------------
# NNI 3.0's NasExperiment.start()/stop() without an NNI manager (every in-process supernet training and search,
# also inside an nnictl trial) add an entry to nnictl's experiment list, ~/nni-experiments/.experiment, and never
# remove it. Each config_utils.Experiments() re-reads that whole file through json_tricks' comment stripper, six
# times per run: 3,210 such entries from a few weeks of runs and tests made every `lvbert search run` 5 s slower here
# (0.85 s per read) and every nnictl command slower too. The entries have no manager, port or web UI: nnictl can
# neither show their trials nor stop or resume them. So each run keeps its entry in its own working directory
# (<workdir>/.experiment). Entries made before this stay in the user's list (`nnictl experiment delete` would also
# delete their folders, the runs' nni/ folders). Drop when: NNI stops listing manager-less experiments, or reads the
# list in time independent of its size.
@contextlib.contextmanager
def manifest_in(workdir: Path):
    """While active, NasExperiment's manifest (config_utils.Experiments) is `workdir`/.experiment."""
    import functools

    import nni.nas.experiment.experiment as nas_experiment
    from nni.tools.nnictl.config_utils import Experiments

    original = nas_experiment.Experiments
    nas_experiment.Experiments = functools.partial(Experiments, home_dir=str(workdir))
    try:
        yield
    finally:
        nas_experiment.Experiments = original


# --- nnictl experiments: manifest, trial database, command output ------------------------------------------------
# NNI 3.0 has no Python API to read a stopped experiment's trials, and `nnictl create/resume` print the new ID only as
# text. Used: the manifest (nni.tools.nnictl.config_utils.Experiments, `logDir`), the SQLite file <logDir>/<id>/db/
# nni.sqlite (tables TrialJobEvent, MetricData, ExperimentProfile) and "Experiment ID: <id>" / "experiment id is <id>".
# (search/nnictl.py's read_trial_db reads that database: a final metric goes with the parameter id it was reported for.)
# Drop when: NNI can export a stopped experiment's trials without its manager, and nnictl prints machine-readable IDs.
def experiment_dir(exp_id: str) -> Path:
    """Where nnictl keeps an experiment (its log directory from NNI's experiment manifest)."""
    from nni.tools.nnictl.config_utils import Experiments

    use_pid_file_lock()
    info = Experiments().get_all_experiments().get(exp_id)
    if info is None:
        raise UserError(f"unknown NNI experiment {exp_id!r} (see `nnictl experiment list --all`)")
    root = Path(info.get("logDir") or Path.home() / "nni-experiments")
    path = root if (root / "db").is_dir() else root / exp_id
    if not (path / "db" / "nni.sqlite").is_file():
        raise UserError(f"experiment {exp_id} has no trial database at {path / 'db' / 'nni.sqlite'}")
    return path


def experiment_id_in(output: str) -> str | None:
    """The experiment ID in the (colourless) output of `nnictl create` / `nnictl resume`, or None."""
    match = re.search(r"Experiment ID:\s*(\w+)", output) or re.search(r"experiment id is\s+(\w+)", output)
    return match.group(1) if match else None
