"""Read back what earlier commands wrote, so that a damaged file is one UserError line, never a raw traceback.

Weights (safetensors), Lightning checkpoints, tokenizer directories, JSON files and `datasets` arrow directories
can all be cut short (a full disk, a copy interrupted, a kill -9 of a tool that does not write atomically) or
overwritten with something else. Every function here checks such a file before a library parses it (cheaply:
header sizes, zip central directory and CRCs, JSON syntax, arrow row counts) and turns whatever still goes wrong into
`UserError("<path> is damaged or truncated (<problem>); <how to recover>")`. Nothing is unpickled.

Heavy libraries (torch, safetensors, tokenizers, transformers, pyarrow) are imported inside the functions that
need them.
"""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

from .errors import UserError

DAMAGED = "is damaged or truncated"
CHECKPOINT_FIX = "pass --overwrite to start the run again (the checkpoint cannot be resumed)"
CHECKPOINT_KEYS = ("state_dict", "global_step")  # what a Lightning checkpoint always holds
MAX_SAFETENSORS_HEADER = 100 << 20  # safetensors itself refuses headers above 100 MB


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def reason(exc: BaseException) -> str:
    """The first line of an exception's message (or its type), without library boilerplate."""
    lines = [s.strip() for s in str(exc).strip().splitlines() if s.strip()]
    text = lines[0] if lines else type(exc).__name__
    for prefix in ("Error while deserializing header: ",):
        text = text.removeprefix(prefix)
    return text[:200]


def damaged(path, problem: str, fix: str | None = None) -> UserError:
    """UserError('<path> is damaged or truncated (<problem>); <fix>')."""
    msg = f"{path} {DAMAGED} ({problem})"
    if fix:
        msg += f"; {fix}"
    return UserError(one_line(msg))


def _require_file(path: Path, what: str, fix: str | None) -> int:
    """The size of `path`; UserError when it is missing or not a file."""
    if not path.exists():
        raise UserError(one_line(f"{what} not found: {path}" + (f"; {fix}" if fix else "")))
    if not path.is_file():
        raise UserError(f"{what} {path} is not a file")
    return path.stat().st_size


def read_bytes(path, what: str = "file", fix: str | None = None) -> bytes:
    path = Path(path)
    _require_file(path, what, fix)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UserError(one_line(f"cannot read {path}: {exc.strerror or reason(exc)}")) from None


def read_json(path, what: str = "file", fix: str | None = None, kind: type | None = dict):
    """Parsed JSON of `path` (a `kind` instance when given); damaged() when it does not parse."""
    path = Path(path)
    raw = read_bytes(path, what, fix)
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise damaged(path, "not UTF-8 text", fix) from None
    except json.JSONDecodeError as exc:
        problem = "empty file" if not raw.strip() else f"invalid JSON at line {exc.lineno} column {exc.colno}"
        raise damaged(path, problem, fix) from None
    if kind is not None and not isinstance(data, kind):
        raise damaged(path, f"expected a JSON {'object' if kind is dict else kind.__name__}", fix)
    return data


# --- safetensors -------------------------------------------------------------------------------------------------

def check_safetensors(path, fix: str | None = None, what: str = "weights file") -> dict:
    """The header of a safetensors file after checking that the file holds exactly the bytes the header announces.

    Catches truncation at any point (the header's data offsets end beyond the file) and files that are not
    safetensors at all, without reading the tensor data."""
    path = Path(path)
    size = _require_file(path, what, fix)
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise damaged(path, f"{size} bytes, too short for a safetensors header", fix)
            n = int.from_bytes(head, "little")
            if n > size - 8 or n > MAX_SAFETENSORS_HEADER:
                problem = (f"its header announces {n:,} bytes but the file has {size:,}" if n <= MAX_SAFETENSORS_HEADER
                           else "not a safetensors file")
                raise damaged(path, problem, fix)
            raw = f.read(n)
    except OSError as exc:
        raise UserError(one_line(f"cannot read {path}: {exc.strerror or reason(exc)}")) from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise damaged(path, "unreadable safetensors header", fix) from None
    if not isinstance(header, dict):
        raise damaged(path, "unreadable safetensors header", fix)
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, stop = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise damaged(path, f"header entry {name!r} has no data offsets", fix) from None
        if not 0 <= begin <= stop:
            raise damaged(path, f"header entry {name!r} has bad data offsets", fix)
        end = max(end, stop)
    need = 8 + n + end
    if size < need:
        raise damaged(path, f"{size:,} of {need:,} bytes", fix)
    if size > need:
        raise damaged(path, f"{size - need:,} bytes beyond the tensors its header describes", fix)
    return header


