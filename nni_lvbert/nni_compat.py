"""Every workaround for NNI 3.0 behaviour, in one module (checked with nni 3.0, torch 2.13, pytorch-lightning 2.6).

Each block says which NNI 3.0 behaviour it covers and how to drop it. After an NNI upgrade run
`pytest tests/test_nni_compat.py` first: it checks that each workaround still does what it claims and that the NNI
internals it touches still exist, so a changed internal fails there, loudly. Importing this module imports no NNI
(the CLI installs the warning filter before any NNI import). The project's own NNI classes live with their stage
(supernet/strategy.py: the seeded SPOS strategy; search/strategy.py: strategies and the sample evaluator;
search/nnictl.py: reading a stopped experiment's trials); their blocks here say which NNI behaviour they work around.
"""
from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from .errors import UserError

# --- Import warning --------------------------------------------------------------------------------------------
# NNI 3.0 regenerates its torch.nn stub (nni/nas/nn/pytorch/layers.py) when torch's version differs from the stub's
# and warns "<class ...> is found to be not a nn.Module" (RuntimeWarning) for each non-Module class in torch.nn
# (torch 2.13: Buffer, LinearCrossEntropyOptions). Harmless. pyproject.toml's pytest filterwarnings repeats it.
# Drop when: `python -W error::RuntimeWarning -c "import nni.nas.nn.pytorch"` passes (drop pyproject's line too).
NOT_A_MODULE_WARNING = ".*is found to be not a nn.Module.*"


def ignore_nni_import_warnings() -> None:
    warnings.filterwarnings("ignore", message=NOT_A_MODULE_WARNING)


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
        from .interrupt import requested

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


def run_nas_experiment(space, evaluator, strategy, workdir: Path, config=None):
    """NasExperiment(space, evaluator, strategy, config).run() with NNI's files under workdir, its manifest entry
    included (see below), stopped after (also after an error, so the manifest says so); returns the experiment."""
    from nni.nas.experiment import NasExperiment

    use_weights_only_serializer()
    use_pid_file_lock()
    quiet_nni_logging()  # before NasExperiment(): it logs its inferred config at INFO
    workdir = Path(workdir).resolve()
    exp = NasExperiment(space, evaluator, strategy, config=config)
    exp.config.experiment_working_directory = str(workdir)
    with manifest_in(workdir):
        try:
            exp.run()
        finally:
            exp.stop()
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


# --- Reporting from an nnictl trial that runs a NasExperiment ----------------------------------------------------
# NNI 3.0's sequential engine runs each model inside Evaluator.mock_runtime, which swaps the default trial command
# channel for an in-process one and overwrites the private `nni.trial._params`: reports made during exp.run() are
# swallowed (intermediate) or sent with the engine's parameter id (final). TrialReporter keeps the outer channel and
# record and puts them back around each report. NNI has no "am I an nnictl trial" call: get_experiment_id() returns
# "STANDALONE" outside one.
# Drop when: reports made inside NasExperiment.run() reach nnictl with the trial's own parameter id
# (tests/test_supernet_nnictl.py passes with plain nni.report_intermediate_result / report_final_result calls).
def in_nni_trial() -> bool:
    if "nni" not in sys.modules and not os.environ.get("NNI_EXP_ID"):  # what NNI reads on import: no trial, and
        return False  # no NNI import (seconds) before a command's input errors
    import nni

    return nni.get_experiment_id() != "STANDALONE"


class TrialReporter:
    """Reports to nnictl, also from inside `NasExperiment.run()`. Create it before the run."""

    def __init__(self):
        import nni.trial
        from nni.runtime.trial_command_channel import get_default_trial_command_channel

        self.channel, self.params = get_default_trial_command_channel(), nni.trial._params

    def _send(self, report: str, metric) -> None:
        import nni.trial
        from nni.runtime import trial_command_channel as tcc

        inner, inner_params = tcc.get_default_trial_command_channel(), nni.trial._params
        tcc.set_default_trial_command_channel(self.channel)
        nni.trial._params = self.params
        try:
            getattr(nni, report)(metric)
        finally:
            tcc.set_default_trial_command_channel(inner)
            nni.trial._params = inner_params

    def intermediate(self, metric) -> None:
        self._send("report_intermediate_result", metric)

    def final(self, metric) -> None:
        self._send("report_final_result", metric)


