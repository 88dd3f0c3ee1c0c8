"""A fair share of this machine's CPU cores for each computing process (torch's intra-op threads).

Why: torch sizes its thread pool to the whole machine and OpenMP's workers spin-wait between parallel regions. Two
trainings on one 2-core machine (measured: `lvbert supernet train --size tiny --max-steps 80`) then take 63.5 s each
instead of 11-12.5 s alone, an aggregate throughput of 0.39x one alone; with OMP_WAIT_POLICY=PASSIVE 18.6 s each
(1.34x), with one thread each 17.8 s each. The project starts such neighbours itself (nnictl trials with
`--trial-concurrency N`, a study's workers) and a user starts a second run beside a first (issue 55 item 2).

The threads of a process (`settle`), first that applies:

1. an explicit `--threads N` (`explicit`);
2. OMP_NUM_THREADS set in the environment: the user's (torch reads it itself; we do not override it);
3. a known number of concurrent trainings on this machine (`concurrency`, or $LVBERT_CONCURRENCY: an nnictl
   experiment's trialConcurrency, a study's workers): cores // N;
4. the lvbert processes computing on this machine right now (the registry below, this one included): cores // N.

At least 1. With one computing process (3 or 4 giving N = 1) torch keeps its own choice: a lone run computes as it
always did. A process that started alone keeps its threads when a second one starts; the second takes the share.
Decided once per command (a study's trainings keep the study's), recorded in meta.json (`cpu_threads_decision`)
and not stored in options.json: a --resume decides again, on the machine as it is then.

The registry: one file per computing process, named by its pid, in `~/.cache/nni-lvbert/running/` (or
$LVBERT_CACHE/running/), holding the process's start time (so a reused pid is not mistaken for it); files of dead
processes are ignored and removed; a process removes its own at exit.

OMP_WAIT_POLICY=PASSIVE (`quiet_spinning`): `lvbert` sets it (never overriding a value the user set) before torch is
imported when another lvbert process is computing, so that idle OpenMP workers sleep instead of spinning on cores
the neighbour needs. It must be set before the OpenMP runtime loads (it reads the variable once), so only a process
starting beside another can have it; a lone run keeps OpenMP's default, as before.
nnictl trials, which do not run through `lvbert`'s main, do the same first (`start_trial`).
"""
from __future__ import annotations

import atexit
import os
import re
from pathlib import Path

from .data.cache import CACHE_ENV, DEFAULT_CACHE
from .errors import UserError

CONCURRENCY_ENV = "LVBERT_CONCURRENCY"  # concurrent trainings on this machine, when whoever starts them knows
REGISTRY = "running"
HELP = ("torch CPU threads (default: a fair share of the cores: $OMP_NUM_THREADS if set, else cores / the trainings "
        "known to run at once, else cores / the lvbert processes computing on this machine; torch's own choice "
        "when alone)")

_decision: dict | None = None  # this command's (`settle`), for meta.json
_torch_default: int | None = None  # torch's own choice, before any `settle` changed it
_registered: set[Path] = set()


def cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def registry_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    return Path(cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser() / REGISTRY


def _started(pid: int) -> str:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22); "" where there is no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill(pid, 0) there sends CTRL_C_EVENT: no probe, a registered process counts
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OSError:
        return False
    return True


def register(pid: int | None = None, cache_dir=None) -> Path | None:
    """Record `pid` (default: this process) as computing; this process's own file is removed at exit. None when
    the cache cannot be written (a read-only home): the share then counts without this process."""
    pid = pid or os.getpid()
    folder = registry_dir(cache_dir)
    path = folder / str(pid)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(_started(pid))
    except OSError:
        return None
    if pid == os.getpid() and path not in _registered:
        _registered.add(path)
        atexit.register(unregister, path)
    return path


def unregister(path: Path) -> None:
    path.unlink(missing_ok=True)
    _registered.discard(path)


def computing(cache_dir=None) -> list[int]:
    """The pids of the lvbert processes computing on this machine now; stale files (dead or reused pids) removed."""
    live = []
    for path in registry_dir(cache_dir).glob("*"):
        if not path.name.isdigit():
            continue
        pid = int(path.name)
        try:
            same = path.read_text() == _started(pid)
        except OSError:
            continue
        if _alive(pid) and same:
            live.append(pid)
        else:
            path.unlink(missing_ok=True)
    return sorted(live)


