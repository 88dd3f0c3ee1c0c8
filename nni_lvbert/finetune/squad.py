"""Extractive QA on SQuAD v1.1 / v2.0: reading the JSON as distributed (or `squad`/`squad_v2` from the hub),
sliding windows with training labels, n-best post-processing with the v2.0 no-answer decision, and the official
EM/F1 (the v2.0 evaluation script's normalisation and token F1, max over gold answers; HasAns/NoAns for v2.0).

Windows follow the official BERT/ELECTRA code: `[CLS] question [SEP] context window [SEP]`, the question cut to
`max_query_length` tokens, windows of at most `max_length - len(question) - 3` context tokens starting every
`min(window, doc_stride)` tokens. A training window whose answer is not wholly inside it (and every impossible
v2.0 question) is labelled start = end = 0 ([CLS]).
"""
from __future__ import annotations

import collections
import json
import re
import string
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import UserError

SQUAD = {"squad": ("v1.1", False), "squad_v2": ("v2.0", True)}
SQUAD_HUB = {"squad": "rajpurkar/squad", "squad_v2": "rajpurkar/squad_v2"}  # the hub's ids ("squad" redirects)
ALIASES = {"squad-v2": "squad_v2", "squad2": "squad_v2", "squad_v1": "squad", "squad-v1.1": "squad"}


@dataclass
class QAExample:
    id: str
    question: str
    context: str
    answers: list[tuple[str, int]]  # (text, answer_start); empty for an impossible question
    impossible: bool = False


@dataclass
class QATaskData:
    name: str
    v2: bool
    train: list[QAExample]
    dev: dict[str, list[QAExample]]
    epochs: int = 2
    skipped: dict = field(default_factory=dict)
    kind: str = "qa"
    label_names: None = None
    num_labels: int = 2

    @property
    def metrics(self) -> tuple[str, ...]:
        extra = ("HasAns_em", "HasAns_f1", "NoAns_em", "NoAns_f1") if self.v2 else ()
        return ("em", "f1", *extra)

    def score_text(self) -> str:
        """What the task's score is, in words (as `TaskData.score_text`)."""
        return "mean of exact match and F1 (SQuAD's official evaluation)"


def squad_name(task: str) -> str | None:
    t = task.lower()
    t = ALIASES.get(t, t)
    return t if t in SQUAD else None


