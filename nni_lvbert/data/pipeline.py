"""`prepare()`: corpus -> split -> tokenizer -> packed, cached train/validation datasets.

Layout under the cache root (`--cache-dir`, else $LVBERT_CACHE, else ~/.cache/nni-lvbert):

    tokenizers/<corpus>-v<vocab>-<key>/     trained tokenizer, reused by every max_length / seed
    data/<corpus>-v<vocab>-L<len>-<key>/    meta.json (settings + stats), tokenizer/, train/, val/ (arrow)

Keys hash the corpus identity, tokenizer, every setting and the code versions, so nothing made with other
settings is reused; entries appear atomically (see cache.py).

Damage after the fact (a truncated arrow file, a broken meta.json or tokenizer.json) is never used: every load checks
the entry (`PreparedData.verify`: file sizes recorded at build time, arrow row counts, tokenizer, JSON files).
`prepare()` rebuilds a damaged entry it would build; a damaged directory given explicitly (`--data DIR`) is refused
with one line.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import safeio
from ..errors import UserError
from . import cache
from .corpus import resolve_corpus
from .masking import MLM_PROBABILITY, mask_validation
from .split import DEFAULT_VAL_FRACTION, check_val_fraction, split_documents
from .tokenizer import MIN_VOCAB, TOKENIZER_VERSION, check_max_length, check_vocab, load_tokenizer, train_tokenizer

DATA_VERSION = 1  # bump whenever packing, masking or the stored format changes
PARALLEL_MIN_WORDS = 1_000_000  # below this, worker start-up costs more than it saves
ENTRY_FIX = ("prepare the data again (`lvbert data prepare` with the settings that made it rebuilds a damaged "
             "cache entry)")
SPLIT_COLUMNS = {"train": ("input_ids", "token_type_ids"), "val": ("input_ids", "token_type_ids", "labels")}


@dataclass
class PreparedData:
    """A prepared cache entry: tokenizer + packed train split + fixed-masked validation split."""

    path: Path
    meta: dict = field(repr=False)
    reused: bool = False

    @classmethod
    def load(cls, path, reused: bool = False, fix: str = ENTRY_FIX) -> PreparedData:
        """A checked prepared-data directory: UserError (one line, naming the damaged file, ending with `fix`)
        when anything in it is missing, truncated or unreadable."""
        path = Path(path).expanduser().resolve()
        if not cache.is_complete(path):
            raise UserError(f"{path} is not a prepared data directory (run `lvbert data prepare`)")
        meta = safeio.read_json(path / cache.META_FILE, "prepared data file", fix)
        if meta.get("version") != DATA_VERSION:
            raise UserError(f"{path} was prepared by another version of nni-lvbert; run `lvbert data prepare` again")
        prepared = cls(path, meta, reused)
        prepared.verify(fix)
        return prepared

    def verify(self, fix: str = ENTRY_FIX) -> None:
        """Cheap integrity check (no data is decoded): the metadata is complete, every file has the size it was
        written with (entries made since sizes are recorded), the tokenizer loads with the recorded vocabulary, and
        each split's arrow files hold the recorded number of sequences."""
        meta_file = self.path / cache.META_FILE
        try:
            rows = {name: int(self.stats[name]["sequences"]) for name in SPLIT_COLUMNS}
            vocab = int(self.stats["vocab_size"])
            int(self.settings["max_length"]), float(self.settings["mlm_probability"])
        except (KeyError, TypeError, ValueError):
            raise safeio.damaged(meta_file, "incomplete metadata", fix) from None
        if "files" in self.meta:
            safeio.check_file_sizes(self.path, self.meta["files"], fix)
        n = safeio.check_tokenizer_dir(self.tokenizer_dir, fix)
        if n != vocab:
            raise safeio.damaged(self.tokenizer_dir / "tokenizer.json", f"{n} tokens where {vocab} were recorded", fix)
        for name, columns in SPLIT_COLUMNS.items():
            safeio.check_dataset_dir(self.path / name, rows[name], columns, fix)

    @property
    def settings(self) -> dict:
        return self.meta["settings"]

    @property
    def stats(self) -> dict:
        return self.meta["stats"]

    @property
    def tokenizer_dir(self) -> Path:
        return self.path / "tokenizer"

    @property
    def train_dir(self) -> Path:
        return self.path / "train"

    @property
    def val_dir(self) -> Path:
        return self.path / "val"

    @property
    def vocab_size(self) -> int:
        return self.stats["vocab_size"]

    @property
    def max_length(self) -> int:
        return self.settings["max_length"]

    def tokenizer(self):
        return safeio.load_tokenizer_dir(self.tokenizer_dir, ENTRY_FIX)

    def train_dataset(self):
        return safeio.load_dataset_dir(self.train_dir, ENTRY_FIX)

    def val_dataset(self):
        return safeio.load_dataset_dir(self.val_dir, ENTRY_FIX)


