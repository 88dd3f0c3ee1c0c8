"""On-disk cache: where it lives, how entries are keyed, and how they are written without ever leaving half an entry.

An entry is a directory named by a digest of everything that affects its content (corpus identity, tokenizer,
settings, code versions), so a cache made with other settings can never be picked up. It is built in a hidden
temporary sibling and renamed into place only when complete; a crash or a bad input leaves no entry behind.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

CACHE_ENV = "LVBERT_CACHE"
DEFAULT_CACHE = Path("~/.cache/nni-lvbert")
META_FILE = "meta.json"  # written last inside an entry; an entry without it is treated as absent
STALE_TMP_SECONDS = 24 * 3600  # temp dirs this old belong to a killed run


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    root = cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_CACHE
    return Path(root).expanduser().resolve()


def digest(obj) -> str:
    """Short stable hash of a JSON-able object (dict key order does not matter)."""
    blob = json.dumps(obj, sort_keys=True, default=str).encode("utf-8")
    return hashlib.sha1(blob).hexdigest()[:16]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def is_complete(entry: Path) -> bool:
    """Finished writing (meta.json is written last). Says nothing about damage since: see PreparedData.load."""
    return (entry / META_FILE).is_file()


def read_meta(entry: Path) -> dict:
    return json.loads((entry / META_FILE).read_text())


def write_meta(entry: Path, meta: dict) -> None:
    (entry / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def _sweep_stale(parent: Path) -> None:
    now = time.time()
    for p in parent.glob(".*.tmp-*"):
        try:
            if now - p.stat().st_mtime > STALE_TMP_SECONDS:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:
            pass


def discard(entry: Path) -> None:
    """Remove a damaged entry. It is first renamed aside (to a name `_sweep_stale` also cleans up), so a concurrent
    builder can put the new entry in its place at once and nobody sees it half deleted."""
    entry = Path(entry)
    aside = entry.parent / f".{entry.name}.tmp-damaged-{os.getpid()}-{time.time_ns()}"
    try:
        os.replace(entry, aside)
    except FileNotFoundError:
        return  # another process discarded it already
    except OSError:
        shutil.rmtree(entry, ignore_errors=True)
        return
    shutil.rmtree(aside, ignore_errors=True)


@contextmanager
def atomic_dir(final: Path):
    """Yield a fresh temp dir next to `final`; on success rename it to `final`, on any exception delete it."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    _sweep_stale(final.parent)
    if final.exists() and not is_complete(final):
        shutil.rmtree(final, ignore_errors=True)  # not made by us (no meta.json): never trust it
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        os.replace(tmp, final)
    except OSError:
        # Another process finished the same entry first; entries are keyed by content, so theirs is as good.
        shutil.rmtree(tmp, ignore_errors=True)
        if not is_complete(final):
            raise
