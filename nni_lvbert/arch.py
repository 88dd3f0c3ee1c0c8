"""Architectures: one layer type per slot, as one immutable value, `Arch`.

`Arch.parse(value, space)` (= `parse_arch`) reads every accepted spelling and checks it against the space:
- NNI's dict form: {"layer00": "dc", "layer01": "sa", ...}
- compact letters: "ccsf..." (c=dc, s=sa, f=ff, g=glu), x-transformers style
- LV-BERT Table 7 digits: "0012..." (0=dc, 1=sa, 2=ff)
- a named reference, in any case: bert, dynamicconv, sandwich (k=6; sandwichK for another k), lvbert-small
- a JSON file holding the dict form, or a best_arch.json with an "arch" key (a value that looks like a path, with a
  separator or a file suffix, is read as one: "arch file not found" rather than "unknown layer letter")
- a list or tuple of layer types, or an `Arch`

An `Arch` is what the code passes around (search, scoring, history, IOT orders); the spellings above exist only at
the edges: `.compact` and `.dict` are the forms written to disk (history.jsonl, best_arch.json, orders.json) and
`.dict` is the form NNI hands out and freezes.
"""
from __future__ import annotations

import difflib
import functools
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .config import LAYER_TYPES, LETTER_OF, TYPE_OF_LETTER, SpaceSpec
from .errors import UserError

DIGIT_TYPES = {"0": "dc", "1": "sa", "2": "ff"}  # LV-BERT Table 7 / official code `custom_layer_list`

# LV-BERT-small as searched by the paper (official repo pretrain.sh `custom_layer_list`, = Table 7).
LVBERT_SMALL = "001221022100120210201121"


def slot_label(i: int) -> str:
    return f"layer{i:02d}"


def sandwich(slots: int, k: int) -> str:
    """Press et al. 2020 sandwich transformer s^k (sf)^(n-k) f^k over `slots` sublayers (n = slots/2)."""
    n = slots // 2
    return "s" * k + "sf" * (n - k) + "f" * k


