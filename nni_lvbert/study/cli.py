"""`lvbert study ranking | search | downstream`: does the search find better BERTs? (see nni_lvbert/study/)."""
from __future__ import annotations

STUDIES = {
    "ranking": ("nni_lvbert.study.ranking", "RankingOptions", "run_ranking",
                "rankers (supernets, short training, zero-cost proxies) against a multi-seed stand-alone ground "
                "truth: Kendall tau with bootstrap intervals, noise ceiling, regret, cost"),
    "search": ("nni_lvbert.study.search", "SearchStudyOptions", "run_search_study",
               "Algorithm 1 vs regularized evolution vs random at equal budget over several seeds"),
    "downstream": ("nni_lvbert.study.downstream", "DownstreamOptions", "run_downstream",
                   "searched vs baselines after stand-alone pre-training, then fine-tuning with several seeds"),
}


def register(sub) -> None:
    p = sub.add_parser("study", help="reproducible studies: supernet ranking, search strategies, downstream")
    studies = p.add_subparsers(dest="study", metavar="STUDY")
    for name, (_, _, _, help_) in STUDIES.items():
        s = studies.add_parser(name, help=help_, description=help_)
        _common(s, name)
        globals()[f"_{name}_args"](s)
        s.set_defaults(func=run_study)
    p.set_defaults(func=lambda args: p.print_help() or 2)


