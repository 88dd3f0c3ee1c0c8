"""Plain-text corpus files: UTF-8 checking and reading them as documents (see corpus.py for the rules)."""
from __future__ import annotations

import codecs
import re
from pathlib import Path

from ..errors import UserError

BLANK_LINE = re.compile(r"\n[ \t\f\v\r]*\n")
AUTO_PEEK_CHARS = 1 << 20


def scan_files(files: list[Path], errors: str) -> tuple[list[Path], int]:
    """(files holding any non-whitespace text, invalid UTF-8 lines in all). Strict mode refuses the first bad file."""
    with_text, bad_total = [], 0
    for path in files:
        bad, first, has_text = _scan(path)
        if bad and errors == "strict":
            raise UserError(f"{path}: {bad} line(s) are not valid UTF-8 (first: line {first}); "
                            "convert the file to UTF-8 or pass --encoding-errors replace")
        bad_total += bad
        if has_text:
            with_text.append(path)
    return with_text, bad_total


def _scan(path: Path) -> tuple[int, int, bool]:
    # Fast path: one streaming strict decode (C speed); only a failing file is re-read line by line to count.
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    has_text = False
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 24), b""):
                has_text = has_text or _has_text(decoder.decode(chunk))
            decoder.decode(b"", final=True)
        return 0, 0, has_text
    except UnicodeDecodeError:
        pass
    bad = first = 0
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                bad += 1
                first = first or lineno
                text = line.decode("utf-8", errors="replace")
            has_text = has_text or _has_text(text)
    return bad, first, has_text


def _has_text(text: str) -> bool:
    return bool(text.strip().strip("\ufeff"))


def text_docs(files: list[str], doc_by: str, errors: str, max_docs: int | None):
    n = 0
    for path in files:
        for text in _file_docs(path, doc_by, errors):
            yield {"text": text}
            n += 1
            if max_docs and n >= max_docs:
                return


def _file_docs(path: str, doc_by: str, errors: str):
    with open(path, encoding="utf-8-sig", errors=errors) as f:
        if doc_by == "auto":
            doc_by = "paragraph" if BLANK_LINE.search(f.read(AUTO_PEEK_CHARS)) else "line"
            f.seek(0)
        if doc_by == "file":
            text = f.read().strip()
            if text:
                yield text
            return
        if doc_by == "line":
            for line in f:
                if line.strip():
                    yield line.strip()
            return
        lines = []
        for line in f:
            if line.strip():
                lines.append(line.strip())  # hard-wrapped prose: a line break is not a sentence end
            elif lines:
                yield " ".join(lines)
                lines = []
        if lines:
            yield " ".join(lines)