def weights_fix(path) -> str:
    """How to recover a damaged weights file of a run directory: --resume writes it again from the checkpoint."""
    run = Path(path).parent
    if (run / "checkpoints" / "last.ckpt").is_file():
        return (f"rerun the command that trained {run} with --resume to write it again from checkpoints/last.ckpt "
                "(or train again with --overwrite)")
    return f"train {run} again (--overwrite)"


def _safetensors_errors() -> tuple:
    from safetensors import SafetensorError

    return (SafetensorError, OSError, ValueError, EOFError)


def load_weights(module, path, *, matches: str | None = None, fix: str | None = None) -> None:
    """Load a safetensors file into `module` (no pickle) requiring exactly the module's tensors.

    damaged() for a file that is cut short or not safetensors; UserError "<path> does not match <matches>" when it is
    intact but holds other tensors (names or shapes). `fix` defaults to weights_fix(path)."""
    from safetensors.torch import load_model

    path = Path(path)
    fix = fix or weights_fix(path)
    check_safetensors(path, fix)
    try:
        missing, unexpected = load_model(module, str(path), strict=False)
    except RuntimeError as exc:  # load_state_dict: tensors of other shapes
        mismatch = [line.strip() for line in str(exc).splitlines() if "size mismatch" in line]
        if mismatch:
            raise UserError(one_line(f"{path} does not match {matches or 'the model'}: {mismatch[0][:300]}"
                                     + (f" (and {len(mismatch) - 1} more)" if len(mismatch) > 1 else ""))) from None
        raise damaged(path, reason(exc), fix) from None
    except _safetensors_errors() as exc:
        raise damaged(path, reason(exc), fix) from None
    if missing or unexpected:
        raise UserError(f"{path} does not match {matches or 'the model'} "
                        f"({len(missing)} missing, {len(unexpected)} unexpected tensors)")


@contextmanager
def open_weights(path, fix: str | None = None):
    """`safetensors.safe_open(path, framework="pt")` after check_safetensors(); reading errors become damaged()."""
    from safetensors import safe_open

    path = Path(path)
    fix = fix or weights_fix(path)
    check_safetensors(path, fix)
    errors = _safetensors_errors()
    try:
        handle = safe_open(str(path), framework="pt")
    except errors as exc:
        raise damaged(path, reason(exc), fix) from None
    with handle as f:
        try:
            yield f
        except errors as exc:
            raise damaged(path, reason(exc), fix) from None


# --- Lightning checkpoints -----------------------------------------------------------------------------------------