def prepare(corpus=None, size: str = "small", *, vocab_size: int | None = None, max_length: int | None = None,
            tokenizer=None, val_fraction: float = DEFAULT_VAL_FRACTION, seed: int = 0,
            mlm_probability: float = MLM_PROBABILITY, lowercase: bool = True, cache_dir=None,
            num_proc: int | None = None, max_docs: int | None = None, text_column: str = "text",
            doc_by: str = "auto", encoding_errors: str = "strict", log=None) -> PreparedData:
    """Build (or reuse) tokenizer + cached splits. `size` supplies vocab_size / max_length defaults."""
    from ..config import load_size

    t0 = time.perf_counter()
    say = (lambda msg: log(f"[{time.perf_counter() - t0:5.1f}s] {msg}")) if log else (lambda msg: None)
    warn = (lambda msg: say(f"warning: {msg}")) if log else (lambda msg: print(f"warning: {msg}", file=sys.stderr))
    cfg = load_size(size)
    max_length = cfg.max_length if max_length is None else max_length
    check_max_length(max_length, cfg.max_position)
    check_val_fraction(val_fraction)
    if not 0.0 < mlm_probability < 1.0:
        raise UserError(f"mlm_probability must be between 0 and 1, got {mlm_probability}")
    if max_docs is not None and max_docs < 2:
        raise UserError(f"max_docs must be at least 2, got {max_docs}")
    if num_proc is not None and num_proc < 1:
        raise UserError(f"num_proc must be at least 1, got {num_proc}")
    src = resolve_corpus(corpus, text_column=text_column, doc_by=doc_by, encoding_errors=encoding_errors)
    corpus_id = src.identity()
    root = cache.cache_root(cache_dir)

    given_tok = None
    if tokenizer is not None:
        given_tok = load_tokenizer(tokenizer, lowercase=lowercase, max_position=cfg.max_position)
        if vocab_size is not None:
            check_vocab(given_tok, vocab_size, what="the requested vocab_size")
        vocab_size = len(given_tok)
        tok_id = {"given": cache.digest(given_tok.backend_tokenizer.to_str())}
    else:
        vocab_size = cfg.vocab_size if vocab_size is None else vocab_size
        if vocab_size < MIN_VOCAB:
            raise UserError(f"vocab_size must be at least {MIN_VOCAB} for a WordPiece vocabulary, got {vocab_size}")
        tok_id = {"trained": cache.digest({"v": TOKENIZER_VERSION, "corpus": corpus_id, "val_fraction": val_fraction,
                                          "max_docs": max_docs, "vocab_size": vocab_size, "lowercase": lowercase})}
    settings = {"size": size, "vocab_size": vocab_size, "max_length": max_length, "max_position": cfg.max_position,
                "val_fraction": val_fraction, "seed": seed, "mlm_probability": mlm_probability,
                "lowercase": lowercase, "max_docs": max_docs}
    key = cache.digest({"v": DATA_VERSION, "corpus": corpus_id, "tokenizer": tok_id, **settings, "size": None})
    final = root / "data" / f"{src.slug()}-v{vocab_size}-L{max_length}-{key}"
    if cache.is_complete(final):
        try:
            prepared = PreparedData.load(final, reused=True, fix="rebuilding it")
        except UserError as exc:
            warn(f"{exc}")
            cache.discard(final)
        else:
            say(f"reusing {final}")
            return prepared

    _quiet_datasets()
    with cache.atomic_dir(final) as tmp:
        work = tmp / "work"
        say(f"reading corpus: {src.label}")
        docs, info = src.load(work, max_docs)
        if info["invalid_utf8_lines"]:
            say(f"warning: {info['invalid_utf8_lines']} line(s) were not valid UTF-8 and were decoded with U+FFFD")
        procs = num_proc or _auto_procs(docs)
        work.mkdir(parents=True, exist_ok=True)
        train_docs, val_docs, words = split_documents(docs, val_fraction, num_proc=procs if procs > 1 else None,
                                                      cache_file=str(work / "split.arrow"))
        say(f"split: {len(train_docs)} train / {len(val_docs)} validation documents")

        if given_tok is not None:
            given_tok.save_pretrained(str(tmp / "tokenizer"))
            tok = given_tok
        else:
            tok_dir = root / "tokenizers" / f"{src.slug()}-v{vocab_size}-{tok_id['trained']}"
            if cache.is_complete(tok_dir):
                try:
                    _check_tokenizer_entry(tok_dir)
                except UserError as exc:
                    warn(f"{exc}")
                    cache.discard(tok_dir)
            if not cache.is_complete(tok_dir):
                say(f"training a {vocab_size}-token WordPiece tokenizer on the training documents")
                with cache.atomic_dir(tok_dir) as ttmp:
                    texts = (b["text"] for b in train_docs.iter(batch_size=1000))
                    trained = train_tokenizer(texts, vocab_size, lowercase=lowercase, length=len(train_docs),
                                              max_position=cfg.max_position)
                    trained.save_pretrained(str(ttmp))
                    cache.write_meta(ttmp, {"version": TOKENIZER_VERSION, "corpus": corpus_id,
                                            "vocab_size": len(trained), "requested_vocab_size": vocab_size,
                                            "files": safeio.file_sizes(ttmp)})
            shutil.copytree(tok_dir, tmp / "tokenizer", ignore=shutil.ignore_patterns(cache.META_FILE))
            tok = load_tokenizer(tmp / "tokenizer", max_position=cfg.max_position)
            if len(tok) < vocab_size:
                say(f"note: the corpus only supports {len(tok)} WordPiece tokens (asked for {vocab_size})")

        say(f"packing sequences of at most {max_length} tokens")
        tok_file = tmp / "tokenizer" / "tokenizer.json"
        train = _pack(train_docs, tok_file, tok, max_length, procs, work / "train.arrow", key + "-train")
        val = _pack(val_docs, tok_file, tok, max_length, procs, work / "val.arrow", key + "-val")
        if len(train) == 0 or len(val) == 0:
            raise UserError(f"{src.label}: too little text to make training and validation sequences")
        val = mask_validation(val, tok, mlm_probability, seed, cache_file=str(work / "val-masked.arrow"))

        train.save_to_disk(str(tmp / "train"))
        val.save_to_disk(str(tmp / "val"))
        n_docs = {"train": len(train_docs), "val": len(val_docs)}
        shutil.rmtree(work, ignore_errors=True)  # datasets' intermediate arrow files; train/ and val/ are copies
        stats = {
            "corpus": src.label,
            "vocab_size": len(tok),
            "pad_token_id": tok.pad_token_id,
            "invalid_utf8_lines": info["invalid_utf8_lines"],
            "train": {"documents": n_docs["train"], "words": words["train"], **_seq_stats(train)},
            "val": {"documents": n_docs["val"], "words": words["val"], **_seq_stats(val)},
        }
        stats["bytes"] = cache.dir_size(tmp)
        stats["prepare_seconds"] = round(time.perf_counter() - t0, 2)
        cache.write_meta(tmp, {"version": DATA_VERSION, "key": key, "settings": settings,
                               "corpus": {"kind": src.kind, "identity": corpus_id}, "tokenizer": tok_id,
                               "stats": stats, "files": safeio.file_sizes(tmp)})
    return PreparedData.load(final)


