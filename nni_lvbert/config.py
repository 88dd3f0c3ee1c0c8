"""Model configuration, model sizes and search-space files.

`search_spaces/sizes.yaml` holds the sizes (LV-BERT Table 5 + `tiny`); `search_spaces/<name>.yaml` holds a
space: number of slots, candidate layer types and the default size (paths: `nni_lvbert.resources`). Both are plain
YAML so users can add their own (`lvbert init-experiment DIR` copies the spaces out; `--space PATH` reads one).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .errors import UserError
from .resources import SIZES_FILE, SPACES_DIR, space_names  # shipped package data (search_spaces/)
from .shape import ModelShape

# Layer types and their one-letter codes (compact arch strings like "ccsf...").
LAYER_TYPES = ("dc", "sa", "ff", "glu")
LETTER_OF = {"dc": "c", "sa": "s", "ff": "f", "glu": "g"}
TYPE_OF_LETTER = {v: k for k, v in LETTER_OF.items()}
# GLU-variant activations (layers.feedforward.GLU_ACTIVATIONS implements them): GLU, Bilinear, ReGLU, GEGLU, SwiGLU
GLU_ACTIVATION_NAMES = ("sigmoid", "identity", "relu", "gelu", "gelu_tanh", "silu")


@dataclass(kw_only=True)
class ModelConfig(ModelShape):
    """The model's shape (`shape.ModelShape`: every field and default) with the project's checks."""

    def __post_init__(self):
        if self.sharing not in ("none", "type"):
            raise UserError(f"sharing must be 'none' or 'type', got {self.sharing!r}")
        if self.hidden_size % self.num_heads:
            raise UserError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if self.max_length > self.max_position:
            raise UserError(f"max_length {self.max_length} exceeds the position table ({self.max_position})")
        if not 0.0 <= self.dropout < 1.0:
            raise UserError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.conv_kernel < 1 or self.conv_kernel % 2 == 0:
            raise UserError(f"conv_kernel must be odd for 'same' padding, got {self.conv_kernel}")
        if self.glu_activation not in GLU_ACTIVATION_NAMES:
            raise UserError(f"unknown GLU activation {self.glu_activation!r}; choose one of "
                            f"{', '.join(GLU_ACTIVATION_NAMES)}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise UserError(f"unknown model config keys: {', '.join(unknown)}")
        return cls(**d)


def read_yaml(path: Path, what: str = "file") -> dict:
    """A YAML mapping, or one clear line (`{what} not found`, invalid YAML, not a mapping)."""
    if not path.is_file():
        raise UserError(f"{what} not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise UserError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} must hold a YAML mapping")
    return data


def size_names() -> list[str]:
    return list(read_yaml(SIZES_FILE))


def size_values(name: str) -> dict:
    """sizes.yaml's entry for a named size, or one clear line naming the sizes it defines (`lvbert` checks --size
    with it before a command imports anything heavy)."""
    sizes = read_yaml(SIZES_FILE)
    if name not in sizes:
        raise UserError(f"unknown size {name!r}; choose one of: {', '.join(sizes)}")
    return dict(sizes[name])


def load_size(name: str, **overrides) -> ModelConfig:
    """ModelConfig for a named size from sizes.yaml, with keyword overrides (None values ignored)."""
    values = size_values(name)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return ModelConfig.from_dict(values)


@dataclass
class SpaceSpec:
    """A declarative search space: `slots` slots, each picking one of `candidates`."""

    name: str
    slots: int = 24
    candidates: list[str] = field(default_factory=lambda: list(LAYER_TYPES))
    size: str = "small"
    path: str | None = None

    def __post_init__(self):
        if not isinstance(self.slots, int) or self.slots < 1:
            raise UserError(f"space {self.name!r}: slots must be a positive integer, got {self.slots!r}")
        bad = [c for c in self.candidates if c not in LAYER_TYPES]
        if bad or not self.candidates:
            raise UserError(
                f"space {self.name!r}: candidates must be a non-empty subset of {', '.join(LAYER_TYPES)}, got {self.candidates}"
            )
        if len(set(self.candidates)) != len(self.candidates):
            raise UserError(f"space {self.name!r}: duplicate candidates {self.candidates}")
        # keep a canonical order so choice indices are stable across files
        self.candidates = [t for t in LAYER_TYPES if t in self.candidates]

    def to_dict(self) -> dict:
        return {"name": self.name, "slots": self.slots, "candidates": list(self.candidates), "size": self.size}


SPACE_KEYS = {"name": "the space's name (default: the file's stem)",
              "slots": "the number of layer slots, a positive integer (default 24)",
              "candidates": f"the layer types every slot chooses from, a list drawn from {', '.join(LAYER_TYPES)} "
                            "(default: all)",
              "size": "the default size, a name in search_spaces/sizes.yaml (default small)",
              "description": "free text, ignored"}


def check_space_yaml(data: dict, path) -> None:
    """One clear line for the first mistake in a space YAML's mapping (keys as SPACE_KEYS describes them)."""
    unknown = sorted(set(data) - set(SPACE_KEYS))
    if unknown:
        raise UserError(f"{path}: unknown key(s) {', '.join(map(str, unknown))}; a space YAML takes "
                        f"{', '.join(SPACE_KEYS)}")
    if "name" in data and not isinstance(data["name"], str):
        raise UserError(f"{path}: name must be a string, got {data['name']!r}")
    slots = data.get("slots", 24)
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise UserError(f"{path}: slots must be a positive integer, got {slots!r}")
    cands = data.get("candidates", list(LAYER_TYPES))
    if not isinstance(cands, list) or not cands or not all(isinstance(c, str) for c in cands):
        raise UserError(f"{path}: candidates must be a non-empty list of layer types ({', '.join(LAYER_TYPES)}), "
                        f"e.g. [dc, sa, ff]; got {cands!r}")
    bad = [c for c in cands if c not in LAYER_TYPES]
    if bad:
        raise UserError(f"{path}: candidates must be layer types from {', '.join(LAYER_TYPES)}; unknown layer "
                        f"type(s) {', '.join(bad)}")
    if "size" in data and data["size"] not in size_names():
        raise UserError(f"{path}: size must be one of {', '.join(size_names())}, got {data['size']!r}")


def load_space(name_or_path: str | Path) -> SpaceSpec:
    """A space by name (search_spaces/<name>.yaml) or by path to a YAML file."""
    p = Path(name_or_path)
    if not p.suffix:
        candidate = SPACES_DIR / f"{name_or_path}.yaml"
        if not candidate.is_file():
            raise UserError(f"unknown search space {str(name_or_path)!r}; choose one of {', '.join(space_names())} "
                            "or give a YAML path")
        p = candidate
    data = read_yaml(p)
    check_space_yaml(data, p)
    data.pop("description", None)
    data.setdefault("name", p.stem)
    return SpaceSpec(**data, path=str(p))
