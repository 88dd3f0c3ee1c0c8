"""`lvbert search`: run | score | space-json | nnictl | export."""
from __future__ import annotations

import json
import sys


def _evolution_args(p) -> None:
    g = p.add_argument_group("Algorithm 1 (LV-BERT; the budget P + (T-1)(N_cro + N_mut) applies to every strategy)")
    g.add_argument("--population", type=int, default=50, help="P, random initial population (default 50)")
    g.add_argument("--iterations", type=int, default=20, help="T, populations scored (default 20)")
    g.add_argument("--topk", type=int, default=10, help="k (default 10)")
    g.add_argument("--crossover", type=int, default=25, help="N_cro per generation (default 25)")
    g.add_argument("--mutation", type=int, default=25, help="N_mut per generation (default 25)")
    g.add_argument("--mutation-prob", type=float, default=0.1, help="per-slot mutation probability (default 0.1)")


def register(sub) -> None:
    p = sub.add_parser("search", help="architecture search over a trained supernet (evolution, baselines, nnictl)")
    ssub = p.add_subparsers(dest="search_command", metavar="ACTION")

    r = ssub.add_parser("run", help="search in process: best_arch.json, history.jsonl, search_curve.png")
    r.add_argument("--supernet", default="runs/supernet", help="supernet run directory (default runs/supernet)")
    r.add_argument("--strategy", nargs="+", default=["evolution"], metavar="NAME",
                   help="evolution | regularized-evolution | random; several run one after another (default evolution)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", default="runs/search", help="output directory (default runs/search)")
    r.add_argument("--space", default=None, help="expected search space (checked against the supernet's)")
    _evolution_args(r)
    c = r.add_argument_group("constraints (candidates outside are never evaluated)")
    c.add_argument("--max-params", type=int, default=None, help="max backbone parameters at the supernet's size")
    c.add_argument("--max-flops", type=int, default=None, help="max backbone FLOPs per max_length sequence")
    s = r.add_argument_group("scoring")
    s.add_argument("--val-tokens", type=int, default=16384, help="validation tokens per candidate (default 16384)")
    s.add_argument("--batch-size", type=int, default=64, help="validation sequences per batch (default 64)")
    s.add_argument("--data", default=None, help="prepared data directory (default: the one in the supernet's meta.json)")
    s.add_argument("--no-prefix-cache", action="store_true", help="recompute every candidate from the embeddings")
    s.add_argument("--cache-mb", type=int, default=1024, help="memory for cached prefix activations (default 1024)")
    s.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    s.add_argument("--device", default="auto", help="auto (GPU if visible) | cpu | cuda[:N] | mps (default auto)")
    m = r.add_mutually_exclusive_group()
    m.add_argument("--resume", action="store_true", help="continue an interrupted search in --out")
    m.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.set_defaults(func=run_cmd)

    sc = ssub.add_parser("score", help="inherited-weight MLM accuracy of one architecture")
    sc.add_argument("--supernet", default="runs/supernet")
    sc.add_argument("--arch", required=True, help="compact string, name, NNI dict JSON or best_arch.json")
    sc.add_argument("--val-tokens", type=int, default=16384)
    sc.add_argument("--batch-size", type=int, default=64)
    sc.add_argument("--data", default=None)
    sc.add_argument("--device", default="auto", help="auto (GPU if visible) | cpu | cuda[:N] | mps (default auto)")
    sc.set_defaults(func=score_cmd)

    sj = ssub.add_parser("space-json", help="print the nnictl search space generated from the NNI ModelSpace")
    sj.add_argument("--space", default="lvbert", help="search-space name or YAML (default lvbert)")
    sj.set_defaults(func=space_json_cmd)

    n = ssub.add_parser("nnictl", help="run experiments/search.yml with nnictl (web UI on 127.0.0.1)")
    n.add_argument("--config", default=None, help="nnictl config (default experiments/search.yml)")
    n.add_argument("--resume", default=None, metavar="ID",
                   help="resume a stopped experiment instead (only --port/--host apply): nothing is scored twice")
    n.add_argument("--supernet", default="runs/supernet")
    n.add_argument("--port", type=int, default=8080)
    n.add_argument("--host", default="127.0.0.1", help="interface for the web UI / REST API (default 127.0.0.1)")
    n.add_argument("--max-trials", type=int, default=None, help="override maxTrialNumber")
    n.add_argument("--concurrency", type=int, default=None, help="override trialConcurrency")
    n.add_argument("--workdir", default=None, help="experiment working directory (default: the config's)")
    n.add_argument("--seed", type=int, default=None)
    n.add_argument("--val-tokens", type=int, default=None)
    n.add_argument("--trial-threads", type=int, default=None, help="torch threads per trial")
    n.add_argument("--trial-gpus", type=int, default=None,
                   help="GPUs per trial (trialGpuNumber); without it NNI hides the GPUs from trials, which then "
                        "score on the CPU")
    for name in ("population", "iterations", "topk", "crossover", "mutation", "max-params", "max-flops"):
        n.add_argument(f"--{name}", type=int, default=None)
    n.add_argument("--mutation-prob", type=float, default=None)
    n.set_defaults(func=nnictl_cmd)

    e = ssub.add_parser("export", help="best trial of an nnictl experiment -> best_arch.json")
    e.add_argument("--experiment", default=None, help="experiment ID (nnictl experiment list --all)")
    e.add_argument("--experiment-dir", default=None, help="or the experiment's directory (holding db/nni.sqlite)")
    e.add_argument("--supernet", default=None, help="supernet run directory (default: from the trial command)")
    e.add_argument("--out", default="best_arch.json")
    e.set_defaults(func=export_cmd)

    p.set_defaults(func=lambda args: p.print_help() or 2)


def run_cmd(args) -> int:
    from .algorithm import EvolutionConfig
    from .run import SearchOptions, run_search

    opts = SearchOptions(
        supernet=args.supernet, strategies=args.strategy, seed=args.seed, out=args.out,
        evolution=EvolutionConfig(population=args.population, iterations=args.iterations, topk=args.topk,
                                  crossover=args.crossover, mutation=args.mutation, mutation_prob=args.mutation_prob),
        max_params=args.max_params, max_flops=args.max_flops, val_tokens=args.val_tokens, batch_size=args.batch_size,
        data=args.data, space=args.space, prefix_cache=not args.no_prefix_cache, cache_mb=args.cache_mb,
        threads=args.threads, device=args.device, resume=args.resume, overwrite=args.overwrite, progress=not args.no_progress,
    )
    result = run_search(opts)
    print(json.dumps({"best_arch": f"{args.out}/best_arch.json", "compact": result["compact"],
                      "score": round(result["score"], 6), "strategy": result["strategy"],
                      "strategies": {k: {"score": round(v["score"], 6), "evaluations": v["evaluations"],
                                         "seconds": v["seconds"]} for k, v in result["strategies"].items()}}))
    return 0


def score_cmd(args) -> int:
    from .scorer import score_cli

    return score_cli(args)


def space_json_cmd(args) -> int:
    from .nnictl import space_json

    json.dump(space_json(args.space), sys.stdout, indent=2)
    print()
    return 0


def nnictl_cmd(args) -> int:
    from .nnictl import DEFAULT_CONFIG, create, resume

    if args.resume:
        return resume(args)
    args.config = args.config or str(DEFAULT_CONFIG)
    return create(args)


def export_cmd(args) -> int:
    from ..errors import UserError
    from .nnictl import export

    if not args.experiment and not args.experiment_dir:
        raise UserError("give --experiment ID or --experiment-dir DIR")
    return export(args)