def _check_tokenizer_entry(tok_dir: Path) -> None:
    """UserError when a cached trained tokenizer is damaged (then it is trained again)."""
    fix = "training it again"
    meta = safeio.read_json(tok_dir / cache.META_FILE, "tokenizer cache file", fix)
    if "files" in meta:
        safeio.check_file_sizes(tok_dir, meta["files"], fix)
    n = safeio.check_tokenizer_dir(tok_dir, fix)
    if isinstance(meta.get("vocab_size"), int) and n != meta["vocab_size"]:
        raise safeio.damaged(tok_dir / "tokenizer.json", f"{n} tokens where {meta['vocab_size']} were recorded", fix)


def _pack(docs, tokenizer_file: Path, tok, max_length: int, procs: int, cache_file: Path, fingerprint: str):
    from .packing import pack_batch, packed_features

    kwargs = {"tokenizer_file": str(tokenizer_file), "max_length": max_length,
              "cls_id": tok.cls_token_id, "sep_id": tok.sep_token_id}
    return docs.map(pack_batch, batched=True, batch_size=256, fn_kwargs=kwargs, remove_columns=docs.column_names,
                    features=packed_features(len(tok)), num_proc=procs if procs > 1 and len(docs) >= procs else None,
                    cache_file_name=str(cache_file), new_fingerprint=fingerprint, desc="packing")


def _seq_stats(ds) -> dict:
    import pyarrow.compute as pc

    ids = ds.data.column("input_ids")
    out = {"sequences": len(ds), "tokens": int(pc.sum(pc.list_value_length(ids)).as_py() or 0)}
    if "labels" in ds.column_names:
        labels = pc.list_flatten(ds.data.column("labels"))
        out["masked"] = int(pc.sum(pc.not_equal(labels, -100)).as_py() or 0)
    return out


def _auto_procs(docs) -> int:
    # Arrow buffer sizes are known without reading the text (a hub corpus can be tens of GB).
    if docs.data.nbytes < PARALLEL_MIN_WORDS * 6:  # ~6 bytes per word
        return 1
    return max(1, min(os.cpu_count() or 1, 8))


def _quiet_datasets() -> None:
    # Progress bars and "generating split" logs would drown the few lines prepare prints. Rust-side tokenizer
    # threads are turned off (as `lvbert` does) because datasets forks worker processes after the tokenizer ran.
    import datasets

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    datasets.disable_progress_bars()
    datasets.utils.logging.set_verbosity_error()
