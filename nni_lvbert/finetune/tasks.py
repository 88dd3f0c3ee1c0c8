"""Downstream tasks: GLUE as distributed (each task's own TSV quirks), the Hugging Face hub, any labelled
CSV/TSV/JSONL/parquet file, and the embedded offline task `sotu-era`.

Every reader returns a `TaskData`: a train split and one or more dev splits of (text_a, text_b, label), the label
names (classification; inferred from the training split when the source does not fix them) or None (regression),
and the task's metrics and default epochs. Anything wrong with the input is one `UserError` line, raised before any
output is written.
"""
from __future__ import annotations

import json
import lzma
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError

TASKS_DIR = Path(__file__).resolve().parent / "embedded"


@dataclass
class Split:
    text_a: list[str]
    text_b: list[str] | None
    labels: list  # label names (classification) or floats (regression)

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class TaskData:
    name: str
    kind: str  # classification | regression
    label_names: list[str] | None
    train: Split
    dev: dict[str, Split]  # "dev", or "dev_matched"/"dev_mismatched" (MNLI)
    metrics: tuple[str, ...]
    epochs: int = 3
    swap_double: bool = False  # train on both sentence orders (MRPC, STS-B)
    label_scale: float = 1.0  # regression targets are divided by this (STS-B: 5)
    skipped: dict = field(default_factory=dict)  # malformed lines per file
    positive_label: str | None = None  # a two-class task's label F1 counts as positive (label index 1)

    def score_text(self) -> str:
        """What the task's score is, in words (results.json's `score`, the summary's)."""
        names = {"acc": "accuracy", "f1": "F1", "mcc": "Matthews correlation", "spearman": "Spearman",
                 "pearson": "Pearson", "em": "exact match"}
        parts = [names.get(m, m) for m in self.metrics]
        text = parts[0] if len(parts) == 1 else "mean of " + " and ".join(parts)
        if "f1" in self.metrics and self.label_names:
            text += f" (F1's positive class: label {self.label_names[1]!r})"
        return text

    @property
    def num_labels(self) -> int:
        return 1 if self.kind == "regression" else len(self.label_names)


@dataclass(frozen=True)
class GlueSpec:
    dir: str
    a: str | int  # header name, or column index (CoLA has no header)
    b: str | int | None
    label: str | int  # -1 = last column
    labels: tuple[str, ...] | None  # None: regression
    metrics: tuple[str, ...]
    epochs: int = 3
    header: bool = True
    dev: tuple[str, ...] = ("dev",)
    swap_double: bool = False
    label_scale: float = 1.0
    hub: str = ""
    hub_columns: tuple = ()


GLUE = {
    "cola": GlueSpec("CoLA", 3, None, 1, ("0", "1"), ("mcc",), header=False, hub="cola",
                     hub_columns=("sentence", None)),
    "sst-2": GlueSpec("SST-2", "sentence", None, "label", ("0", "1"), ("acc",), hub="sst2",
                      hub_columns=("sentence", None)),
    "mrpc": GlueSpec("MRPC", "#1 String", "#2 String", "Quality", ("0", "1"), ("acc", "f1"), swap_double=True,
                     hub="mrpc", hub_columns=("sentence1", "sentence2")),
    "sts-b": GlueSpec("STS-B", "sentence1", "sentence2", -1, None, ("spearman", "pearson"), epochs=10,
                      swap_double=True, label_scale=5.0, hub="stsb", hub_columns=("sentence1", "sentence2")),
    "qqp": GlueSpec("QQP", "question1", "question2", "is_duplicate", ("0", "1"), ("acc", "f1"), hub="qqp",
                    hub_columns=("question1", "question2")),
    "mnli": GlueSpec("MNLI", "sentence1", "sentence2", -1, ("contradiction", "entailment", "neutral"), ("acc",),
                     dev=("dev_matched", "dev_mismatched"), hub="mnli", hub_columns=("premise", "hypothesis")),
    "qnli": GlueSpec("QNLI", "question", "sentence", "label", ("entailment", "not_entailment"), ("acc",),
                     hub="qnli", hub_columns=("question", "sentence")),
    "rte": GlueSpec("RTE", "sentence1", "sentence2", "label", ("entailment", "not_entailment"), ("acc",), epochs=10,
                    hub="rte", hub_columns=("sentence1", "sentence2")),
    "wnli": GlueSpec("WNLI", "sentence1", "sentence2", "label", ("0", "1"), ("acc",), hub="wnli",
                     hub_columns=("sentence1", "sentence2")),
}
ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "sts": "sts-b"}
GLUE_HUB = "nyu-mll/glue"  # the hub's GLUE (parquet; "glue" redirects to it)
GLUE_SCORE_TASKS = ("cola", "sst-2", "mrpc", "sts-b", "qqp", "mnli", "qnli", "rte")  # no WNLI (as GLUE/ELECTRA)
EMBEDDED = {"sotu-era": "sotu_era.jsonl.xz"}