# --- reading --------------------------------------------------------------------------------------------------
def read_squad_json(path: Path, train: bool) -> tuple[list[QAExample], int]:
    """The examples of one SQuAD file; training answers that do not occur at their answer_start are skipped."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"missing split: {path} not found")
    if path.stat().st_size == 0:
        raise UserError(f"{path} is empty")
    try:
        doc = json.loads(path.read_text(encoding="utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path} is not SQuAD JSON ({type(exc).__name__}: {str(exc)[:100]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise UserError(f"{path} is not SQuAD JSON (no top-level \"data\" list of articles)")
    out, bad = [], 0
    try:
        for article in doc["data"]:
            for para in article["paragraphs"]:
                ctx = para["context"]
                for qa in para["qas"]:
                    impossible = bool(qa.get("is_impossible", False))
                    answers = [] if impossible else [(a["text"], int(a["answer_start"])) for a in qa["answers"]]
                    if train and not impossible:
                        if not answers or ctx[answers[0][1]:answers[0][1] + len(answers[0][0])] != answers[0][0]:
                            bad += 1  # the official code also drops answers it cannot find
                            continue
                        answers = answers[:1]
                    out.append(QAExample(str(qa["id"]), qa["question"], ctx, answers, impossible))
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{path} is not SQuAD JSON (article/paragraph/qa entry without {exc})") from None
    if bad:
        print(f"warning: {path}: skipped {bad} question(s) whose answer is not at its answer_start", file=sys.stderr)
    if not out:
        raise UserError(f"{path} is empty (no questions)")
    return out, bad


def _split_paths(name: str, data, dev_data) -> tuple[Path, Path]:
    version = SQUAD[name][0]
    p = Path(data)
    if p.is_dir():
        for tr, dv in ((f"train-{version}.json", f"dev-{version}.json"), ("train.json", "dev.json")):
            if (p / tr).is_file() or (p / dv).is_file():
                return p / tr, Path(dev_data) if dev_data else p / dv
        raise UserError(f"missing split: no train-{version}.json / dev-{version}.json in {p}")
    if not p.is_file():
        raise UserError(f"--data {p}: no such file or directory (give train-{version}.json or its folder)")
    if dev_data:
        return p, Path(dev_data)
    if "train" not in p.name:
        raise UserError(f"--data {p}: give the training file (train-{version}.json) and --dev-data for the dev file")
    return p, p.with_name(p.name.replace("train", "dev", 1))


def load_squad(task: str, data=None, dev_data=None) -> QATaskData:
    name = squad_name(task)
    if data is None:
        return load_squad_hub(name)
    train_path, dev_path = _split_paths(name, data, dev_data)
    train, bad = read_squad_json(train_path, train=True)
    dev, _ = read_squad_json(dev_path, train=False)
    return QATaskData(name, SQUAD[name][1], train, {"dev": dev}, skipped={train_path.name: bad})


def load_squad_hub(name: str) -> QATaskData:
    try:
        import datasets

        ds = datasets.load_dataset(SQUAD_HUB[name])
    except Exception as exc:  # noqa: BLE001  (offline, hub down: one line either way)
        msg = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise UserError(f"cannot load {name} from the Hugging Face hub (offline? {msg}); download "
                        f"train-{SQUAD[name][0]}.json and dev-{SQUAD[name][0]}.json and pass --data DIR") from None

    def split(key: str, train: bool) -> list[QAExample]:
        out = []
        for r in ds[key]:
            answers = list(zip(r["answers"]["text"], r["answers"]["answer_start"]))
            out.append(QAExample(r["id"], r["question"], r["context"], answers[:1] if train else answers,
                                 impossible=not answers))
        return out

    return QATaskData(name, SQUAD[name][1], split("train", True), {"dev": split("validation", False)})


# --- features ---------------------------------------------------------------------------------------------------
def featurize(tok, examples: list[QAExample], max_length: int = 128, max_query_length: int = 64,
              doc_stride: int = 128, train: bool = True) -> list[dict]:
    """One row per window. Training rows carry start/end_positions; dev rows the example index, the context
    offset (first context token's position) and the character span of each context token."""
    if not getattr(tok, "is_fast", False):
        raise UserError("extractive QA needs a fast tokenizer (character offsets); this model's is not")
    q_ids = tok([e.question for e in examples], add_special_tokens=False, truncation=True,
                max_length=max_query_length)["input_ids"]
    contexts = list(dict.fromkeys(e.context for e in examples))  # a paragraph serves several questions
    where = {c: k for k, c in enumerate(contexts)}
    ctx = tok(contexts, add_special_tokens=False, return_offsets_mapping=True)
    rows = []
    for i, ex in enumerate(examples):
        c = where[ex.context]
        q, ids, offs = q_ids[i], ctx["input_ids"][c], ctx["offset_mapping"][c]
        window = max_length - len(q) - 3
        if window < 1:
            raise UserError(f"--max-length {max_length} leaves no room for the context after a question of "
                            f"{len(q)} tokens; raise --max-length or lower --max-query-length")
        tok_s = tok_e = None
        if train and not ex.impossible:
            text, s = ex.answers[0]
            e = s + len(text)
            inside = [k for k, (a, b) in enumerate(offs) if a < e and b > s]
            if inside:
                tok_s, tok_e = inside[0], inside[-1]
        start = 0
        while True:
            length = min(window, len(ids) - start)
            q_off = len(q) + 2
            row = {"input_ids": [tok.cls_token_id, *q, tok.sep_token_id, *ids[start:start + length],
                                 tok.sep_token_id],
                   "token_type_ids": [0] * q_off + [1] * (length + 1)}
            if train:
                if tok_s is not None and tok_s >= start and tok_e < start + length:
                    row["start_positions"], row["end_positions"] = tok_s - start + q_off, tok_e - start + q_off
                else:
                    row["start_positions"] = row["end_positions"] = 0  # [CLS]: no answer in this window
            else:
                row.update(example=i, context_offset=q_off, offsets=[tuple(o) for o in offs[start:start + length]])
            rows.append(row)
            if start + length >= len(ids):
                break
            start += min(length, doc_stride)
    return rows


# --- post-processing --------------------------------------------------------------------------------------------
def postprocess(examples: list[QAExample], features: list[dict], start_logits, end_logits, v2: bool,
                n_best: int = 20, max_answer_length: int = 30, null_threshold: float = 0.0) -> dict[str, str]:
    """{question id: predicted text}; over all windows of an example, the best span (top n_best starts × ends,
    end ≥ start, at most max_answer_length tokens, inside the context). v2.0: "" when the lowest null score
    (start[0] + end[0]) minus the best span's score exceeds null_threshold."""
    by_example = collections.defaultdict(list)
    for k, f in enumerate(features):
        by_example[f["example"]].append(k)
    preds = {}
    for i, ex in enumerate(examples):
        best, best_text, null = -np.inf, "", np.inf
        for k in by_example.get(i, []):
            f, s, e = features[k], np.asarray(start_logits[k]), np.asarray(end_logits[k])
            null = min(null, float(s[0] + e[0]))
            lo, hi = f["context_offset"], f["context_offset"] + len(f["offsets"])  # context positions [lo, hi)
            starts = [j for j in np.argsort(s)[::-1][:n_best] if lo <= j < hi]
            ends = [j for j in np.argsort(e)[::-1][:n_best] if lo <= j < hi]
            for a in starts:
                for b in ends:
                    if b < a or b - a + 1 > max_answer_length:
                        continue
                    score = float(s[a] + e[b])
                    if score > best:
                        best = score
                        best_text = ex.context[f["offsets"][a - lo][0]:f["offsets"][b - lo][1]]
        if v2 and null - best > null_threshold:
            best_text = ""
        preds[ex.id] = best_text
    return preds


# --- official metrics -------------------------------------------------------------------------------------------
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower-case, strip punctuation, drop the articles a/an/the, collapse whitespace (the official scripts)."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def exact(gold: str, pred: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(pred))


def f1(gold: str, pred: str) -> float:
    g, p = normalize_answer(gold).split(), normalize_answer(pred).split()
    if not g or not p:
        return float(g == p)  # no-answer: 1 if both are empty, else 0
    same = sum((collections.Counter(g) & collections.Counter(p)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def evaluate(examples: list[QAExample], preds: dict[str, str], v2: bool) -> dict[str, float]:
    """EM and F1 in [0, 100], each the max over an example's gold answers; v2.0 adds HasAns_*/NoAns_*."""
    ems, f1s, has = [], [], []
    for ex in examples:
        golds = [t for t, _ in ex.answers if normalize_answer(t)] or [""]
        p = preds.get(ex.id, "")
        ems.append(max(exact(g, p) for g in golds))
        f1s.append(max(f1(g, p) for g in golds))
        has.append(golds != [""])
    ems, f1s, has = np.array(ems, float), np.array(f1s, float), np.array(has, bool)
    out = {"em": 100 * ems.mean(), "f1": 100 * f1s.mean()}
    if v2:
        for name, m in (("HasAns", has), ("NoAns", ~has)):
            out[f"{name}_em"] = 100 * ems[m].mean() if m.any() else 0.0
            out[f"{name}_f1"] = 100 * f1s[m].mean() if m.any() else 0.0
    return {k: float(v) for k, v in out.items()}
