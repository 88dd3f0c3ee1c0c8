"""The nnictl path: search-space JSON, a checked `nnictl create` wrapper, and exporting the best trial.

`experiments/search.yml` (shipped with the package; `lvbert init-experiment DIR` copies it out) is an
HPO-style NNI config (NAS-style nnictl configs never start their strategy on NNI 3.0): `searchSpaceFile` (generated
from the ModelSpace), the Algorithm-1 tuner (`tuner.LVBertEvolutionTuner`, imported by name from the installed
package) and a trial command (`python -m nni_lvbert.search.trial`) that scores one architecture of the supernet
named by $LVBERT_SUPERNET.

`lvbert search nnictl` checks the port and the supernet first (one clear line on failure), writes a copy of the
config with absolute paths and the requested overrides next to the experiment logs, binds the web UI to 127.0.0.1
(NNI's manager listens on every interface; a Node preload script passes the host to `listen`) and runs
`nnictl create`.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from ..errors import UserError
from ..nni_compat import check_nnictl_filelock, experiment_dir, experiment_id_in, trial_error_line, trial_stderr
from ..resources import BIND_JS_FILE, SEARCH_CONFIG
from ..threads import per_trial

# the packaged config (experiments/search.yml) is the default of `lvbert search nnictl`
DEFAULT_CONFIG = SEARCH_CONFIG

# BIND_JS_FILE (experiments/bind_localhost.js) is loaded by NNI's Node process (NODE_OPTIONS=--require):
# every server that listens on a bare port listens on $NNI_BIND_HOST (default 127.0.0.1) instead of all interfaces.


def space_json(space="lvbert") -> dict:
    """The nnictl search space of a search space (name, YAML path or SpaceSpec), generated from the NNI ModelSpace."""
    from ..config import ModelConfig, SpaceSpec, load_space
    from ..space import LVBertSpace

    spec = space if isinstance(space, SpaceSpec) else load_space(space)
    # the choices do not depend on the model size: build the smallest valid space
    cfg = ModelConfig(vocab_size=8, hidden_size=8, embedding_size=8, ff_size=8, num_heads=1, conv_head_size=8,
                      max_length=8, max_position=8)
    return LVBertSpace(spec, cfg).search_space_json()


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    for addr in (host, "0.0.0.0"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # like the server: a port whose last connections are in TIME_WAIT (a just-stopped experiment) is free
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((addr, port))
            except OSError:
                return False
    return True


def _nnictl() -> str:
    check_nnictl_filelock()
    exe = Path(sys.executable).with_name("nnictl")
    if exe.is_file():
        return str(exe)
    found = shutil.which("nnictl")
    if not found:
        raise UserError("nnictl not found (pip install nni==3.0)")
    return found


def derived_config(config: Path, supernet: Path, overrides: dict, workdir: Path | None) -> dict:
    """The config with absolute paths, the supernet in the trial command and the overrides applied."""
    from ..config import read_yaml

    data = read_yaml(config, "config")
    base = config.resolve().parent

    def absolute(p):
        return str((base / os.path.expanduser(str(p))).resolve())

    for key in ("searchSpaceFile", "trialCodeDirectory", "experimentWorkingDirectory"):
        if data.get(key):
            data[key] = absolute(data[key])
    tuner = data.get("tuner") or {}
    if tuner.get("codeDirectory"):
        tuner["codeDirectory"] = absolute(tuner["codeDirectory"])
    if workdir is not None:
        data["experimentWorkingDirectory"] = str(workdir.resolve())
    data["trialCommand"] = f"{sys.executable} -m nni_lvbert.search.trial --supernet {supernet.resolve()}" + (
        " " + overrides.pop("trial_args") if overrides.get("trial_args") else "")
    overrides.pop("trial_args", None)
    for key in ("maxTrialNumber", "trialConcurrency", "trialGpuNumber", "experimentName"):
        if overrides.get(key) is not None:
            data[key] = overrides.pop(key)
    class_args = {k: v for k, v in overrides.items() if v is not None}
    if class_args:
        tuner.setdefault("classArgs", {}).update(class_args)
        if {"max_params", "max_flops", "max_latency_ms"} & set(class_args):
            tuner["classArgs"]["supernet"] = str(supernet.resolve())
    data["tuner"] = tuner
    return data


def create(args) -> dict:
    """`lvbert search nnictl`: checks, derived config, `nnictl create`."""
    import yaml

    from ..supernet.rundir import supernet_dir

    _check_port(args.port)
    supernet = Path(args.supernet)
    run = supernet_dir(supernet)  # missing / unfinished supernet -> one line
    spec = run.spec
    latency_device = "cuda" if args.trial_gpus else "cpu"  # where the trials score
    from .latency import LatencySearch

    LatencySearch.from_options(args.max_latency_ms, args.latency_table, False, run.cfg, spec, latency_device)
    config = Path(args.experiment_config)
    if args.trial_threads is not None and args.trial_threads < 1:
        raise UserError(f"--trial-threads must be at least 1, got {args.trial_threads}")
    if args.trial_gpus is not None and args.trial_gpus < 0:
        raise UserError(f"--trial-gpus must be >= 0, got {args.trial_gpus}")
    overrides = {"maxTrialNumber": args.max_trials, "trialConcurrency": args.concurrency,
                 "trialGpuNumber": args.trial_gpus,
                 "population": args.population, "iterations": args.iterations, "topk": args.topk,
                 # N_cro / N_mut follow a given population (P/2 each) unless given too
                 "crossover": args.crossover if args.crossover is not None or args.population is None
                 else args.population // 2,
                 "mutation": args.mutation if args.mutation is not None or args.population is None
                 else args.population - args.population // 2, "mutation_prob": args.mutation_prob,
                 "seed": args.seed, "max_params": args.max_params, "max_flops": args.max_flops,
                 "max_latency_ms": args.max_latency_ms,
                 "latency_table": str(Path(args.latency_table).resolve()) if args.latency_table else None,
                 "latency_device": latency_device if args.latency_table else None,
                 "trial_args": " ".join(a for a in (f"--val-tokens {args.val_tokens}" if args.val_tokens else "",
                                                    f"--threads {args.trial_threads}" if args.trial_threads else "")
                                        if a) or None}
    workdir = Path(args.out) if args.out else None
    data = derived_config(config, supernet, overrides, workdir)
    share = per_trial(data.get("trialConcurrency")) if args.trial_threads is None else None
    if share:  # trials side by side on this machine: a fair share of the cores each (threads.py)
        data["trialCommand"] += f" --threads {share}"
    from .algorithm import EvolutionConfig

    ca = data["tuner"].get("classArgs", {})
    EvolutionConfig(**{k: ca[k] for k in ("population", "iterations", "topk", "crossover", "mutation",
                                          "mutation_prob") if k in ca}).validate()  # budget 0 -> one line
    run_dir = Path(args.out or data.get("experimentWorkingDirectory") or Path.home() / "nni-experiments")
    run_dir.mkdir(parents=True, exist_ok=True)
    space_file = Path(data.get("searchSpaceFile") or run_dir / "search_space.json")
    generated = space_json(spec)
    if not space_file.is_file() or json.loads(space_file.read_text()) != generated:
        # the supernet's own space (the committed file is the default `lvbert` space)
        space_file = run_dir / f"search_space-{spec.name}.json"
        space_file.write_text(json.dumps(generated, indent=2) + "\n")
        data["searchSpaceFile"] = str(space_file)
    derived = run_dir / f"search-{args.port}.yml"
    derived.write_text(yaml.safe_dump(data, sort_keys=False))
    env = _localhost_env(run_dir, args.host)
    env["LVBERT_SUPERNET"] = str(supernet.resolve())
    exp_id = _run_nnictl([_nnictl(), "create", "--config", str(derived), "--port", str(args.port)], env,
                         f"nnictl create failed: {{}} (config {derived})")
    return {"experiment": exp_id, "web_ui": f"http://{args.host}:{args.port}", "config": str(derived),
            "stop": f"nnictl stop {exp_id}", "export": f"lvbert search export --experiment {exp_id} --supernet {supernet}"}


def resume(args) -> dict:
    """`lvbert search nnictl resume ID`: `nnictl resume` with the port checked and the web UI on 127.0.0.1.

    The tuner replays Algorithm 1 from the finished trials' scores (nothing is scored twice); trials that were
    running when the experiment stopped are re-run by NNI and awaited (see tuner.py)."""
    _check_port(args.port)
    exp_dir = experiment_dir(args.resume)
    env = _localhost_env(exp_dir.parent, args.host)
    cmd = [_nnictl(), "resume", args.resume, "--port", str(args.port), "--experiment_dir", str(exp_dir.parent)]
    exp_id = _run_nnictl(cmd, env, f"nnictl resume {args.resume} failed: {{}}")
    return {"experiment": exp_id, "web_ui": f"http://{args.host}:{args.port}", "stop": f"nnictl stop {exp_id}",
            "export": f"lvbert search export --experiment {exp_id}"}


def _check_port(port: int) -> None:
    if not 1 <= port <= 65535:
        raise UserError(f"port must be between 1 and 65535, got {port}")
    if not port_free(port):
        raise UserError(f"port {port} is already in use; pick another with --port")


def _localhost_env(folder: Path, host: str) -> dict:
    """Environment for nnictl whose Node process binds its servers to `host` (BIND_JS_FILE, copied to `folder`)."""
    preload = folder / "bind_localhost.js"
    preload.write_text(BIND_JS_FILE.read_text())
    env = dict(os.environ)
    env["NODE_OPTIONS"] = (env.get("NODE_OPTIONS", "") + f" --require {preload}").strip()
    env["NNI_BIND_HOST"] = host
    return env


def _run_nnictl(cmd: list[str], env: dict, failure: str) -> str:
    """Run an nnictl command that starts an experiment; its ID, or one clear line."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)  # its exit code is read below
    text = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
    exp_id = experiment_id_in(text)
    if proc.returncode != 0 or not exp_id:
        last = [line for line in text.splitlines() if line.strip() and "pkg_resources" not in line
                and "Warning" not in line]
        raise UserError(failure.format(last[-1].strip() if last else "no output"))
    return exp_id


