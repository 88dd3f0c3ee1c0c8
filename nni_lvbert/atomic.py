"""The one way a file or directory is written: to a temp name beside the target, then one rename.

A kill at any moment leaves either the old target or the new one, never half of one. Files get the permissions of a
normally created file (the umask's, not mkstemp's 0600). Every writer of the package goes through here: text and
JSON (`write_text`, `write_json`), figures (`save_figure`), copies (`copy_file`), weights and other files written by
a library (`atomic_path`) and whole directories (`atomic_directory`: model directories).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path, suffix: str = ".tmp"):
    """Yield a temp path beside `path` for a writer to fill; on success it becomes `path`, on failure it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_text(path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path, data) -> None:
    write_text(path, json.dumps(data, indent=2) + "\n")


def copy_file(src, dst) -> None:
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def pyplot():
    """matplotlib.pyplot on the Agg backend (figures are files; no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path, **savefig_kwargs) -> None:
    """Write a matplotlib figure to `path` (its suffix picks the format), then close it."""
    import matplotlib.pyplot as plt

    try:
        with atomic_path(path, suffix=Path(path).suffix or ".png") as tmp:
            fig.savefig(tmp, **savefig_kwargs)
    finally:
        plt.close(fig)


@contextmanager
def atomic_directory(out):
    """Yield a fresh temp directory beside `out` to fill; on success it takes `out`'s place (an existing `out` is
    moved aside first and removed once the new one is in place), on failure it is removed."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        yield tmp
        for path in tmp.rglob("*"):  # some writers use mkstemp (0600): every file gets the umask's permissions
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask())
        os.chmod(tmp, 0o777 & ~umask())
        old = None
        if out.exists():
            old = out.parent / f"{tmp.name}.old"
            os.replace(out, old)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