def _common(p, name: str) -> None:
    from ..cliargs import DeprecatedAlias, add_json_arg, add_out_arg, add_resume_args
    from ..layout import STUDY
    from .common import BUDGETS

    add_out_arg(p, f"{STUDY}/{name}", "study directory")
    p.add_argument("--quick", action="store_true", help="CI-sized run: checks that everything runs, not what wins")
    p.add_argument("--seed", type=int, default=0, help="seed of the study's searches and draws" if name == "search" else
                   "seed of the stand-alone trainings and the study's draws")
    p.add_argument("--data-seed", type=int, default=0, help="seed of the fixed validation masking (default 0)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    add_resume_args(p, "continue the study in --out with its stored options (finished parts are kept)")
    add_json_arg(p)
    if name == "search":
        from ..search.defaults import VAL_TOKENS

        p.add_argument("--val-tokens", type=int, default=None,
                       help=f"validation tokens per candidate (default {VAL_TOKENS}, as lvbert search run)")
        return
    p.add_argument("--val-tokens", type=int, default=None,
                   help="validation tokens every model is scored on (default: the whole validation split)")
    p.add_argument("--models", default=None, metavar="DIR",
                   help="model store for the stand-alone pre-trainings (default OUT/models; share it between "
                        "studies to train each model once)")
    t, q = BUDGETS["tiny"], BUDGETS["quick"]
    g = p.add_argument_group("stand-alone budget (the same for every model)")
    g.add_argument("--max-steps", "--steps", dest="max_steps", type=int, default=None, action=DeprecatedAlias,
                   old="--steps", new="--max-steps", help=f"training steps (default {t['steps']}; quick {q['steps']})")
    g.add_argument("--lr", type=float, default=None, help=f"peak learning rate (default {t['lr']:g})")
    g.add_argument("--warmup-steps", type=int, default=None, help=f"linear warm-up (default {t['warmup_steps']})")
    g.add_argument("--batch-size", type=int, default=None, help=f"batch size (default {t['batch_size']}; quick "
                                                                f"{q['batch_size']})")
    g.add_argument("--dropout", type=float, default=None, help=f"dropout (default {t['dropout']:g})")


def _ranking_args(p) -> None:
    from ..cliargs import DeprecatedAlias

    p.add_argument("--supernet", default="", metavar="RUN",
                   help="the reference supernet run directory: its space, shape and data define the study, and it "
                        "is the ranker spos")
    p.add_argument("--rankers", nargs="+", default=None, metavar="RANKER",
                   help="rankers to compare (default spos): spos | NAME=RUN (another supernet run, e.g. "
                        "fair=runs/supernet-fair from `lvbert supernet train --sampling fair`) | short:N (N steps "
                        "of stand-alone pre-training) | zc:grad-norm | zc:snip | zc:synflow (zero-cost proxies)")
    p.add_argument("--num-archs", "--archs", dest="num_archs", type=int, default=None, action=DeprecatedAlias,
                   old="--archs", new="--num-archs",
                   help="orders stratified by composition and placement (default 20; quick 3), plus the baselines "
                        "and the searched order")
    p.add_argument("--num-seeds", type=int, default=None,
                   help="stand-alone pre-training seeds per order for the ground truth, --seed .. --seed+N-1 "
                        "(default 3; quick 2)")
    p.add_argument("--searched", default=None, metavar="DIR|FILE",
                   help="a search directory or its best_arch.json: the searched order joins the compared orders")
    p.add_argument("--no-baselines", dest="baselines", action="store_false",
                   help="leave out bert, dynamicconv, sandwich, lvbert-small")
    p.add_argument("--val-masking", choices=["full", "fixed"], default="full",
                   help="full: every validation token masked once over 7 rounds (default); fixed: the split's "
                        "fixed 15 %% masking (7x cheaper, noisier)")
    p.add_argument("--rank-by", choices=["acc", "loss"], default="acc",
                   help="rank by validation MLM accuracy (default) or loss")


def _search_args(p) -> None:
    from ..cliargs import DeprecatedAlias
    from ..search.defaults import STRATEGIES

    p.add_argument("--supernet", default="", metavar="RUN", help="a trained supernet run directory")
    p.add_argument("--num-seeds", "--seeds", dest="num_seeds", type=int, default=5, action=DeprecatedAlias,
                   old="--seeds", new="--num-seeds", help="searches per strategy, seeds 0..N-1 (default 5)")
    p.add_argument("--search", dest="strategies", nargs="+", default=list(STRATEGIES), metavar="STRATEGY",
                   help=f"strategies to compare (default: {' '.join(STRATEGIES)})")
    p.add_argument("--population", type=int, default=None, help="Algorithm 1's P (default 50; quick 6)")
    p.add_argument("--iterations", type=int, default=None, help="Algorithm 1's T (default 20; quick 3)")


def _downstream_args(p) -> None:
    from ..cliargs import DeprecatedAlias
    from ..training import DataOptions
    from .downstream import DEFAULT_ARCHS

    p.add_argument("--archs", type=lambda s: [a.strip() for a in s.split(",") if a.strip()],
                   default=list(DEFAULT_ARCHS), help=f"comma-separated (default {','.join(DEFAULT_ARCHS)}); "
                                                     "the first is the reference of the comparisons")
    p.add_argument("--searched", default=None, metavar="DIR|FILE|ARCH",
                   help="the searched architecture: a search directory, best_arch.json or letters")
    p.add_argument("--size", default="tiny", help="tiny | small | medium | base (default tiny)")
    p.add_argument("--objective", default="mlm", help="mlm | electra (default mlm)")
    p.add_argument("--data", default=None, metavar="DIR", help="prepared pre-training data (default: the embedded "
                                                               "corpus prepared for --size)")
    p.add_argument("--cache-dir", default=DataOptions.cache_dir, help="data cache")
    p.add_argument("--task", dest="tasks", nargs="+", default=["sotu-era"],
                   help="fine-tuning tasks (default the embedded sotu-era; any `lvbert finetune --task`)")
    p.add_argument("--task-data", default=None, metavar="PATH", help="the tasks' data (`lvbert finetune --data`)")
    p.add_argument("--pretrain-seeds", type=int, nargs="+", default=None,
                   help="pre-training seeds: each arch is pre-trained once per seed and each model fine-tuned with "
                        "every --finetune-seeds (default: --seed only)")
    p.add_argument("--finetune-seeds", "--ft-seeds", dest="finetune_seeds", type=int, nargs="+", default=None,
                   action=DeprecatedAlias, old="--ft-seeds", new="--finetune-seeds",
                   help="fine-tuning seeds (default 0 1 2)")
    p.add_argument("--finetune-max-steps", "--ft-max-steps", dest="finetune_max_steps", type=int, default=None,
                   action=DeprecatedAlias, old="--ft-max-steps", new="--finetune-max-steps",
                   help="cap on steps per fine-tuning run")


def run_study(args) -> dict:
    import importlib

    from ..cliargs import options_from_args

    module, cls, fn, _ = STUDIES[args.study]
    mod = importlib.import_module(module)
    options = getattr(mod, cls)
    if args.val_tokens is None:  # the study's own default (search: as lvbert search run; others: all)
        args.val_tokens = options.val_tokens
    result = getattr(mod, fn)(options_from_args(options, args))
    keys = ("kendall_tau", "kendall_tau_ci95", "spearman_rho", "spearman_rho_ci95", "n", "seeds", "budget",
            "orders", "noise_ceiling", "seed_std_median", "rankers", "result")
    return {"study": args.study, "out": args.out, **{k: result[k] for k in keys if k in result}}