# ---------------------------------------------------------------------------------------------- export
def read_trials(exp_dir: Path) -> tuple[list[dict], dict]:
    """(succeeded trials with parameters and final metric, experiment config) from the experiment's database."""
    params, finals, config = read_trial_db(exp_dir)  # NNI 3.0's SQLite layout (below)
    trials = []
    for trial_id, (parameter_id, value) in finals.items():  # the parameters the trial reported for (nni_compat)
        score = value.get("default") if isinstance(value, dict) else value
        if parameter_id in params and isinstance(score, (int, float)):
            trials.append({"trial": trial_id, "parameters": params[parameter_id], "score": float(score)})
    return trials, config


def supernet_from_config(config: dict) -> str:
    """The supernet an experiment's trials read: the `--supernet` of its trial command, with `${LVBERT_SUPERNET:-D}`
    taken as $LVBERT_SUPERNET when set, else D; a relative path is relative to the trial code directory."""
    import shlex

    command = config.get("trialCommand") or ""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    if "--supernet" not in words[:-1]:
        raise UserError("the experiment's trial command names no --supernet; pass --supernet RUN")
    value = words[words.index("--supernet") + 1]
    default = re.fullmatch(r"\$\{LVBERT_SUPERNET:-(.*)\}", value)
    if default:
        value = os.environ.get("LVBERT_SUPERNET") or default.group(1)
    elif "$" in value:
        raise UserError(f"the experiment's trial command reads the supernet from {value}; pass --supernet RUN")
    path = Path(os.path.expanduser(value))
    return str(path if path.is_absolute() else Path(config.get("trialCodeDirectory") or ".") / path)


