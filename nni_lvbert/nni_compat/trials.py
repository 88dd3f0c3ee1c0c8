"""NNI 3.0 workarounds in and around nnictl trials and tuners: reporting from a trial that runs a NasExperiment,
a tuner after `nnictl resume`, a tuner that cannot go on."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path


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


# --- Parameters of trials started together ----------------------------------------------------------------------
# NNI 3.0's local training service can hand two trials that start at the same moment each other's parameters: the
# trial job (web UI, REST trial-jobs, TrialJobEvent) lists parameter N while the process received parameter M and
# reports its metrics under M (MetricData.parameterId is right; seen with GridSearch and trialConcurrency 2,
# tests/test_standalone_nnictl.py). So a trial that trains a named thing reports the name in its final metric
# (study/trial.py: "model"), and results are matched by parameterId or by that name, never by the job's listing.
# Drop when: a trial job's listed parameters are always the ones its process received.


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