def others_computing(cache_dir=None) -> bool:
    return any(pid != os.getpid() for pid in computing(cache_dir))


def fair_share(explicit: int | None = None, concurrency: int | None = None, env=None, running: int | None = None,
               n_cores: int | None = None) -> tuple[int | None, str]:
    """(threads, why): the rules of the module docstring; threads None = torch's own choice (a lone process).
    `running`: the computing processes (default: the registry's count, at least this one)."""
    env = os.environ if env is None else env
    n_cores = n_cores or cores()
    if explicit is not None:
        return explicit, "--threads"
    if env.get("OMP_NUM_THREADS", "").strip().isdigit() and int(env["OMP_NUM_THREADS"]) > 0:
        return int(env["OMP_NUM_THREADS"]), "$OMP_NUM_THREADS"
    if concurrency is None and str(env.get(CONCURRENCY_ENV, "")).strip().isdigit():
        concurrency = int(env[CONCURRENCY_ENV])
    if concurrency is not None and concurrency > 0:
        n, why = concurrency, f"{concurrency} concurrent trainings known"
    else:
        n = max(1, len(computing()) if running is None else running)
        why = f"{n} lvbert process{'es' if n > 1 else ''} computing on this machine"
    if n <= 1:
        return None, f"{why}: alone, torch's own choice"
    return max(1, n_cores // n), f"{why}: {n_cores} cores / {n}"


def settle(explicit: int | None = None, concurrency: int | None = None) -> dict:
    """Give this process its threads (`fair_share`; registered as computing first) and remember why (`decision`).
    Once per command (`release` ends it): a later call without `explicit` keeps the first decision (a study's
    --threads stays for its trainings)."""
    global _decision, _torch_default
    import torch  # the caller computes with torch anyway

    if explicit is not None and explicit < 1:
        raise UserError(f"--threads must be at least 1, got {explicit}")
    if _decision is not None and explicit is None:
        return _decision
    register()
    threads, why = fair_share(explicit, concurrency)
    _torch_default = _torch_default or torch.get_num_threads()
    threads = threads or _torch_default  # alone: torch's own choice (again, after an earlier command in-process)
    if threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    _decision = {"threads": torch.get_num_threads(), "cores": cores(), "why": why,
                 "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}
    return _decision


def release() -> None:
    """The end of a command (`lvbert`'s main, in-process callers included): this process no longer computes, and
    the next command decides its threads anew."""
    global _decision
    _decision = None
    for path in list(_registered):
        unregister(path)


def decision() -> dict | None:
    """This process's `settle` decision (meta.json's cpu_threads_decision); None before one."""
    return _decision


def quiet_spinning() -> bool:
    """Before torch is imported (`lvbert`'s main): register this process as computing and, when another lvbert
    process is computing, set OMP_WAIT_POLICY=PASSIVE unless the user set it (see the module docstring). True when
    set here."""
    register()
    if "OMP_WAIT_POLICY" in os.environ or not others_computing():
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def config_concurrency(config: Path) -> int | None:
    """The trialConcurrency of an nnictl experiment config (a plain `trialConcurrency: N` line), None if absent."""
    try:
        m = re.search(r"(?m)^trialConcurrency:\s*(\d+)\s*$", Path(config).read_text(encoding="utf-8"))
    except OSError:
        return None
    return int(m.group(1)) if m else None


def per_trial(concurrency: int | None) -> int | None:
    """Threads of each of `concurrency` trials on this machine (cores // N, at least 1); None for one trial."""
    return max(1, cores() // concurrency) if concurrency and concurrency > 1 else None


def start_trial(config: Path | None = None) -> None:
    """The start of an nnictl trial (not run through `lvbert`'s main), before torch is imported: `quiet_spinning`,
    and the trialConcurrency of experiment `config` (when given) as the known concurrency of `fair_share`
    ($LVBERT_CONCURRENCY, unless set)."""
    n = config_concurrency(config) if config else None
    if n:
        os.environ.setdefault(CONCURRENCY_ENV, str(n))
    quiet_spinning()