def first_trial_error(exp_dir: Path) -> str | None:
    """'trial ID: <its last error line>' for the first failed trial with one in its stderr, else None."""
    for stderr in trial_stderr(exp_dir):
        line = trial_error_line([stderr])
        if line:
            return f"trial {stderr.parent.name}: {line}"
    return None


def export(args) -> dict:
    """`lvbert search export`: the best trial of an nnictl experiment as best_arch.json."""
    from ..arch import parse_arch, to_compact, to_dict
    from ..atomic import write_json
    from ..info import param_counts
    from ..supernet.rundir import supernet_dir
    from .cost import CostModel
    from .scorer import space_as_trained

    exp_dir = Path(args.experiment_dir) if args.experiment_dir else experiment_dir(args.experiment)
    trials, config = read_trials(exp_dir)
    if not trials:
        failed = first_trial_error(exp_dir)
        raise UserError(f"experiment {args.experiment or exp_dir} has no finished trial with a final metric yet"
                        + (f"; {failed}" if failed else ""))
    supernet = args.supernet or supernet_from_config(config)
    run = supernet_dir(supernet)
    spec, cfg, meta = run.spec, run.cfg, run.meta
    best = max(trials, key=lambda t: t["score"])
    params = best["parameters"]
    if isinstance(params, dict) and "parameters" in params and isinstance(params["parameters"], dict):
        params = params["parameters"]
    types = parse_arch(params, spec)  # arch of another space -> one line
    counts = param_counts(cfg, types)
    tuner = config.get("tuner") or {}
    class_args = tuner.get("classArgs") or {}
    out = Path(args.out) / "best_arch.json"
    result = {
        "arch": to_dict(types),
        "compact": to_compact(types),
        "score": best["score"],
        "metric": "mlm_acc (inherited supernet weights, fixed-masked validation split)",
        "params": {k: counts[k] for k in ("backbone", "word_embedding", "other_embedding", "mlm_head", "total")},
        "backbone_flops": CostModel(cfg, spec).flops(types),
        "strategy": "nnictl:" + str(tuner.get("className") or tuner.get("name") or "tuner"),
        "seed": class_args.get("seed"),
        "supernet": {"run_dir": str(Path(supernet).resolve()), "space": space_as_trained(spec, meta),
                     "size": meta.get("size"), "steps": meta.get("steps")},
        "space": spec.name,
        "experiment": {"id": args.experiment or config.get("id") or exp_dir.name, "trial": best["trial"],
                       "trials_with_metric": len(trials)},
    }
    write_json(out, result)
    return {"out": str(out), "compact": result["compact"], "score": result["score"], "trial": best["trial"]}


