"""`lvbert data prepare`: build (or reuse) the tokenizer and cached train/validation splits and print their sizes."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

from ..options import opt
from .split import DEFAULT_VAL_FRACTION

DOC_BY_HELP = ("text files: what one document is; auto (default): blank-line-separated paragraphs, or lines when a "
               "file has no blank line")


@dataclass(frozen=True)
class PrepareOptions:
    corpus: list[str] | None = opt(None, "text/jsonl/parquet files, folders or globs, or one hub dataset "
                                         "NAME[:CONFIG]; default: the embedded corpus", metavar="SRC")
    size: str = opt("small", "model size giving vocab_size/max_length defaults", metavar="NAME")
    vocab_size: int | None = opt(None, "WordPiece vocabulary size (default: from --size)", metavar="N")
    max_length: int | None = opt(None, "tokens per packed sequence (default: from --size)", metavar="N")
    tokenizer: str | None = opt(None, "use this tokenizer directory or vocab.txt instead of training one",
                                metavar="PATH")
    cased: bool = opt(False, "do not lower-case (trained tokenizer / vocab.txt)")
    val_fraction: float = opt(DEFAULT_VAL_FRACTION, "share of documents held out", metavar="F")
    data_seed: int = opt(0, "seed of the fixed validation masking", metavar="N")
    mlm_probability: float = opt(0.15, "masking rate", metavar="P")
    text_column: str = opt("text", "jsonl/parquet/hub column holding the text", metavar="NAME")
    doc_by: str = opt("auto", DOC_BY_HELP, choices=["auto", "paragraph", "line", "file"])
    encoding_errors: str = opt("strict", "non-UTF-8 text files: refuse (strict, default) or decode bad bytes as "
                                         "U+FFFD (replace)", choices=["strict", "replace"])
    max_docs: int | None = opt(None, "use only the first N documents (quick runs)", metavar="N")
    num_proc: int | None = opt(None, "worker processes for tokenizing (default: automatic)", metavar="N")
    cache_dir: str | None = opt(None, "cache root (default $LVBERT_CACHE or ~/.cache/nni-lvbert)", metavar="DIR")


@dataclass(frozen=True)
class WikiPairsOptions:
    out: str = opt("runs/data/wiki-pairs", "a new folder for train.tsv, dev.tsv and README.txt", metavar="DIR")
    train: int = opt(1000, "training pairs", metavar="N")
    dev: int = opt(400, "dev pairs", metavar="N")


def register(subparsers) -> None:
    from ..cliargs import add_command

    data = subparsers.add_parser("data", help="prepare corpus, tokenizer and cached MLM splits",
                                 description="Data pipeline commands.")
    data.set_defaults(func=lambda args: _usage(data))
    sub = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    add_command(sub, "prepare", "build tokenizer + cached train/validation splits, print their sizes", PrepareOptions,
                run_prepare, description="Build (or reuse) the WordPiece tokenizer and the packed, cached train/"
                                         "validation splits, then print documents, sequences and tokens per split.")
    add_command(sub, "wiki-pairs", "an offline GLUE-format pair task (MRPC files) from the embedded Wikipedia leads",
                WikiPairsOptions, run_wiki_pairs,
                description="Write a sentence-pair task in GLUE MRPC's exact files: do two sentences come from the "
                            "same Wikipedia lead section? Balanced, articles held out between train and dev, CC "
                            "BY-SA 4.0 like its source (DIR/README.txt). Then: lvbert finetune --task mrpc --data DIR.")


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


def run_wiki_pairs(args: argparse.Namespace) -> dict:
    from pathlib import Path

    from .wiki_pairs import build

    return build(Path(args.out), args.train, args.dev)  # printed by cli.main (cliargs.print_result)


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