def glue_name(task: str) -> str | None:
    t = task.lower()
    t = ALIASES.get(t, t)
    return t if t in GLUE else None


def known_tasks() -> list[str]:
    return [*GLUE, *EMBEDDED, "squad", "squad_v2", "glue:<task>", "a name of your own with --text-column/--label-column"]


# --- GLUE TSV -------------------------------------------------------------------------------------------------
def _lines(path: Path) -> list[str]:
    if not path.is_file():
        raise UserError(f"missing split: {path} not found")
    try:
        text = path.read_text(encoding="utf-8-sig")  # MRPC may start with a byte-order mark
    except UnicodeDecodeError as exc:
        raise UserError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    lines = [ln for ln in text.replace("\r\n", "\n").split("\n") if ln.strip()]
    if not lines:
        raise UserError(f"{path} is empty")
    return lines


def _col(ref, header: list[str] | None, path: Path) -> int:
    if isinstance(ref, int):
        return ref
    if ref not in header:
        raise UserError(f"{path} has no column {ref!r} (header: {', '.join(header)}); is it the right GLUE task?")
    return header.index(ref)


def read_glue_tsv(path: Path, spec: GlueSpec, task: str) -> tuple[Split, int]:
    """One GLUE split; malformed lines (wrong field count, missing text, unknown label) are counted and skipped."""
    lines = _lines(path)
    header = lines[0].split("\t") if spec.header else None
    rows = lines[1:] if spec.header else lines
    if not rows:
        raise UserError(f"{path} holds a header but no examples")
    ia, ib = _col(spec.a, header, path), _col(spec.b, header, path) if spec.b is not None else None
    il = _col(spec.label, header, path)
    width = len(header) if header else None
    a, b, y, bad = [], [] if ib is not None else None, [], 0
    for line in rows:
        f = line.split("\t")
        need = max(ia, ib or 0, max(il, 0)) + 1
        if (width is not None and len(f) != width and task != "mnli") or len(f) < need:
            bad += 1
            continue
        label = f[il].strip()
        if spec.labels is None:
            try:
                value = float(label)
            except ValueError:
                bad += 1
                continue
        elif label not in spec.labels:
            bad += 1
            continue
        else:
            value = label
        a.append(f[ia])
        if b is not None:
            b.append(f[ib])
        y.append(value)
    if bad:
        print(f"warning: {path}: skipped {bad} malformed line(s) of {len(rows)}", file=sys.stderr)
    if not y:
        raise UserError(f"{path} holds no well-formed {task} examples ({bad} malformed lines)")
    return Split(a, b, y), bad


def load_glue(task: str, data: str | Path) -> TaskData:
    spec = GLUE[task]
    root = Path(data)
    if not root.is_dir():
        raise UserError(f"--data {root}: not a directory (give a GLUE task folder such as glue_data/{spec.dir})")
    if not (root / "train.tsv").is_file() and (root / spec.dir / "train.tsv").is_file():
        root = root / spec.dir  # the GLUE root was given
    train, skipped = read_glue_tsv(root / "train.tsv", spec, task)
    dev, counts = {}, {"train.tsv": skipped}
    for name in spec.dev:
        dev[name], counts[f"{name}.tsv"] = read_glue_tsv(root / f"{name}.tsv", spec, task)
    return TaskData(task, "regression" if spec.labels is None else "classification",
                    list(spec.labels) if spec.labels else None, train, dev, spec.metrics, spec.epochs,
                    spec.swap_double, spec.label_scale, counts)


