"""Corpora: the embedded default, local files (text / jsonl / parquet), or a Hugging Face hub dataset.

Every corpus becomes a `datasets.Dataset` of documents with a `text` column (and an `id` column for the embedded
corpus). What a document is matters twice: the train/validation split is drawn per document, and packed sequences
never cross a document boundary.

- embedded: one Wikipedia article lead or one State-of-the-Union address per document (see corpus/ATTRIBUTION.md).
- text files (.txt, a folder of them, or a glob): `doc_by="auto"` (default) reads blank-line-separated paragraphs as
  documents (BERT's input format) and falls back to one document per line when a file has no blank line in its
  first MiB (one-article-per-line dumps); "paragraph", "line" and "file" force a rule.
- jsonl / json / parquet: one row per document, text in `text_column` (default "text").
- hub: "name" or "name:config" (e.g. "wikitext:wikitext-103-raw-v1"), split "train", for users who are online.

Non-UTF-8 text files are refused by default, naming how many lines are affected and the first one; with
`encoding_errors="replace"` (`--encoding-errors replace`) bad bytes become U+FFFD and the count is reported in the
stats instead. JSON files must always be valid UTF-8.
"""
from __future__ import annotations

import glob
import json
import lzma
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from .cache import digest, file_sha256
from .textfiles import scan_files, text_docs

EMBEDDED_DIR = Path(__file__).resolve().parent / "corpus"
EMBEDDED_FILES = ("wikipedia_vital_en.jsonl.xz", "sotu.jsonl.xz")
EMBEDDED_LABEL = "embedded (Wikipedia vital articles + State of the Union addresses)"
FORMAT_OF_SUFFIX = {".txt": "text", ".text": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
DOC_BY = ("auto", "paragraph", "line", "file")
ENCODING_ERRORS = ("strict", "replace")


@dataclass
class Corpus:
    kind: str  # embedded | text | json | parquet | hub
    label: str
    files: list[Path] = field(default_factory=list)
    hub_name: str | None = None
    hub_config: str | None = None
    text_column: str = "text"
    doc_by: str = "auto"
    encoding_errors: str = "strict"
    _hub_dataset: object = field(default=None, repr=False)

    def identity(self) -> dict:
        """What the cache key needs to know about the corpus; cheap except for hub corpora (which get loaded)."""
        if self.kind == "embedded":
            return {"kind": "embedded", "sha256": [file_sha256(EMBEDDED_DIR / f) for f in EMBEDDED_FILES]}
        if self.kind == "hub":
            ds = self._load_hub()
            return {"kind": "hub", "name": self.hub_name, "config": self.hub_config,
                    "fingerprint": ds._fingerprint, "text_column": self.text_column}
        # Path, size and mtime rather than a content hash: hashing a 40 GB dump on every run would defeat the cache.
        files = [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in self.files]
        ident = {"kind": self.kind, "files": files}
        if self.kind == "text":
            ident.update(doc_by=self.doc_by, encoding_errors=self.encoding_errors)
        else:
            ident.update(text_column=self.text_column)
        return ident

    def slug(self) -> str:
        if self.kind == "embedded":
            return "embedded"
        if self.kind == "hub":
            name = self.hub_name.replace("/", "_") + (f"-{self.hub_config}" if self.hub_config else "")
        else:
            name = self.files[0].stem if len(self.files) == 1 else f"{self.files[0].parent.name or 'files'}-{len(self.files)}"
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:40] or "corpus"

    def load(self, work_dir: Path, max_docs: int | None = None):
        """(documents Dataset, info dict). `work_dir` receives datasets' arrow files; the caller deletes it."""
        info = {"invalid_utf8_lines": 0}
        if self.kind == "embedded":
            ds = _from_generator(_embedded_docs, {"max_docs": max_docs}, work_dir, with_id=True)
        elif self.kind == "text":
            files, info["invalid_utf8_lines"] = scan_files(self.files, self.encoding_errors)
            if not files:
                raise UserError(f"corpus file contains only whitespace: {self.files[0]}" if len(self.files) == 1
                                else f"the {len(self.files)} corpus files of {self.label} contain only whitespace")
            gen_kwargs = {"files": [str(p) for p in files], "doc_by": self.doc_by,
                          "errors": self.encoding_errors, "max_docs": max_docs}
            ds = _from_generator(text_docs, gen_kwargs, work_dir, with_id=False)
        else:
            if self.kind == "json":
                scan_files(self.files, "strict")
            ds = self._load_hub() if self.kind == "hub" else self._load_table(work_dir)
            ds = self._text_only(ds, max_docs, work_dir)
        return ds, info

    def _load_table(self, work_dir: Path):
        import datasets

        try:
            return datasets.load_dataset(self.kind, data_files=[str(p) for p in self.files], split="train",
                                         cache_dir=str(work_dir))
        except Exception as exc:  # noqa: BLE001  (datasets wraps the parser's error in DatasetGenerationError)
            raise UserError(f"cannot read {self.label} as {self.kind}: {_root_message(exc)}") from None

    def _load_hub(self):
        if self._hub_dataset is not None:
            return self._hub_dataset
        offline_msg = (f"cannot reach the Hugging Face hub for {self.label!r} (offline?): "
                       "pass local files instead, e.g. --corpus path/to/*.txt")
        import datasets

        # In offline mode datasets only looks in its local cache (and fails fast); otherwise probe the network first.
        if not datasets.config.HF_HUB_OFFLINE and not _hub_reachable():
            raise UserError(offline_msg)

        try:
            self._hub_dataset = datasets.load_dataset(self.hub_name, self.hub_config, split="train")
        except ConnectionError:
            raise UserError(offline_msg) from None
        except Exception as exc:  # noqa: BLE001  (any hub failure is one error line)
            raise UserError(f"cannot load hub dataset {self.label!r}: {_root_message(exc)}") from None
        return self._hub_dataset

    def _text_only(self, ds, max_docs: int | None, work_dir: Path):
        col = self.text_column
        if col not in ds.column_names:
            raise UserError(f"{self.label} has no {col!r} column (columns: {', '.join(ds.column_names)}); "
                            "pass --text-column NAME")
        ds = ds.select_columns([col])
        if col != "text":
            ds = ds.rename_column(col, "text")
        if max_docs:
            ds = ds.select(range(min(max_docs, len(ds))))
        work_dir.mkdir(parents=True, exist_ok=True)  # not next to a hub dataset's files in the shared HF cache
        ds = ds.filter(_non_blank, batched=True, input_columns=["text"], cache_file_name=str(work_dir / "nonblank.arrow"))
        if len(ds) == 0:
            raise UserError(f"{self.label}: column {col!r} holds no text")
        return ds