# --- Tuner after `nnictl resume` ---------------------------------------------------------------------------------
# NNI 3.0's MsgDispatcher (nni/runtime/msg_dispatcher.py) re-runs the trials that were running when the experiment
# stopped, but handle_add_customized_trial only records their parameter ids and handle_trial_end drops the end of any
# previous-session id (only a final result reaches the tuner, as import_data): the tuner never learns which
# candidates run again, nor that one failed without a result.
# The patch calls the tuner's optional hooks resumed_trials(parameters) / resumed_trial_end(parameters, success).
# Drop when: the dispatcher tells the tuner about re-run trials; tests/test_tuner_resume.py passes without the patch.
def watch_resumed_trials() -> None:
    import nni
    from nni.runtime.msg_dispatcher import MsgDispatcher

    if getattr(MsgDispatcher, "_lvbert_watches_resumed", False):
        return
    add_resumed, trial_end = MsgDispatcher.handle_add_customized_trial, MsgDispatcher.handle_trial_end

    def handle_add_customized_trial(self, data):
        add_resumed(self, data)
        hook = getattr(self.tuner, "resumed_trials", None)
        if hook is not None:
            trials = [nni.load(t) if isinstance(t, str) else t for t in (data if isinstance(data, list) else [data])]
            hook([t["parameters"] for t in trials if isinstance(t.get("parameter_id"), int)])

    def handle_trial_end(self, data):
        parameter_id = nni.load(data["hyper_params"])["parameter_id"]
        hook = getattr(self.tuner, "resumed_trial_end", None)
        if hook is not None and self.is_created_in_previous_exp(parameter_id):
            hook(self.get_previous_param(parameter_id), data["event"] == "SUCCEEDED")
        trial_end(self, data)

    MsgDispatcher.handle_add_customized_trial = handle_add_customized_trial
    MsgDispatcher.handle_trial_end = handle_trial_end
    MsgDispatcher._lvbert_watches_resumed = True


# --- A tuner that cannot go on --------------------------------------------------------------------------------------
# NNI 3.0 gives a tuner no way to fail its experiment with a message. A tuner that keeps handing out trials whose
# every run fails lets the experiment end DONE with `errors: []` (the cause only in each trial's stderr); an exception
# in a tuner callback ends the dispatcher thread silently (msg_dispatcher_base.command_queue_worker). The dispatcher's
# own report_error (the `ER` command) makes NNI's manager set the experiment to ERROR, shown by `nnictl experiment
# show` and the web UI as "Dispatcher stream error, tuner may have crashed.", with our message logged in the
# experiment's log/nnimanager.log ("Dispatcher error: ...") and log/dispatcher.log.
# The patch: a tuner's trial_end may raise TunerGaveUp; the dispatcher then reports it (with the failed trial's
# last error line from <experiment>/environments/<env>/trials/<trial id>/trial.stderr) and stops.
# Drop when: NNI lets a tuner end an experiment with an error of its own; tests/test_search_nnictl.py's failing
# experiment must still end ERROR with the trial's error line in the logs.
class TunerGaveUp(RuntimeError):
    """Raised by a tuner's trial_end when the experiment cannot succeed (e.g. its first trials all failed)."""


def trial_stderr(exp_dir: Path, trial: str = "*") -> list[Path]:
    """The stderr files of an experiment's trials (NNI 3.0's local service: environments/<env>/trials/<id>/
    trial.stderr), oldest first."""
    found = Path(exp_dir).glob(f"environments/*/trials/{trial}/trial.stderr")
    return sorted(found, key=lambda p: p.stat().st_mtime)


def trial_error_line(stderrs: list[Path]) -> str | None:
    """The last `error:` line (else the last line naming an Error) of the first of `stderrs` that has one."""
    for stderr in stderrs:
        line = _error_line(stderr)
        if line:
            return line
    return None


