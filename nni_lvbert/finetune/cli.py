"""`lvbert finetune` (one task) and `lvbert glue` (every GLUE task found in a folder)."""
from __future__ import annotations

from .. import layout


def register(sub) -> None:
    from ..cliargs import add_command
    from .run import NOT_GLUE, FinetuneOptions

    if "finetune" not in sub.choices:
        add_command(sub, "finetune", "fine-tune a model directory on one task and evaluate it", FinetuneOptions,
                    run_finetune)
    if "glue" not in sub.choices:
        add_command(sub, "glue", "fine-tune and evaluate on every GLUE task found in a folder (--data GLUE_DIR with "
                                 "CoLA/ SST-2/ MRPC/ ...; --task: only these)", FinetuneOptions, run_glue,
                    skip=NOT_GLUE, defaults={"out": layout.GLUE})


def _print(summary: dict) -> dict:
    """The summary's lines: each task's median score, and the GLUE score when there is one (all eight tasks run;
    results.json keeps its null otherwise)."""
    if not summary:  # a DDP rank > 0: rank 0 reports
        return {}
    glue = {"glue_score": summary["glue_score"]} if summary["glue_score"] is not None else {}
    scores = {t: round(r["score_median"], 2) for t, r in summary["tasks"].items()}
    named = {f"{t} score": r["score"] for t, r in summary["tasks"].items() if "f1" in r["metrics"]}  # what it means
    return {**glue, **scores, **named}


def run_finetune(args) -> dict:
    from ..cliargs import options_from_args
    from .run import FinetuneOptions, finetune

    opts = options_from_args(FinetuneOptions, args)
    return _print(finetune(opts))


def run_glue(args) -> dict:
    from ..cliargs import options_from_args
    from .run import FinetuneOptions, finetune
    from .tasks import find_glue_tasks, glue_name

    if args.data is None:
        if not args.resume:
            from ..errors import UserError

            raise UserError("lvbert glue needs --data GLUE_DIR")
        return _print(finetune(options_from_args(FinetuneOptions, args, tasks=[])))
    found = find_glue_tasks(args.data)
    if args.tasks:
        wanted = [glue_name(t) or t for t in args.tasks]
        missing = [t for t in wanted if t not in found]
        if missing:
            from ..errors import UserError

            raise UserError(f"task(s) {', '.join(missing)} not found in {args.data} (found {', '.join(found)})")
        found = [t for t in found if t in wanted]
    opts = options_from_args(FinetuneOptions, args, tasks=found)
    return _print(finetune(opts))

