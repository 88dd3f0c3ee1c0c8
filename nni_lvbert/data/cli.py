"""`lvbert data prepare`: build (or reuse) the tokenizer and cached train/validation splits and print their sizes."""
from __future__ import annotations

import argparse
import json
import sys

from .split import DEFAULT_VAL_FRACTION

DOC_BY_HELP = ("text files: what one document is; auto (default): blank-line-separated paragraphs, or lines when a "
               "file has no blank line")


def register(subparsers) -> None:
    from ..cliargs import DeprecatedAlias, add_json_arg

    data = subparsers.add_parser("data", help="prepare corpus, tokenizer and cached MLM splits",
                                 description="Data pipeline commands.")
    data.set_defaults(func=lambda args: _usage(data))
    sub = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    p = sub.add_parser("prepare", help="build tokenizer + cached train/validation splits, print their sizes",
                       description="Build (or reuse) the WordPiece tokenizer and the packed, cached train/validation "
                                   "splits, then print documents, sequences and tokens per split.")
    p.add_argument("--corpus", nargs="+", metavar="SRC",
                   help="text/jsonl/parquet files, folders or globs, or one hub dataset NAME[:CONFIG]; "
                        "default: the embedded corpus")
    p.add_argument("--size", default="small", metavar="NAME", help="model size giving vocab_size/max_length defaults (default small)")
    p.add_argument("--vocab-size", type=int, metavar="N", help="WordPiece vocabulary size (default: from --size)")
    p.add_argument("--max-length", type=int, metavar="N", help="tokens per packed sequence (default: from --size)")
    p.add_argument("--tokenizer", metavar="PATH", help="use this tokenizer directory or vocab.txt instead of training one")
    p.add_argument("--cased", action="store_true", help="do not lower-case (trained tokenizer / vocab.txt)")
    p.add_argument("--val-fraction", type=float, default=DEFAULT_VAL_FRACTION, metavar="F",
                   help=f"share of documents held out (default {DEFAULT_VAL_FRACTION})")
    p.add_argument("--data-seed", "--seed", dest="data_seed", type=int, default=0, metavar="N", action=DeprecatedAlias,
                   old="--seed", new="--data-seed", help="seed of the fixed validation masking (default 0)")
    p.add_argument("--mlm-probability", type=float, default=0.15, metavar="P", help="masking rate (default 0.15)")
    p.add_argument("--text-column", default="text", metavar="NAME", help="jsonl/parquet/hub column holding the text (default text)")
    p.add_argument("--doc-by", default="auto", choices=["auto", "paragraph", "line", "file"], help=DOC_BY_HELP)
    p.add_argument("--encoding-errors", default="strict", choices=["strict", "replace"],
                   help="non-UTF-8 text files: refuse (strict, default) or decode bad bytes as U+FFFD (replace)")
    p.add_argument("--max-docs", type=int, metavar="N", help="use only the first N documents (quick runs)")
    p.add_argument("--num-proc", type=int, metavar="N", help="worker processes for tokenizing (default: automatic)")
    p.add_argument("--cache-dir", metavar="DIR", help="cache root (default $LVBERT_CACHE or ~/.cache/nni-lvbert)")
    add_json_arg(p)
    p.set_defaults(func=run_prepare)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def run_prepare(args: argparse.Namespace) -> int:
    from .pipeline import prepare

    log = None if args.json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    prepared = prepare(
        args.corpus, args.size, vocab_size=args.vocab_size, max_length=args.max_length, tokenizer=args.tokenizer,
        val_fraction=args.val_fraction, seed=args.data_seed, mlm_probability=args.mlm_probability,
        lowercase=not args.cased, cache_dir=args.cache_dir, num_proc=args.num_proc, max_docs=args.max_docs,
        text_column=args.text_column, doc_by=args.doc_by, encoding_errors=args.encoding_errors, log=log,
    )
    if args.json:
        print(json.dumps({"path": str(prepared.path), "reused": prepared.reused, **prepared.meta}, indent=2))
    else:
        print(summary(prepared))
    return 0


def summary(prepared) -> str:
    s = prepared.stats
    rows = [f"corpus     {s['corpus']}",
            f"tokenizer  {prepared.tokenizer_dir} ({s['vocab_size']} tokens)",
            f"{'split':<8}{'documents':>11}{'words':>12}{'sequences':>11}{'tokens':>12}{'masked':>10}"]
    for name in ("train", "val"):
        d = s[name]
        masked = f"{d['masked']:>10,}" if "masked" in d else ""
        rows.append(f"{name:<8}{d['documents']:>11,}{d['words']:>12,}{d['sequences']:>11,}{d['tokens']:>12,}{masked}")
    how = "reused" if prepared.reused else "built"
    rows.append(f"cache      {prepared.path} ({s['bytes'] / 1e6:.1f} MB; {how}, build took {s['prepare_seconds']:.1f} s)")
    if s.get("invalid_utf8_lines"):
        rows.append(f"warning    {s['invalid_utf8_lines']} non-UTF-8 line(s) decoded with U+FFFD")
    return "\n".join(rows)
