"""`lvbert study ranking | search | downstream | iot`: does the search find better BERTs? (see nni_lvbert/study/)."""
from __future__ import annotations

STUDIES = {
    "ranking": ("nni_lvbert.study.ranking", "RankingOptions",
                "rankers (supernets, short training, zero-cost proxies) against a multi-seed stand-alone ground "
                "truth: Kendall tau with bootstrap intervals, noise ceiling, regret, cost"),
    "search": ("nni_lvbert.study.search", "SearchStudyOptions",
               "Algorithm 1 vs regularized evolution vs random at equal budget over several seeds"),
    "downstream": ("nni_lvbert.study.downstream", "DownstreamOptions",
                   "searched vs baselines after stand-alone pre-training, then fine-tuning with several seeds"),
    "iot": ("nni_lvbert.study.iot", "IOTStudyOptions",
            "instance-wise order (IOT) against its orders, the per-instance oracle and the best order trained "
            "stand-alone on as many sequences, over several seeds, with standard errors and cost"),
    "iot-finetune": ("nni_lvbert.study.iot_finetune", "IOTFinetuneOptions",
                     "IOT runs fine-tuned on a classification task with instance-wise order against each order "
                     "fine-tuned alone from the same weights and the per-instance oracle, over several seeds"),
}


def register(sub) -> None:
    import importlib

    from ..cliargs import add_actions, add_command

    studies = add_actions(sub, "study", "reproducible studies: supernet ranking, search strategies, downstream, IOT",
                          dest="study", metavar="STUDY")
    for name, (module, cls, help_) in STUDIES.items():
        options = getattr(importlib.import_module(module), cls)
        add_command(studies, name, help_, options, run_study, description=help_, skip=options.not_offered())


def run_study(args) -> dict:
    import importlib

    from ..cliargs import options_from_args
    from .driver import drive

    module, cls, _ = STUDIES[args.study]
    mod = importlib.import_module(module)
    opts = options_from_args(getattr(mod, cls), args)
    result = drive(mod.STUDY, opts)  # the one study driver: each module declares its STUDY
    if getattr(opts, "nnictl", None):  # the stand-alone trainings written as an experiment (nnictl.py), OUT untouched
        return {"study": args.study, "experiment": opts.nnictl, **result}
    keys = ("kendall_tau", "kendall_tau_ci95", "spearman_rho", "spearman_rho_ci95", "n", "seeds", "budget",
            "orders", "noise_ceiling", "seed_std_median", "rankers", "goal", "result")
    return {"study": args.study, "out": args.out, **{k: result[k] for k in keys if k in result}}
