"""history.jsonl: the one reader and writer of a search's evaluated candidates (search, IOT order selection).

A record holds its architecture twice, as `arch` (compact letters) and `arch_dict` (NNI's dict form); in memory it
is one `Arch` (`record_arch`).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..arch import Arch
from ..config import SpaceSpec

HISTORY = "history.jsonl"


def record_arch(record: dict, spec: SpaceSpec) -> Arch | None:
    """The Arch of a record, checked against the space: `arch` in any `Arch.parse` spelling, else `arch_dict`;
    None when the record has neither. Raises UserError for an arch that is not one of the space."""
    value = record.get("arch", record.get("arch_dict"))
    return None if value is None else Arch.parse(value, spec)


def read_history(path: Path) -> list[dict]:
    """The records of a history.jsonl, up to a torn last line (a run killed mid-write); blank lines are skipped."""
    records = []
    for line in Path(path).read_text(encoding="utf-8", errors="replace").split("\n"):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            break  # torn tail: nothing after it was written
        if isinstance(rec, dict):
            records.append(rec)
    return records


class History:
    """history.jsonl opened for appending: one JSON object per line; a torn last line is dropped from the file."""

    def __init__(self, path: Path):
        self.path = path
        self.records: list[dict] = []
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            self.records = read_history(path)
            clean = "".join(json.dumps(r) + "\n" for r in self.records)
            if clean != text:
                path.write_text(clean)
        self._f = None

    def by_strategy(self, name: str) -> list[dict]:
        return [r for r in self.records if r["strategy"] == name]

    def append(self, record: dict) -> None:
        if self._f is None:
            self._f = self.path.open("a")
        self._f.write(json.dumps(record) + "\n")
        self._f.flush()
        self.records.append(record)

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
