"""`lvbert search`: run | score | space-json | nnictl | latency-table | export."""
from __future__ import annotations

import dataclasses
import json
import sys


def register(sub) -> None:
    from ..cliargs import add_actions, add_command, add_flags, add_json_arg
    from .options import LatencyTableOptions, NnictlExportOptions, NnictlOptions, ScoreOptions
    from .run import SearchOptions

    ssub = add_actions(sub, "search", "architecture search over a trained supernet (evolution, baselines, nnictl)")
    add_command(ssub, "run", "search in process: best_arch.json, history.jsonl, search_curve.png", SearchOptions,
                run_cmd)

    add_command(ssub, "score", "inherited-weight MLM accuracy of one architecture", ScoreOptions, score_cmd)

    sj = ssub.add_parser("space-json", help="print the nnictl search space generated from the NNI ModelSpace")
    sj.add_argument("--space", default="lvbert", help="search-space name or YAML (default lvbert)")
    sj.set_defaults(func=space_json_cmd)

    n = ssub.add_parser("nnictl", help="run the search.yml nnictl experiment (web UI on 127.0.0.1), or resume one",
                        description="`lvbert search nnictl [create] ...` starts the search as an nnictl experiment; "
                                    "`lvbert search nnictl resume ID` resumes a stopped one (only --port/--host "
                                    "apply): nothing is scored twice.")
    n.add_argument("action", nargs="?", choices=["create", "resume"], default="create",
                   help="create (default) or resume ID")
    n.add_argument("experiment_id", nargs="?", default=None, metavar="ID", help="the experiment to resume")
    add_flags(n, NnictlOptions, skip=("pareto",))
    add_json_arg(n)
    n.set_defaults(func=nnictl_cmd, options_cls=NnictlOptions, options_skip=("pareto",))

    add_command(ssub, "latency-table", "per-layer-type forward latency on this device -> JSON table for "
                                       "--max-latency-ms", LatencyTableOptions, latency_table_cmd)

    e = ssub.add_parser("export", help="best trial of an nnictl experiment -> best_arch.json")
    add_flags(e, NnictlExportOptions)
    add_json_arg(e)
    e.set_defaults(func=export_cmd, options_cls=NnictlExportOptions)


def run_cmd(args) -> dict:
    from ..cliargs import options_from_args
    from .run import SearchOptions, run_search

    opts = options_from_args(SearchOptions, args)
    result = run_search(opts)
    return {"best_arch": f"{opts.out}/best_arch.json", "compact": result["compact"],
            "score": round(result["score"], 6), "strategy": result["strategy"],
            "evidence": {k: result["evidence"][k] for k in ("supernet_steps", "masked_tokens", "score_se",
                                                            "top_k_within_2se", "note")},
            "strategies": {k: {"score": round(v["score"], 6), "evaluations": v["evaluations"],
                               "seconds": v["seconds"]} for k, v in result["strategies"].items()}}


def score_cmd(args) -> dict:
    from ..cliargs import options_from_args
    from ..errors import UserError
    from ..supernet.fewshot import is_fewshot
    from ..supernet.rundir import supernet_dir
    from .options import ScoreOptions

    opts = options_from_args(ScoreOptions, args)
    if not opts.arch:
        raise UserError("give the architecture to score with --arch (letters such as ccsf..., a name, or a "
                        "best_arch.json)")
    if not is_fewshot(opts.supernet):
        supernet_dir(opts.supernet)  # a missing or unfinished run: its line before torch is imported
    return _score(opts)


def _score(opts) -> dict:
    """`lvbert search score`: the inherited-weight MLM accuracy and loss of one architecture, with standard errors
    (or, with --proxy, a zero-cost proxy at the supernet's shape)."""
    from ..threads import settle
    from .cost import CostModel
    from .proxies import check_proxy, proxy_score
    from .scorer import open_scorer

    if opts.proxy:
        check_proxy(opts.proxy)
    settle(opts.threads)
    scorer = open_scorer(opts.supernet, val_tokens=opts.val_tokens, batch_size=opts.batch_size, data=opts.data,
                         prefix_cache=False, device=opts.device, masking=opts.val_masking)
    arch = scorer.parse(opts.arch)
    if opts.proxy:
        scores = {"proxy": opts.proxy, "score": proxy_score(opts.proxy, scorer.cfg, arch, scorer.batches[0],
                                                            seed=opts.seed), "seed": opts.seed}
    else:
        scores = scorer.metrics(arch)
    return {"arch": arch.compact, **scores, **CostModel(scorer.cfg, scorer.spec).describe(arch),
            "val_tokens": scorer.val_stats["tokens"], "masking": opts.val_masking,
            "masked_tokens": scorer.val_stats["masked_tokens"]}


def space_json_cmd(args) -> int:
    from .nnictl import space_json

    json.dump(space_json(args.space), sys.stdout, indent=2)
    print()
    return 0


def nnictl_cmd(args) -> dict:
    from ..cliargs import options_from_args
    from ..errors import UserError
    from .nnictl import DEFAULT_CONFIG, create, resume
    from .options import NnictlOptions

    opts = options_from_args(NnictlOptions, args)
    if args.action == "resume":
        if not args.experiment_id:
            raise UserError("give the experiment to resume: lvbert search nnictl resume ID")
        return resume(dataclasses.replace(opts, resume=args.experiment_id))
    if args.experiment_id:
        raise UserError(f"unexpected argument {args.experiment_id!r}: only `resume` takes an experiment ID")
    return create(dataclasses.replace(opts, experiment_config=opts.experiment_config or str(DEFAULT_CONFIG)))


def export_cmd(args) -> dict:
    from ..cliargs import options_from_args
    from ..errors import UserError
    from .nnictl import export
    from .options import NnictlExportOptions

    opts = options_from_args(NnictlExportOptions, args)
    if not opts.experiment and not opts.experiment_dir:
        raise UserError("give --experiment ID or --experiment-dir DIR")
    return export(opts)


def latency_table_cmd(args) -> dict:
    from ..cliargs import options_from_args
    from .latency import table_cli
    from .options import LatencyTableOptions

    return table_cli(options_from_args(LatencyTableOptions, args))
