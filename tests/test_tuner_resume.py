"""`nnictl resume` of a search experiment, driven through NNI's real MsgDispatcher the way NNI's manager drives it.

On resume the manager sends the finished trials' results (IMPORT_DATA), the trials that were running when the
experiment stopped (ADD_CUSTOMIZED_TRIAL_JOB; the manager re-runs them itself), then asks for new trials. The
replayed Algorithm 1 must run nothing twice, must not wait forever for a re-run that fails, and must end where an
uninterrupted search ends.
"""
from __future__ import annotations

import pytest
from nni.common import dump, load
from nni.runtime import msg_dispatcher as md
from nni.runtime.tuner_command_channel import CommandType

from nni_lvbert.search.tuner import LVBertEvolutionTuner

SLOTS, TYPES = 6, ("dc", "sa", "ff", "glu")
SPACE = {f"layer{i:02d}": {"_type": "choice", "_value": list(TYPES)} for i in range(SLOTS)}
KW = {"population": 6, "iterations": 4, "topk": 3, "crossover": 2, "mutation": 3, "seed": 3}  # budget 6 + 3 * 5 = 21


def score_of(params: dict) -> float:
    w = {"dc": 0.3, "sa": 0.5, "ff": 0.1, "glu": 0.2}
    return sum(w[v] * (1 + 0.1 * i) for i, v in enumerate(params.values())) + \
        sum(ord(c) * (i + 1) for i, c in enumerate("".join(params.values()))) % 997 * 1e-6


class Manager:
    """The part of NNI's manager that talks to the dispatcher: one experiment session (create or resume)."""

    def __init__(self, concurrency: int):
        md._next_parameter_id = 0  # a fresh dispatcher process
        md._trial_params.clear()
        md._customized_parameter_ids.clear()
        self.tuner = LVBertEvolutionTuner(**KW)
        self.dispatcher = md.MsgDispatcher("ws://_unittest_", self.tuner)
        self.dispatcher.send = self._receive
        self.concurrency = concurrency
        self.queue: list[tuple[int, dict]] = []  # (parameter id, parameters) submitted, not yet finished
        self.no_more = False

    def _receive(self, command, data):
        if command == CommandType.NewTrialJob:
            packed = load(data)
            self.no_more = False  # the tuner answers a request it had to owe (a generation barrier)
            self.queue.append((packed["parameter_id"], packed["parameters"]))
        elif command == CommandType.NoMoreTrialJobs:
            self.no_more = True

    def start(self, finished=(), running=()):
        self.dispatcher.handle_initialize(SPACE)
        if finished:
            self.dispatcher.handle_import_data([{"parameter": p, "value": dump({"default": s})} for p, s in finished])
        if running:
            self.dispatcher.handle_add_customized_trial(
                [{"parameter_id": pid, "parameter_source": "resumed", "parameters": p, "parameter_index": 0}
                 for pid, p in running])
            self.queue[:0] = list(running)
        self.dispatcher.handle_request_trial_jobs(self.concurrency)

    def finish_one(self, fail: bool = False) -> tuple[dict, float | None]:
        pid, params = self.queue.pop(0)
        score = None if fail else score_of(params)
        if not fail:
            self.dispatcher.handle_report_metric_data(
                {"parameter_id": pid, "trial_job_id": f"t{pid}", "type": "FINAL", "sequence": 0,
                 "value": dump({"default": score})})
        self.dispatcher.handle_trial_end({"trial_job_id": f"t{pid}", "event": "FAILED" if fail else "SUCCEEDED",
                                          "hyper_params": dump({"parameter_id": pid, "parameters": params})})
        if not self.no_more:
            self.dispatcher.handle_request_trial_jobs(1)
        return params, score


def arch(params: dict) -> tuple:
    return tuple(params[f"layer{i:02d}"] for i in range(SLOTS))


def run_to_end(manager: Manager, finished: list, fail_first: bool = False) -> None:
    first = True
    while manager.queue:
        params, score = manager.finish_one(fail=fail_first and first)
        first = False
        finished.append((params, score))