def named_arch(name: str, slots: int) -> str | None:
    """Compact string of a named reference architecture (any case: BERT, Sandwich4), or None if `name` is not one."""
    name = name.strip().lower()
    if slots % 2 == 0:
        if name == "bert":
            return "sf" * (slots // 2)
        if name == "dynamicconv":
            return "cf" * (slots // 2)
    if name.startswith("sandwich") and slots % 2 == 0:
        k = name[len("sandwich"):] or str(SANDWICH_K)
        if k.isdigit() and 0 < int(k) <= slots // 2:
            return sandwich(slots, int(k))
    if name == "lvbert-small" and slots == 24:
        return "".join(LETTER_OF[DIGIT_TYPES[d]] for d in LVBERT_SMALL)
    return None


# Default sandwich coefficient: the k of Press et al.'s headline sandwich_6. LV-BERT's Table 7 row could not be
# checked offline; `sandwichK` (e.g. sandwich4) picks another k.
SANDWICH_K = 6
NAMED_ARCHS = ("bert", "dynamicconv", "sandwich", "lvbert-small")
NAMED_HELP = "bert, dynamicconv, sandwich, sandwichK, lvbert-small"  # as the error messages list them
LETTERS_HELP = "c=dc s=sa f=ff g=glu (or digits 0=dc 1=sa 2=ff)"
_FILE_SUFFIX = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,5}$")  # .json, .jsn, .yaml...: no arch spelling has one


def is_named(text: str) -> bool:
    text = text.strip().lower()
    return text in NAMED_ARCHS or (text.startswith("sandwich") and text[len("sandwich"):].isdigit())


def _is_letters(text: str) -> bool:
    """Whether `text` is a compact letter or digit spelling (lowercase words like "csfg" are arches, not names)."""
    return bool(text) and (all(ch in DIGIT_TYPES for ch in text) or all(ch in TYPE_OF_LETTER for ch in text))


def _arch_file(text: str) -> Path | None:
    """The JSON file `text` names, or None when it does not look like a path (no separator, no file suffix, not an
    existing file or directory); one line when it looks like one but is not a file."""
    if not text:
        return None
    path = Path(os.path.expanduser(text))
    seps = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    try:
        is_file, is_dir = path.is_file(), path.is_dir()
    except OSError:  # a name too long for the file system: not a file
        is_file = is_dir = False
    if is_file:
        return path
    looks_like_path = any(sep in text for sep in seps) or _FILE_SUFFIX.search(text)
    if not (looks_like_path or (is_dir and not _is_letters(text))):
        return None
    if is_dir:
        inside = path / "best_arch.json"
        hint = f"pass {inside}" if inside.is_file() else "give the JSON file in it (best_arch.json, ...)"
        raise UserError(f"arch file {path} is a directory; {hint}")
    near = []
    if path.parent.is_dir():
        try:
            near = difflib.get_close_matches(path.name, [e.name for e in path.parent.iterdir() if e.is_file()], n=1)
        except OSError:
            pass
    raise UserError(f"arch file not found: {path}" + (f" (did you mean {path.parent / near[0]}?)" if near else ""))


def _unknown_word(text: str) -> UserError:
    """Neither a named arch nor valid letters: the names (with a did-you-mean) beside the letters."""
    lower = text.lower()
    digits = re.search(r"\d+$", lower)
    if digits and difflib.get_close_matches(lower[:digits.start()], ["sandwich"], n=1):
        near = ["sandwich" + digits.group()]  # sandwhich4 -> sandwich4
    else:
        near = difflib.get_close_matches(lower, NAMED_ARCHS, n=2)
    if near:
        return UserError(f"unknown arch {text!r} (did you mean {' or '.join(near)}?); named archs (any case): "
                         f"{NAMED_HELP}; or layer letters {LETTERS_HELP}")
    table = DIGIT_TYPES if text and text[0] in DIGIT_TYPES else TYPE_OF_LETTER
    bad = sorted({ch for ch in text if ch not in table})
    return UserError(f"unknown layer letter(s) {', '.join(repr(b) for b in bad)} in arch {text!r}; "
                     f"use {LETTERS_HELP}, or a named arch (any case): {NAMED_HELP}")


def _from_letters(s: str) -> list[str]:
    table = DIGIT_TYPES if s and all(ch in DIGIT_TYPES for ch in s) else TYPE_OF_LETTER
    bad = sorted({ch for ch in s if ch not in table})
    if bad:
        raise UserError(
            f"unknown layer letter(s) {', '.join(repr(b) for b in bad)} in arch {s!r}; "
            "use c=dc s=sa f=ff g=glu (or digits 0=dc 1=sa 2=ff)"
        )
    return [table[ch] for ch in s]


def _from_dict(d: dict, slots: int) -> list[str]:
    if "arch" in d and isinstance(d["arch"], dict):  # best_arch.json
        d = d["arch"]
    expected = [slot_label(i) for i in range(slots)]
    missing = [k for k in expected if k not in d]
    extra = sorted(k for k in d if k not in expected)
    if missing or extra:
        raise UserError(
            f"arch dict must have exactly the keys {expected[0]}..{expected[-1]} ({slots} slots); "
            + (f"missing {', '.join(missing[:3])}" if missing else f"unexpected {', '.join(extra[:3])}")
        )
    types = [d[k] for k in expected]
    _check_known(types)
    return types


def _check_known(types) -> None:
    bad = sorted({str(t) for t in types if t not in LAYER_TYPES})
    if bad:
        raise UserError(f"unknown layer type(s) {', '.join(bad)}; choose from {', '.join(LAYER_TYPES)}")


def _read(value, slots: int) -> list[str]:
    """Layer types of any accepted spelling (`slots` names the dict keys and picks named references)."""
    if isinstance(value, (Arch, list, tuple)):
        types = list(value)
        _check_known(types)
        return types
    if isinstance(value, dict):
        return _from_dict(value, slots)
    if not isinstance(value, str):
        raise UserError(f"cannot read an architecture from {type(value).__name__}")
    text = value.strip()
    named = named_arch(text, slots)
    if named is not None:
        return _from_letters(named)
    if is_named(text):
        raise UserError(f"named arch {text!r} is not defined for {slots} slots")
    if text.startswith("{"):
        return _from_dict(_loads(text, "arch"), slots)
    path = _arch_file(text)
    if path is not None:
        return _from_dict(_loads(path.read_text(), str(path)), slots)
    if not _is_letters(text):
        raise _unknown_word(text)
    return _from_letters(text)


@functools.total_ordering
@dataclass(frozen=True, eq=False)
class Arch(Sequence):
    """One architecture: a layer type per slot, immutable and hashable (a dict key, a set member, sortable).

    It is a read-only sequence of layer types, and it equals a list or tuple of the same types (and hashes as that
    tuple), so it stands wherever such a list stood. A slice is an Arch of the first slots (the prefix cache's
    key). `Arch(types)` takes the types as they are; `Arch.parse` reads any spelling and checks it against a space.
    """

    types: tuple[str, ...]

    def __post_init__(self):
        if isinstance(self.types, str):  # Arch("ccsf") would be four one-letter "types"
            raise TypeError(f"Arch() takes layer types, not the spelling {self.types!r}: use Arch.parse")
        object.__setattr__(self, "types", tuple(self.types))

    @classmethod
    def parse(cls, value, space: SpaceSpec | None = None) -> Arch:
        """Any accepted spelling (module docstring) checked against the space's slots and candidate types; an Arch
        that passes is returned as it is. Without a space: any layer types, as many slots as the spelling has (24,
        the paper's, for named references)."""
        if space is None:
            space = SpaceSpec(name="any", slots=infer_slots(value))
        types = _read(value, space.slots)
        if len(types) != space.slots:
            raise UserError(f"arch has {len(types)} slots but space {space.name!r} has {space.slots}")
        outside = sorted({t for t in types if t not in space.candidates}, key=LAYER_TYPES.index)
        if outside:
            raise UserError(f"layer type(s) {', '.join(outside)} not in space {space.name!r} "
                            f"(candidates: {', '.join(space.candidates)})")
        return value if isinstance(value, cls) else cls(types)

    @classmethod
    def from_dict(cls, sample) -> Arch:
        """NNI's dict form, as NNI hands out samples (labels layer00.., known types); no space to check against."""
        sample = dict(sample)
        return cls(_from_dict(sample, infer_slots(sample)))

    # -- a read-only sequence of layer types
    def __len__(self) -> int:
        return len(self.types)

    def __iter__(self):
        return iter(self.types)

    def __getitem__(self, index):
        return type(self)(self.types[index]) if isinstance(index, slice) else self.types[index]

    def __eq__(self, other) -> bool:
        if isinstance(other, Arch):
            return self.types == other.types
        if isinstance(other, (tuple, list)):
            return self.types == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.types)

    def __lt__(self, other) -> bool:  # lexicographic by types: neighbours in sorted order share prefixes
        if isinstance(other, Arch):
            return self.types < other.types
        return NotImplemented

    # -- the spellings written to disk and handed to NNI
    @property
    def letters(self) -> tuple[str, ...]:
        """One letter per slot (c=dc s=sa f=ff g=glu)."""
        return tuple(LETTER_OF[t] for t in self.types)

    @property
    def compact(self) -> str:
        """Letters as one string ("ccsf..."): the spelling history.jsonl, best_arch.json and orders.json hold."""
        return "".join(self.letters)

    def __str__(self) -> str:
        return self.compact

    def __repr__(self) -> str:
        try:
            return f"Arch({self.compact!r})"
        except KeyError:  # values that are not layer types (Algorithm 1 is generic)
            return f"Arch({self.types!r})"

    @property
    def dict(self) -> dict[str, str]:
        """NNI's dict form {"layer00": "dc", ...} (last in the class body: the name shadows the builtin there)."""
        return {slot_label(i): t for i, t in enumerate(self.types)}


def parse_arch(value, space: SpaceSpec | None = None) -> Arch:
    """`Arch.parse`: any accepted spelling, checked against the space (or as many slots as it spells)."""
    return Arch.parse(value, space)

def infer_slots(value) -> int:
    """Number of slots an arch spelling has (24, the paper's, for named references)."""
    if isinstance(value, (Arch, list, tuple)):
        return len(value)
    if isinstance(value, dict):
        return len(value["arch"]) if isinstance(value.get("arch"), dict) else len(value)
    text = str(value).strip()
    if is_named(text):
        return 24
    if text.startswith("{"):
        return infer_slots(_loads(text, "arch"))
    path = _arch_file(text)
    if path is not None:
        return infer_slots(_loads(path.read_text(), str(path)))
    return len(text)


def _loads(text: str, where: str) -> dict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(data, dict):
        raise UserError(f"{where} must hold a JSON object like {{\"layer00\": \"dc\", ...}}")
    return data


def to_dict(types) -> dict[str, str]:
    """NNI's dict form of an Arch or a list of layer types (`Arch.dict`)."""
    return Arch(types).dict


def to_compact(types) -> str:
    """Compact letters of an Arch or a list of layer types (`Arch.compact`)."""
    return Arch(types).compact