def read_trial_db(exp_dir: Path) -> tuple[dict, dict, dict]:
    """({parameter id: parameters}, {trial: (parameter id, final metric)}, experiment config) from an experiment's
    database. A final metric is paired with the parameter id its trial reported, not with the parameters NNI's
    manager recorded for that trial: NNI 3.0's local training service gave two trials started together each other's
    parameters (seen once in tests/test_search_nnictl.py's experiment: each ran and reported for what it was handed,
    the web UI showed the manager's); the metric's parameterId is what ran."""
    import json
    import sqlite3

    con = sqlite3.connect(f"file:{Path(exp_dir) / 'db' / 'nni.sqlite'}?mode=ro", uri=True)
    try:
        cur = con.cursor()
        params, assigned, finals = {}, {}, {}
        for trial_id, data in cur.execute("SELECT trialJobId, data FROM TrialJobEvent ORDER BY timestamp"):
            try:
                record = json.loads(data) if data else None
            except json.JSONDecodeError:
                continue
            if not isinstance(record, dict) or "parameter_id" not in record:
                continue
            p = record.get("parameters")
            params[str(record["parameter_id"])] = json.loads(p) if isinstance(p, str) else p
            assigned.setdefault(trial_id, str(record["parameter_id"]))
        for trial_id, pid, mtype, data in cur.execute("SELECT trialJobId, parameterId, type, data FROM MetricData"):
            if mtype == "FINAL":
                value = json.loads(data)
                finals[trial_id] = (str(pid) if pid not in (None, "") else assigned.get(trial_id),
                                    json.loads(value) if isinstance(value, str) else value)
        profile = cur.execute("SELECT params FROM ExperimentProfile ORDER BY revision DESC LIMIT 1").fetchone()
    finally:
        con.close()
    return params, finals, json.loads(profile[0]) if profile else {}
