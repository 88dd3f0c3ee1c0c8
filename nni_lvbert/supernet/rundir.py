"""A supernet run directory: what training writes and what search/IOT load back.

    supernet.safetensors   weights of the mutated (one-shot) space; loading never unpickles anything
    space.yaml             the search space it was trained on
    model_config.json      ModelConfig
    tokenizer/             copy of the tokenizer (PreTrainedTokenizerFast directory)
    meta.json              run metadata: data, seed, steps, validation history, timings
    checkpoints/last.ckpt  Lightning checkpoint for --resume
    logs/                  CSV + TensorBoard logs
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import yaml

from ..config import ModelConfig, SpaceSpec
from ..errors import UserError

WEIGHTS = "supernet.safetensors"
REQUIRED = (WEIGHTS, "space.yaml", "model_config.json", "meta.json")


def write_json_atomic(path: Path, data) -> None:
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def check_output_dir(out: Path, resume: bool, overwrite: bool, resume_marker: str, what: str = "run directory") -> bool:
    """Refuse a non-empty directory unless resuming (needs `resume_marker` inside) or overwriting.
    Returns True when the directory holds something `--overwrite` is to replace."""
    if resume and overwrite:
        raise UserError("--resume and --overwrite exclude each other")
    if out.exists() and not out.is_dir():
        raise UserError(f"{what} {out} is a file")
    non_empty = out.is_dir() and any(out.iterdir())
    if resume:
        if not (out / resume_marker).is_file():
            raise UserError(f"nothing to resume in {out}: no {resume_marker}")
        return False
    if non_empty and not overwrite:
        raise UserError(f"{what} {out} is not empty; pass --resume to continue it or --overwrite to replace it")
    return non_empty


def prepare_run_dir(run_dir: Path, resume: bool, overwrite: bool) -> None:
    """Check the run directory (see check_output_dir), empty it on --overwrite, create it."""
    if check_output_dir(run_dir, resume, overwrite, "checkpoints/last.ckpt"):
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)


def require_files(run_dir: Path, required, what: str) -> None:
    """One clear line when `run_dir` is missing or lacks a file a finished run has."""
    if not run_dir.is_dir():
        raise UserError(f"{what} directory not found: {run_dir}")
    missing = [f for f in required if not (run_dir / f).is_file()]
    if missing:
        raise UserError(f"{run_dir} is not a finished {what} run (missing {', '.join(missing)})")


def check_data_tokenizer(run_dir: str | Path, data_path: str | Path) -> None:
    """One clear line when prepared data was tokenized differently from the run (other tokens or other ids).

    A vocabulary of the same size with other ids would not fail anywhere: it would silently score (or train) every
    masked token against the wrong label."""
    ours, theirs = Path(run_dir) / "tokenizer" / "tokenizer.json", Path(data_path) / "tokenizer" / "tokenizer.json"
    if not ours.is_file() or not theirs.is_file():
        return

    def essentials(path: Path) -> tuple:
        t = json.loads(path.read_text(encoding="utf-8"))
        return t.get("model"), t.get("normalizer"), t.get("pre_tokenizer")

    if essentials(ours) != essentials(theirs):
        raise UserError(f"prepared data {data_path} was tokenized with another tokenizer than {run_dir} (different "
                        f"tokens or token ids); prepare it with --tokenizer {Path(run_dir) / 'tokenizer'} and pass "
                        "--data")


def save_static(run_dir: Path, spec: SpaceSpec, cfg: ModelConfig, tokenizer_dir: str | Path) -> None:
    write_text_atomic(run_dir / "space.yaml", yaml.safe_dump(spec.to_dict(), sort_keys=False))
    write_json_atomic(run_dir / "model_config.json", cfg.to_dict())
    dst = run_dir / "tokenizer"
    if Path(tokenizer_dir).resolve() != dst.resolve():
        tmp = run_dir / ".tokenizer.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(tokenizer_dir, tmp)
        shutil.rmtree(dst, ignore_errors=True)
        os.replace(tmp, dst)


def save_weights(run_dir: Path, model) -> None:
    from safetensors.torch import save_model

    tmp = run_dir / f".{WEIGHTS}.tmp"
    save_model(model, str(tmp))  # handles tensors shared across slots (sharing='type')
    os.replace(tmp, run_dir / WEIGHTS)


def read_run_dir(run_dir: str | Path) -> tuple[SpaceSpec, ModelConfig, dict]:
    """(spec, cfg, meta) of a finished supernet run, without loading weights or importing NNI."""
    run_dir = Path(run_dir)
    require_files(run_dir, REQUIRED, "supernet")
    spec = SpaceSpec(**yaml.safe_load((run_dir / "space.yaml").read_text()))
    cfg = ModelConfig.from_dict(json.loads((run_dir / "model_config.json").read_text()))
    return spec, cfg, json.loads((run_dir / "meta.json").read_text())


def load_supernet(run_dir: str | Path):
    """(mutated space with trained weights in eval mode, spec, cfg, meta). Uses safetensors only."""
    from safetensors.torch import load_model

    from ..space import LVBertSpace
    from .strategy import SeededRandomOneShot

    run_dir = Path(run_dir)
    spec, cfg, meta = read_run_dir(run_dir)
    space = LVBertSpace(spec, cfg)
    SeededRandomOneShot().mutate_model(space)
    missing_keys, unexpected = load_model(space, str(run_dir / WEIGHTS), strict=False)
    if missing_keys or unexpected:
        raise UserError(f"{run_dir / WEIGHTS} does not match its space.yaml/model_config.json "
                        f"({len(missing_keys)} missing, {len(unexpected)} unexpected tensors)")
    return space.eval(), spec, cfg, meta