@pytest.fixture(scope="module")
def uninterrupted():
    manager = Manager(concurrency=2)
    manager.start()
    finished: list = []
    run_to_end(manager, finished)
    assert manager.tuner.algorithm.finished and len(finished) == 21
    return finished, manager.tuner.best()


@pytest.mark.parametrize("stop_after", [3, 6, 10, 17])
def test_resume_runs_nothing_twice_and_ends_like_an_uninterrupted_search(uninterrupted, stop_after):
    reference, best = uninterrupted
    first = Manager(concurrency=2)
    first.start()
    finished = [first.finish_one() for _ in range(stop_after)]
    running = list(first.queue)  # the experiment stops with these trials running
    assert running

    second = Manager(concurrency=2)
    second.start(finished=finished, running=running)
    run_to_end(second, finished)

    archs = [arch(p) for p, _ in finished]
    assert len(archs) == len(set(archs)), "an architecture was evaluated twice"
    assert sorted(archs) == sorted(arch(p) for p, _ in reference)
    assert second.tuner.algorithm.finished and second.no_more
    assert second.tuner.best() == best


def test_a_resumed_trial_that_fails_does_not_stall_the_search(uninterrupted):
    first = Manager(concurrency=2)
    first.start()
    finished = [first.finish_one() for _ in range(4)]  # generation 0 (6 candidates) is still being scored
    running = list(first.queue)

    second = Manager(concurrency=2)
    second.start(finished=finished, running=running)
    run_to_end(second, finished, fail_first=True)  # the first re-run trial fails without a result

    archs = [arch(p) for p, _ in finished]
    assert len(archs) == len(set(archs)) == 21
    assert second.tuner.algorithm.finished and second.no_more
    assert sum(s is None for _, s in finished) == 1


def test_a_trial_end_that_overtakes_its_result_keeps_the_score():
    """Results and trial ends come from two dispatcher threads: a SUCCEEDED end may arrive first."""
    tuner = LVBertEvolutionTuner(**KW)
    tuner.update_search_space(SPACE)
    params = tuner.generate_parameters(0)
    tuner.trial_end(0, True)
    tuner.receive_trial_result(0, params, {"default": 0.5})
    assert tuner.algorithm.scores[arch(params)] == 0.5


def test_a_first_trial_that_fails_stops_the_experiment_with_its_error(tmp_path, monkeypatch):
    """A trial that fails before any trial reported a score (no supernet, say) ends the experiment with an error
    through NNI's ER command (status ERROR), naming the trial's error line; after one success a failure is a
    candidate without a score, as before."""
    from nni_lvbert.nni_compat import TunerGaveUp

    exp = tmp_path / "exp"
    (exp / "log").mkdir(parents=True)
    monkeypatch.setenv("NNI_LOG_DIRECTORY", str(exp / "log"))
    manager = Manager(concurrency=1)
    sent = []
    manager.dispatcher.send = lambda command, data: sent.append((command, data)) or manager._receive(command, data)
    manager.start()
    pid, params = manager.queue.pop(0)
    (exp / "environments" / "local-env" / "trials" / f"t{pid}").mkdir(parents=True)
    (exp / "environments" / "local-env" / "trials" / f"t{pid}" / "trial.stderr").write_text("loading\nerror: supernet directory not found: ../x\n")
    with pytest.raises(TunerGaveUp):
        manager.dispatcher.handle_trial_end({"trial_job_id": f"t{pid}", "event": "FAILED",
                                             "hyper_params": dump({"parameter_id": pid, "parameters": params})})
    errors = [data for command, data in sent if command == CommandType.Error]
    assert len(errors) == 1 and "before any trial reported a score" in errors[0]
    assert f"trial t{pid} failed with 'error: supernet directory not found: ../x'" in errors[0]

    ok = Manager(concurrency=1)
    ok.start()
    ok.finish_one()
    params, score = ok.finish_one(fail=True)  # after a success: a candidate without a score, the search goes on
    assert score is None and ok.queue