def _error_line(stderr: Path) -> str | None:
    """The last `error:` line of a trial's stderr (else the last line naming an Error), or None."""
    try:
        lines = [ln.strip() for ln in Path(stderr).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    errors = [ln for ln in lines if ln.startswith("error:")] or [ln for ln in lines if "Error" in ln]
    return errors[-1] if errors else None


def stop_when_tuner_gives_up() -> None:
    from nni.runtime.msg_dispatcher import MsgDispatcher

    if getattr(MsgDispatcher, "_lvbert_stops_on_give_up", False):
        return
    trial_end = MsgDispatcher.handle_trial_end

    def handle_trial_end(self, data):
        try:
            trial_end(self, data)
        except TunerGaveUp as exc:
            trial = data.get("trial_job_id")
            log_dir = os.environ.get("NNI_LOG_DIRECTORY")
            line = trial_error_line(trial_stderr(Path(log_dir).parent, trial)) if log_dir and trial else None
            message = f"{exc}: trial {trial} failed" + (f" with {line!r}" if line else "")
            logging.getLogger(__name__).error(message)
            self.report_error(message)
            raise

    MsgDispatcher.handle_trial_end = handle_trial_end
    MsgDispatcher._lvbert_stops_on_give_up = True


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


# --- Multi-trial strategies in process ---------------------------------------------------------------------------
# NNI 3.0's ExecutableModelSpace.execute() calls the evaluator's private `_execute(model)`, which instantiates the
# model; search/strategy.py's SampleEvaluator overrides it to score the sample on the shared supernet without building
# anything.
# Strategy.run() swallows KeyboardInterrupt and records it only in the private `_status`.
# Drop when: Evaluator has a public model-free hook and Strategy exposes its status (or re-raises the interrupt).
def strategy_interrupted(strategy) -> bool:
    from nni.nas.strategy.base import StrategyStatus

    return strategy._status == StrategyStatus.INTERRUPTED


# --- One-shot (SPOS / IOT) ---------------------------------------------------------------------------------------
# NNI 3.0's one-shot mutation refuses an already mutated space ("Module ... of type PathSamplingLayer has dangling
# mutables and is not supported"), e.g. a trained supernet from load_supernet handed to IOTStrategy.
# Drop when: RandomOneShot().mutate_model() accepts a mutated space (tests/test_nni_compat.py checks it refuses).
def keep_already_mutated(module, name, memo, mutate_kwargs):
    """Mutation hook: a path-sampling layer is already a supernet module; keep it."""
    from nni.nas.oneshot.pytorch.supermodule.base import BaseSuperNetModule

    return True if isinstance(module, BaseSuperNetModule) else None


# NNI 3.0's one-shot modules add their own parameters only as a separate optimizer
# (BaseOneShotLightningModule.configure_architecture_optimizers). IOT's predictor instead joins the evaluator's
# optimizer as a param group under its LambdaLR schedule; torch has no public way to give a scheduler a new group, so
# this extends LambdaLR's `base_lrs`, `lr_lambdas` and `_last_lr`.
# Drop when: NNI lets a one-shot module extend the evaluator's optimizer, or torch's LRScheduler accepts a new group.
def extend_lambda_lr(sched, optimizer) -> None:
    """Make `sched` (a LambdaLR) drive the group just added to `optimizer` with group 0's lambda."""
    import torch

    if not isinstance(sched, torch.optim.lr_scheduler.LambdaLR):
        raise TypeError(f"IOT can extend a LambdaLR schedule to the predictor, not {type(sched).__name__}")
    group = optimizer.param_groups[-1]
    group["initial_lr"] = group["lr"]
    sched.base_lrs.append(group["lr"])
    sched.lr_lambdas.append(sched.lr_lambdas[0])
    group["lr"] = group["initial_lr"] * sched.lr_lambdas[-1](sched.last_epoch)
    sched._last_lr = [g["lr"] for g in optimizer.param_groups]