# --- Hugging Face hub -----------------------------------------------------------------------------------------
def load_hub(name: str) -> TaskData:
    """`glue:cola`, `glue:sst2`, ... through `datasets` (online only; offline is one line)."""
    bench, _, config = name.partition(":")
    task = glue_name(config) if bench.lower() == "glue" else None
    if task is None:
        raise UserError(f"unknown hub task {name!r}; supported: glue:" + ", glue:".join(s.hub for s in GLUE.values()))
    spec = GLUE[task]
    try:
        import datasets

        ds = datasets.load_dataset(GLUE_HUB, spec.hub)
    except Exception as exc:  # noqa: BLE001  (offline, hub down, missing config: one line either way)
        msg = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise UserError(f"cannot load {name} from the Hugging Face hub (offline? {msg}); download GLUE and pass "
                        f"--task {task} --data DIR") from None
    ca, cb = spec.hub_columns

    def split(key: str) -> Split:
        d = ds[key]
        names = d.features["label"].names if spec.labels else None  # GLUE's 0/1 tasks keep the index
        labels = [float(v) if names is None else names[v] if names[v] in spec.labels else str(v) for v in d["label"]]
        return Split(list(d[ca]), list(d[cb]) if cb else None, labels)

    dev = {"dev_matched": split("validation_matched"), "dev_mismatched": split("validation_mismatched")} \
        if task == "mnli" else {"dev": split("validation")}
    return TaskData(task, "regression" if spec.labels is None else "classification",
                    list(spec.labels) if spec.labels else None, split("train"), dev, spec.metrics, spec.epochs,
                    spec.swap_double, spec.label_scale)


# --- any labelled file ----------------------------------------------------------------------------------------
READERS = (".csv", ".tsv", ".jsonl", ".json", ".parquet")


def _frame(path: Path):
    import pandas as pd

    if not path.is_file():
        raise UserError(f"missing split: {path} not found")
    if path.stat().st_size == 0:
        raise UserError(f"{path} is empty")
    try:
        if path.suffix == ".parquet":
            df = pd.read_parquet(path)
        elif path.suffix in (".jsonl", ".json"):
            df = pd.read_json(path, lines=True, dtype=False)
        else:
            df = pd.read_csv(path, sep="\t" if path.suffix == ".tsv" else ",", dtype=str, keep_default_na=False,
                             quoting=3 if path.suffix == ".tsv" else 0, encoding="utf-8-sig")
    except Exception as exc:  # noqa: BLE001
        raise UserError(f"cannot read {path} ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})") from None
    if len(df) == 0:
        raise UserError(f"{path} is empty")
    return df


def find_split(root: Path, names: tuple[str, ...]) -> Path:
    for n in names:
        for ext in READERS:
            if (root / f"{n}{ext}").is_file():
                return root / f"{n}{ext}"
    raise UserError(f"missing split: no {'/'.join(names)}.{{csv,tsv,jsonl,parquet}} in {root}")


