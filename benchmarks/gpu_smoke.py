"""GPU smoke check (not a test): does every training path of nni-lvbert run on this machine's accelerator?

Runs the pipeline's commands one after another, each in its own process with a time limit, on tiny settings:

    env        torch / CUDA / bf16 facts
    supernet   lvbert supernet train  (1 device; GPUs default to bf16-mixed)
    search     lvbert search run      (scoring on --device)
    iot        lvbert iot train + eval, from the supernet and the searched orders
    pretrain   lvbert pretrain        (ELECTRA, the searched architecture)
    compile    the same with --compile (the whole objective compiled; CUDA graphs on a GPU); summary: its tok/s over
               pretrain's (--arch, --objective: another architecture and objective for these two)
    finetune   lvbert finetune        (the pre-trained model on the embedded sotu-era task)

A step whose input is missing (its predecessor failed) is skipped. Every step runs with
$LVBERT_STACK_DUMP_AFTER set, so a step that hangs prints every thread's Python stack to its log every
--dump-after seconds (how the silent supernet start on the H200 was found: NNI's experiment lock, see nni_compat).
By default the first dump comes 20 s before the step's --timeout, i.e. only for a step about to count as hung:
faulthandler's dump can crash the process it dumps (on the H200, Python 3.12: SIGSEGV while printing a thread
inside torch.compile's Inductor, a compiled pre-training step that was only compiling).
Logs: OUT/<step>.log; result: OUT/summary.json (per step, rewritten after each: status, exit code, seconds, training
tokens/s where the run logs them, the last log lines of a failure), also printed. Exit status 0 only when every step
passed.

    python benchmarks/gpu_smoke.py --out runs/gpu-smoke                 # on a GPU machine
    python benchmarks/gpu_smoke.py --accelerator cpu --steps 4 --out /tmp/smoke   # the same path on CPU

Without nni-lvbert installed, run it from the source tree with PYTHONPATH=. (the steps call `python -m
nni_lvbert.cli`).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

STEPS = ("env", "supernet", "search", "iot", "pretrain", "compile", "finetune")
ENV_PROBE = """
import json, torch
info = {"torch": torch.__version__, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
if torch.cuda.is_available():
    info.update(device=torch.cuda.get_device_name(0), bf16=torch.cuda.is_bf16_supported(),
                memory_gib=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
    x = torch.randn(1024, 1024, device="cuda")
    info["matmul_ok"] = bool(torch.isfinite(x @ x).all())
print(json.dumps(info))
"""


def commands(out: Path, a) -> dict[str, list[list[str]]]:
    lv = [sys.executable, "-m", "nni_lvbert.cli"]
    device = "cuda" if a.accelerator == "gpu" else a.accelerator
    train = ["--accelerator", a.accelerator, "--devices", "1", "--no-progress", "--overwrite"]
    best = a.arch or str(out / "search" / "best_arch.json")

    def pretrain(name: str) -> list[str]:
        return lv + ["pretrain", "--arch", best, "--size", a.size, "--objective", a.objective, "--max-steps",
                     str(a.steps), "--val-every", str(a.steps), "--out", str(out / name), *train]

    return {
        "env": [[sys.executable, "-c", ENV_PROBE]],
        "supernet": [lv + ["supernet", "train", "--size", a.size, "--max-steps", str(a.steps), "--val-every",
                           str(a.steps), "--out", str(out / "supernet"), *train]],
        "search": [lv + ["search", "run", "--supernet", str(out / "supernet"), "--population", "8", "--iterations",
                         "3", "--topk", "4", "--crossover", "4", "--mutation", "4", "--device", device,
                         "--out", str(out / "search"), "--no-progress", "--overwrite"]],
        "iot": [lv + ["iot", "train", "--supernet", str(out / "supernet"), "--orders-from", str(out / "search"),
                      "--m", "2", "--max-steps", str(a.steps), "--out", str(out / "iot"), *train],
                lv + ["iot", "eval", "--out", str(out / "iot"), "--val-batches", "2", "--no-progress"]],
        "pretrain": [pretrain("pretrain")],
        "compile": [pretrain("compile") + ["--compile", a.compile_backend]],
        "finetune": [lv + ["finetune", "--model", str(out / "pretrain" / "hf"), "--task", "sotu-era",
                           "--max-steps", str(a.steps), "--seeds", "0", "--out", str(out / "finetune"),
                           "--accelerator", a.accelerator, "--no-progress", "--overwrite"]],
    }


NEEDS = {"search": "supernet", "iot": "search", "pretrain": "search", "compile": "search", "finetune": "pretrain"}


def tokens_per_second(run_dir: Path) -> float | None:
    """Median training tokens/s the run logged (its CSV log: `tok/s`, every 10 steps), if any."""
    import csv
    import statistics

    values = []
    for path in run_dir.glob("logs/csv/metrics.csv"):
        with open(path, newline="") as f:
            values += [float(r["tok/s"]) for r in csv.DictReader(f) if r.get("tok/s")]
    return round(statistics.median(values)) if values else None


def run_step(name: str, cmds: list[list[str]], out: Path, a) -> dict:
    dump_after = a.dump_after if a.dump_after is not None else max(1.0, a.timeout - 20)
    env = dict(os.environ, LVBERT_STACK_DUMP_AFTER=str(dump_after), PYTHONFAULTHANDLER="1",
               PYTHONUNBUFFERED="1")
    log_path = out / f"{name}.log"
    start = time.time()
    rec: dict = {"status": "passed", "commands": ["python -c <env probe>" if "-c" in c else " ".join(c) for c in cmds]}
    with open(log_path, "w") as log:
        for cmd in cmds:
            log.write(f"$ {' '.join(cmd)}\n")
            log.flush()
            try:
                rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=a.timeout).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
            if rc != 0:
                rec.update(status="failed", exit=rc)
                break
    rec["seconds"] = round(time.time() - start, 1)
    text = log_path.read_text(errors="replace")
    if name == "env" and rec["status"] == "passed":
        rec["info"] = json.loads(text.strip().splitlines()[-1])
    if rec["status"] != "passed":
        rec["tail"] = text.splitlines()[-40:]
    speed = tokens_per_second(out / name)
    if speed is not None:
        rec["tok_per_s"] = speed
    return rec


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/gpu-smoke", help="folder for logs and the steps' run directories")
    p.add_argument("--accelerator", default="gpu", help="gpu (default) | cpu | mps")
    p.add_argument("--size", default="tiny", help="model size of every step (default tiny; small for speed)")
    p.add_argument("--steps", type=int, default=50, help="training steps per training command (default 50)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per command before it counts as hung")
    p.add_argument("--dump-after", type=float, help="stack dump interval of a step (seconds; default: --timeout "
                                                      "less 20 s, min 1 s: only a step about to count as hung)")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend of the compile step")
    p.add_argument("--only", nargs="+", choices=STEPS, default=list(STEPS), help="run these steps only")
    p.add_argument("--arch", help="the pretrain/compile steps' architecture (default: the search step's best)")
    p.add_argument("--objective", default="electra", help="the pretrain/compile steps' objective (default electra)")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cmds = commands(out, a)
    summary: dict = {"accelerator": a.accelerator, "size": a.size, "steps": a.steps, "results": {}}
    for name in a.only:
        need = None if a.arch and name in ("pretrain", "compile") else NEEDS.get(name)
        if need in summary["results"] and summary["results"][need]["status"] != "passed":
            summary["results"][name] = {"status": "skipped", "reason": f"{need} did not pass"}
        else:
            print(f"[{name}] ...", file=sys.stderr, flush=True)
            summary["results"][name] = run_step(name, cmds[name], out, a)
        print(f"[{name}] {summary['results'][name]['status']}", file=sys.stderr, flush=True)
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")  # so far: a loan may end mid-run
    speeds = [summary["results"].get(k, {}).get("tok_per_s") for k in ("pretrain", "compile")]
    if all(speeds):
        summary["compile_speedup"] = round(speeds[1] / speeds[0], 3)  # medians of the logged tok/s: compilation slows only the first steps
    summary["passed"] = all(r["status"] == "passed" for r in summary["results"].values())
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