def check_checkpoint(path, fix: str | None = CHECKPOINT_FIX) -> None:
    """Check that a Lightning checkpoint is a complete torch zip archive (central directory, every member's CRC)
    whose pickle names a state_dict and a global_step, before Lightning unpickles it. Nothing is unpickled here:
    the pickle's opcodes are only scanned."""
    import zipfile

    path = Path(path)
    size = _require_file(path, "checkpoint", fix)
    if size == 0:
        raise damaged(path, "empty file", fix)
    try:
        with zipfile.ZipFile(path) as z:
            pickles = [n for n in z.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
            if len(pickles) != 1:
                raise damaged(path, "not a PyTorch checkpoint archive", fix)
            bad = z.testzip()
            if bad is not None:
                raise damaged(path, f"checksum mismatch in {bad}", fix)
            strings = _pickle_strings(z.read(pickles[0]))
    except zipfile.BadZipFile:
        raise damaged(path, f"not a complete zip archive, {size:,} bytes", fix) from None
    except (OSError, EOFError, ValueError, zipfile.LargeZipFile, NotImplementedError) as exc:
        raise damaged(path, reason(exc), fix) from None
    if strings is None:
        raise damaged(path, "unreadable pickle", fix)
    missing = [k for k in CHECKPOINT_KEYS if k not in strings]
    if missing:
        raise damaged(path, f"not a Lightning checkpoint: no {', '.join(missing)}", fix)


def _pickle_strings(data: bytes) -> set[str] | None:
    """Every string constant of a pickle (None when the opcode stream is broken); nothing is executed."""
    import pickletools

    out = set()
    try:
        for opcode, arg, _pos in pickletools.genops(data):
            if isinstance(arg, str):
                out.add(arg)
    except Exception:  # noqa: BLE001  (genops raises ValueError and others on a broken stream)
        return None
    return out


# --- tokenizers ----------------------------------------------------------------------------------------------------

TOKENIZER_SIDE_FILES = ("tokenizer_config.json", "special_tokens_map.json")


def read_tokenizer_json(path, fix: str | None = None) -> dict:
    """The parsed tokenizer.json (damaged() unless it is a JSON object with a `model`)."""
    data = read_json(path, "tokenizer file", fix)
    if "model" not in data:
        raise damaged(path, "no tokenizer model in it", fix)
    return data


def check_tokenizer_dir(path, fix: str | None = None) -> int:
    """The vocabulary size of a saved PreTrainedTokenizerFast directory, after checking that tokenizer.json loads
    and the side files that `from_pretrained` reads parse."""
    from tokenizers import Tokenizer

    d = Path(path)
    if not d.is_dir():
        raise UserError(one_line(f"tokenizer directory not found: {d}" + (f"; {fix}" if fix else "")))
    tj = d / "tokenizer.json"
    if not tj.is_file():
        raise UserError(one_line(f"{d} holds no tokenizer.json" + (f"; {fix}" if fix else "")))
    for name in TOKENIZER_SIDE_FILES:
        if (d / name).exists():
            read_json(d / name, "tokenizer file", fix)
    read_tokenizer_json(tj, fix)
    try:
        return Tokenizer.from_file(str(tj)).get_vocab_size()
    except Exception as exc:  # noqa: BLE001  (tokenizers raises plain Exception for bad files)
        raise damaged(tj, reason(exc), fix) from None


def load_tokenizer_dir(path, fix: str | None = None):
    """PreTrainedTokenizerFast.from_pretrained(path) after check_tokenizer_dir(); any failure is one line."""
    from transformers import PreTrainedTokenizerFast

    check_tokenizer_dir(path, fix)
    try:
        return PreTrainedTokenizerFast.from_pretrained(str(path))
    except Exception as exc:  # noqa: BLE001  (files checked above: what is left is a damaged directory)
        raise damaged(path, reason(exc), fix) from None


# --- datasets (save_to_disk directories) ---------------------------------------------------------------------------

def arrow_rows(path, fix: str | None = None) -> tuple[int, list[str]]:
    """(rows, column names) of one arrow stream file as `datasets` writes them, reading only message headers."""
    import pyarrow as pa

    path = Path(path)
    _require_file(path, "arrow file", fix)
    try:
        with pa.memory_map(str(path)) as mm:
            reader = pa.ipc.open_stream(mm)
            rows = sum(batch.num_rows for batch in reader)
            return rows, list(reader.schema.names)
    except (pa.ArrowException, OSError, ValueError, EOFError) as exc:
        raise damaged(path, reason(exc), fix) from None


def check_dataset_dir(path, rows: int | None = None, columns=None, fix: str | None = None) -> int:
    """Rows of a `Dataset.save_to_disk` directory after checking its JSON files, that every arrow file is complete
    and (when given) the expected row count and columns. Returns the row count."""
    d = Path(path)
    if not d.is_dir():
        raise UserError(one_line(f"dataset directory not found: {d}" + (f"; {fix}" if fix else "")))
    state = read_json(d / "state.json", "dataset file", fix)
    read_json(d / "dataset_info.json", "dataset file", fix)
    try:
        files = [f["filename"] for f in state["_data_files"]]
    except (KeyError, TypeError):
        raise damaged(d / "state.json", "no list of data files", fix) from None
    if not files:
        raise damaged(d / "state.json", "no data files listed", fix)
    total, names = 0, None
    for name in files:
        if os.path.basename(name) != name:
            raise damaged(d / "state.json", f"bad data file name {name!r}", fix)
        n, cols = arrow_rows(d / name, fix)
        total += n
        names = names or cols
    if columns is not None and not set(columns) <= set(names or []):
        raise damaged(d, f"columns {sorted(names or [])}, expected {sorted(columns)}", fix)
    if rows is not None and total != rows:
        raise damaged(d, f"{total:,} rows where {rows:,} were written", fix)
    return total


def load_dataset_dir(path, fix: str | None = None):
    """datasets.load_from_disk(path) with library errors turned into damaged()."""
    import datasets
    import pyarrow as pa

    try:
        return datasets.load_from_disk(str(path))
    except (pa.ArrowException, OSError, ValueError, KeyError, EOFError) as exc:
        raise damaged(path, reason(exc), fix) from None


def file_sizes(root, skip=()) -> dict[str, int]:
    """{relative posix path: size} of every file under `root` (for later truncation checks)."""
    root = Path(root)
    return {p.relative_to(root).as_posix(): p.stat().st_size
            for p in sorted(root.rglob("*")) if p.is_file() and p.relative_to(root).as_posix() not in skip}


def check_file_sizes(root, sizes: dict, fix: str | None = None) -> None:
    """damaged() for the first file under `root` that is missing or of another size than recorded."""
    root = Path(root)
    if not isinstance(sizes, dict):
        raise damaged(root, "bad file list in its meta.json", fix)
    for rel, size in sorted(sizes.items()):
        p = root / rel
        if not p.is_file():
            raise damaged(root, f"{rel} is missing", fix)
        actual = p.stat().st_size
        if actual != size:
            raise damaged(p, f"{actual:,} bytes where {size:,} were written", fix)
