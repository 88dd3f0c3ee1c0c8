"""Ctrl-C, one way for every command: finish the current step, keep it, say how to continue.

`cli.main` installs the SIGINT handler. While a Lightning training listens (`listening()`, around every `fit`), the
first Ctrl-C only asks it to stop: at the end of the step it is in, the training writes checkpoints/last.ckpt and
raises `Interrupted` (trainer.py's checkpoint callback), so nothing but the current step is lost. Anywhere else (data
preparation, scoring, a search) Ctrl-C raises KeyboardInterrupt at once, as Python does; so does a second Ctrl-C.
Either way `cli.main` ends with one line, `interrupted at step N; continue with: <command>`, and exit status 130.

`Interrupted` is a BaseException on purpose: Lightning turns a KeyboardInterrupt inside `fit` into `sys.exit(1)`,
and NNI's engines report any Exception as a failed model; Lightning re-raises other BaseExceptions as they are.
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading

from .ranks import launcher_is_rank_zero

_state = {"listening": 0, "requested": False, "at": None}


class Interrupted(BaseException):
    """A training stopped by Ctrl-C after writing its checkpoint; `at` says where ("step 120")."""

    def __init__(self, at: str):
        super().__init__(at)
        self.at = at


def _handler(signum, frame):
    if _state["listening"] and not _state["requested"]:
        _state["requested"] = True
        if launcher_is_rank_zero():  # a terminal's Ctrl-C reaches every DDP rank: one says it
            print("\nstopping after this step (Ctrl-C again to stop at once)", file=sys.stderr, flush=True)
        return
    raise KeyboardInterrupt


def install() -> None:
    """Route SIGINT through `_handler` (main thread only; elsewhere Python's default stays)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _handler)
    _state.update(listening=0, requested=False, at=None)


@contextlib.contextmanager
def listening():
    """While active, the first Ctrl-C asks the training to stop after its step instead of raising."""
    _state["listening"] += 1
    try:
        yield
        _state["at"] = None  # finished: a later Ctrl-C is not "at" this training's step
    finally:
        _state["listening"] -= 1


def requested() -> bool:
    return _state["requested"]


def note(at: str) -> None:
    """Where the work stands ("step 40", "candidate 12"): the final line's `interrupted at ...`."""
    _state["at"] = at


def where() -> str | None:
    return _state["at"]


def stop_requested(trainer) -> bool:
    """Whether to stop this step: asked in any rank of a DDP run (every rank stops at the same step)."""
    if trainer.world_size > 1:
        return bool(trainer.strategy.reduce_boolean_decision(requested(), all=False))
    return requested()