def resolve_corpus(spec=None, text_column: str = "text", doc_by: str = "auto",
                   encoding_errors: str = "strict") -> Corpus:
    """Turn `--corpus` values (None/"embedded", paths, folders, globs, or one hub name) into a Corpus."""
    if doc_by not in DOC_BY:
        raise UserError(f"doc_by must be one of {', '.join(DOC_BY)}, got {doc_by!r}")
    if encoding_errors not in ENCODING_ERRORS:
        raise UserError(f"encoding_errors must be one of {', '.join(ENCODING_ERRORS)}, got {encoding_errors!r}")
    items = [spec] if isinstance(spec, (str, os.PathLike)) else list(spec or [])
    items = [str(i) for i in items]
    if not items or items == ["embedded"]:
        return Corpus("embedded", EMBEDDED_LABEL)
    files, hub = [], []
    for item in items:
        if item.startswith("hf:"):
            hub.append(item[3:])
        elif any(c in item for c in "*?["):
            matches = [Path(m) for m in sorted(glob.glob(os.path.expanduser(item), recursive=True))]
            found = [f for m in matches for f in (_data_files_in(m) if m.is_dir() else [m])]
            if not found:
                raise UserError(f"no corpus files match {item}")
            files += found
        elif (p := Path(item).expanduser()).is_dir():
            found = _data_files_in(p)
            if not found:
                raise UserError(f"no .txt/.jsonl/.json/.parquet files under {p}")
            files += found
        elif p.is_file():
            files.append(p)
        elif _looks_like_path(item):
            raise UserError(f"corpus file not found: {item}")
        else:
            hub.append(item)
    if hub:
        if files or len(hub) > 1:
            raise UserError("give either one Hugging Face hub dataset or local files, not a mix")
        name, _, config = hub[0].partition(":")
        return Corpus("hub", hub[0], hub_name=name, hub_config=config or None, text_column=text_column)
    files = [f.resolve() for f in dict.fromkeys(files)]
    kinds = sorted({FORMAT_OF_SUFFIX.get(f.suffix.lower(), "text") for f in files})
    if len(kinds) > 1:
        raise UserError(f"corpus mixes formats ({', '.join(kinds)}): give text files, jsonl or parquet, not a mix")
    if len(files) == 1 and files[0].stat().st_size == 0:
        raise UserError(f"corpus file is empty: {files[0]}")
    files = [f for f in files if f.stat().st_size > 0] or files
    label = str(files[0]) if len(files) == 1 else f"{len(files)} files ({files[0].parent})"
    return Corpus(kinds[0], label, files=files, text_column=text_column, doc_by=doc_by,
                  encoding_errors=encoding_errors)


def _from_generator(gen, gen_kwargs: dict, work_dir: Path, with_id: bool):
    import datasets

    cols = {"id": datasets.Value("string"), "text": datasets.Value("string")} if with_id \
        else {"text": datasets.Value("string")}
    # An explicit fingerprint skips hashing the generator; work_dir is fresh, so there is nothing to collide with.
    return datasets.Dataset.from_generator(gen, features=datasets.Features(cols), cache_dir=str(work_dir),
                                           gen_kwargs=gen_kwargs, fingerprint=digest([gen.__name__, gen_kwargs]))


def _embedded_docs(max_docs: int | None):
    n = 0
    for name in EMBEDDED_FILES:
        with lzma.open(EMBEDDED_DIR / name, "rt", encoding="utf-8") as f:
            for line in f:
                doc = json.loads(line)
                yield {"id": doc["id"], "text": doc["text"]}
                n += 1
                if max_docs and n >= max_docs:
                    return


def _data_files_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in FORMAT_OF_SUFFIX)


def _looks_like_path(item: str) -> bool:
    # Hub names are "name" or "owner/name", optionally ":config"; a suffix or path syntax means a missing file.
    # (A hub name with a dot in it can be forced with the "hf:" prefix.)
    name = item.split(":", 1)[0]
    return bool(Path(name).suffix) or name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name


def _non_blank(texts: list) -> list[bool]:
    return [isinstance(t, str) and bool(t.strip()) for t in texts]


def _hub_reachable(timeout: float = 3.0) -> bool:
    # datasets retries for ~25 s before giving up when there is no network; a 3 s socket probe fails fast instead.
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
        return True
    except OSError:
        return False


def _root_message(exc: BaseException) -> str:
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
