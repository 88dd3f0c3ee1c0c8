"""`lvbert finetune` (one task) and `lvbert glue` (every GLUE task found in a folder)."""
from __future__ import annotations

from .. import layout
from ..cliargs import DeprecatedAlias, add_hardware_args, add_json_arg, add_out_arg, add_resume_args


def _common(p, default_out: str) -> None:
    from .run import FinetuneOptions

    d = FinetuneOptions()
    p.add_argument("--model", default=None, metavar="DIR", help="a model directory (lvbert export / pretrain, or "
                                                                  "any BERT-style transformers directory)")
    add_out_arg(p, default_out)
    p.add_argument("--seeds", type=int, nargs="+", default=d.seeds, help="one run per seed; median reported "
                                                                         "(default 0; the paper uses 10)")
    r = p.add_argument_group("recipe (LV-BERT Table 6 / ELECTRA defaults)")
    r.add_argument("--lr", type=float, default=None,
                   help="peak lr (default 3e-4; hidden size >= 768: 1e-4, 2e-4 on SQuAD)")
    r.add_argument("--epochs", type=float, default=None, help="default: 10 for RTE and STS-B, 2 for SQuAD, 3 otherwise")
    r.add_argument("--batch-size", type=int, default=d.batch_size, help=f"global batch size (default {d.batch_size})")
    r.add_argument("--max-length", type=int, default=d.max_length, help="sequence length (pairs truncated)")
    r.add_argument("--warmup-fraction", type=float, default=d.warmup_fraction,
                   help=f"share of the steps warming up linearly (default {d.warmup_fraction:g})")
    r.add_argument("--weight-decay", type=float, default=d.weight_decay, help=f"default {d.weight_decay:g}")
    r.add_argument("--layer-decay", type=float, default=d.layer_decay,
                   help="layer-wise lr decay per block of two slots (1 = off)")
    r.add_argument("--adam-eps", type=float, default=d.adam_eps, help=f"AdamW epsilon (default {d.adam_eps:g})")
    r.add_argument("--max-steps", type=int, default=None, help="cap on training steps per run (quick runs)")
    r.add_argument("--max-train-examples", type=int, default=None, help="use the first N training examples")
    r.add_argument("--ckpt-every", type=int, default=None, help="checkpoint every N steps (default: per epoch, "
                                                                "at most 500)")
    add_hardware_args(p)
    p.add_argument("--save-model", action="store_true",
                   help="keep each fine-tuned model: OUT/<task>/seed<k>/model/ (loads with from_pretrained)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    add_resume_args(p, "skip finished task×seed runs and continue an interrupted one")
    add_json_arg(p)


def register(sub) -> None:
    if "finetune" not in sub.choices:
        p = sub.add_parser("finetune", help="fine-tune a model directory on one task and evaluate it")
        p.add_argument("--task", dest="tasks", nargs="+", default=None, metavar="TASK",
                       help="cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli (GLUE files), squad, squad_v2 "
                            "(SQuAD JSON, or the hub without --data), glue:NAME (hub), sotu-era (embedded), or your "
                            "name with --text-column/--label-column; several: one after the other")
        p.add_argument("--data", default=None, metavar="PATH",
                       help="GLUE folder, or a folder with train.*/dev.* (csv, tsv, jsonl, parquet), or a train file; "
                            "SQuAD: train-v1.1.json (dev-v1.1.json beside it) or their folder (v2.0 likewise)")
        p.add_argument("--dev-data", default=None, metavar="FILE", help="dev file when --data is a train file")
        p.add_argument("--text-column", default=None, help="your files: the column of the (first) text")
        p.add_argument("--text-pair-column", default=None, help="your files: the column of the second text, if any")
        p.add_argument("--label-column", default=None, help="your files: the label column")
        p.add_argument("--task-type", default="classification", choices=["classification", "regression"],
                       help="your files: what the labels are (default classification)")
        q = p.add_argument_group("extractive QA (squad, squad_v2)")
        q.add_argument("--max-query-length", type=int, default=64, help="question tokens kept (default 64)")
        q.add_argument("--doc-stride", type=int, default=128, help="tokens between window starts (default 128)")
        q.add_argument("--n-best", type=int, default=20, help="start/end candidates per window (default 20)")
        q.add_argument("--max-answer-length", type=int, default=30, help="tokens (default 30)")
        q.add_argument("--null-threshold", type=float, default=0.0,
                       help="v2.0: answer nothing when null score - best span score > this (default 0)")
        _common(p, layout.FINETUNE)
        p.set_defaults(func=run_finetune)
    if "glue" not in sub.choices:
        g = sub.add_parser("glue", help="fine-tune and evaluate on every GLUE task found in a folder")
        g.add_argument("--data", default=None, metavar="GLUE_DIR", help="folder with CoLA/ SST-2/ MRPC/ ...")
        g.add_argument("--task", "--tasks", dest="tasks", nargs="+", default=None, metavar="TASK",
                       action=DeprecatedAlias, old="--tasks", new="--task",
                       help="only these tasks (default: every one found)")
        _common(g, layout.GLUE)
        g.set_defaults(func=run_glue)


def _print(summary: dict) -> dict:
    if not summary:  # a DDP rank > 0: rank 0 reports
        return {}
    return {"glue_score": summary["glue_score"], **{t: round(r["score_median"], 2) for t, r in summary["tasks"].items()}}


def run_finetune(args) -> dict:
    from ..cliargs import options_from_args
    from .run import FinetuneOptions, finetune

    opts = options_from_args(FinetuneOptions, args, tasks=args.tasks or [])
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