def load_files(name: str, train_path, dev_path, text: str, pair: str | None, label: str, kind: str,
               positive: str | None = None) -> TaskData:
    """A labelled file pair; classification labels are inferred from train (sorted) and dev must use them. With two
    labels F1 is scored too, its positive class `positive` (default: the second label in sorted order)."""
    train_path = Path(train_path)
    if train_path.is_dir():
        root = train_path
        train_path = find_split(root, ("train",))
        dev_path = dev_path or find_split(root, ("dev", "validation", "valid"))
    if dev_path is None:
        raise UserError("missing split: give --data DIR holding train.* and dev.*, or --dev-data FILE")

    def read(path: Path) -> Split:
        df = _frame(Path(path))
        missing = [c for c in (text, pair, label) if c and c not in df.columns]
        if missing:
            raise UserError(f"{path} has no column {', '.join(map(repr, missing))} (columns: "
                            f"{', '.join(map(str, df.columns))}); set --text-column/--text-pair-column/--label-column")
        if kind == "regression":
            try:
                ys = [float(v) for v in df[label]]
            except (TypeError, ValueError):
                raise UserError(f"{path}: column {label!r} is not numeric (--task-type regression)") from None
        else:
            ys = [str(v) for v in df[label]]
        return Split([str(v) for v in df[text]], [str(v) for v in df[pair]] if pair else None, ys)

    train, dev = read(train_path), read(dev_path)
    names = None
    if kind == "classification":
        names = sorted(set(train.labels))
        unseen = sorted(set(dev.labels) - set(names))
        if unseen:
            raise UserError(f"{dev_path}: label(s) {', '.join(map(repr, unseen[:5]))} never occur in {train_path}")
        if len(names) < 2:
            raise UserError(f"{train_path} has a single label {names[0]!r}; classification needs two or more "
                            "(--task-type regression for scores)")
    if positive is not None:
        if kind != "classification" or len(names) != 2:
            raise UserError(f"--positive-label applies to a two-class task; {train_path} has "
                            f"{'scores' if kind != 'classification' else f'{len(names)} labels'}")
        if positive not in names:
            raise UserError(f"--positive-label {positive!r} is not a label of {train_path} (labels: "
                            f"{', '.join(map(repr, names))})")
        names = [n for n in names if n != positive] + [positive]
    metrics = ("spearman", "pearson") if kind == "regression" else ("acc", "f1") if len(names) == 2 else ("acc",)
    return TaskData(name, kind, names, train, {"dev": dev}, metrics,
                    positive_label=names[1] if len(metrics) == 2 and kind == "classification" else None)


# --- embedded ---------------------------------------------------------------------------------------------------
def load_embedded(name: str) -> TaskData:
    with lzma.open(TASKS_DIR / EMBEDDED[name], "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    part = {s: Split([r["text"] for r in rows if r["split"] == s], None,
                     [r["label"] for r in rows if r["split"] == s]) for s in ("train", "dev")}
    return TaskData(name, "classification", sorted(set(part["train"].labels)), part["train"], {"dev": part["dev"]},
                    ("acc",), epochs=3)


def load_task(task: str, data=None, dev_data=None, text_column=None, pair_column=None, label_column=None,
              task_type: str = "classification", positive_label: str | None = None) -> TaskData:
    """The task named `task` (see module docstring); raises UserError for anything unusable."""
    from .squad import load_squad, squad_name

    if positive_label is not None and not (text_column or label_column):
        raise UserError("--positive-label applies to a task of your own files (--text-column/--label-column); "
                        "GLUE's MRPC and QQP count label '1' as positive")

    if squad_name(task):
        return load_squad(task, data, dev_data)  # extractive QA (SQuAD JSON, or the hub without --data)
    if ":" in task:
        return load_hub(task)
    if text_column or label_column:
        if not (text_column and label_column):
            raise UserError("a labelled file needs both --text-column and --label-column")
        if data is None:
            raise UserError(f"--task {task} with --text-column needs --data (a file or a folder with train/dev)")
        return load_files(task, data, dev_data, text_column, pair_column, label_column, task_type, positive_label)
    g = glue_name(task)
    if g is not None:
        if data is None:
            raise UserError(f"--task {task} needs --data (the GLUE folder or glue_data/{GLUE[g].dir}); "
                            f"or --task glue:{GLUE[g].hub} to download it")
        return load_glue(g, data)
    if task in EMBEDDED:
        if data is not None:
            raise UserError(f"--task {task} is embedded in the package: drop --data")
        return load_embedded(task)
    raise UserError(f"unknown task {task!r}; known: {', '.join(known_tasks())}")


def find_glue_tasks(root) -> list[str]:
    """The GLUE tasks present under a GLUE root (folders with a train.tsv), in GLUE order."""
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"GLUE directory not found: {root}")
    found = [t for t, s in GLUE.items() if (root / s.dir / "train.tsv").is_file()]
    if not found:
        raise UserError(f"no GLUE task found in {root} (expected CoLA/train.tsv, SST-2/train.tsv, ...)")
    return found
