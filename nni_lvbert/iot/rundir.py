"""An IOT run directory: a loadable model (shared weights + predictor + orders) plus training records.

    supernet.safetensors   shared slot weights (same format as a supernet run: `load_supernet` reads it too)
    predictor.safetensors  order predictor (Linear d x M, no bias)
    orders.json            the M candidate orders (compact strings and NNI dicts) and where they came from
    space.yaml, model_config.json, tokenizer/
    meta.json              settings, validation history, final statistics (usage, per-order vs routed accuracy)
    eval.json              written by `lvbert iot eval`
    checkpoints/last.ckpt  Lightning checkpoint for --resume
    logs/                  CSV + TensorBoard logs
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..arch import parse_arch, to_compact, to_dict
from ..config import SpaceSpec
from ..errors import UserError
from ..supernet.rundir import WEIGHTS, write_json_atomic

PREDICTOR = "predictor.safetensors"
ORDERS = "orders.json"
REQUIRED = (WEIGHTS, PREDICTOR, ORDERS, "space.yaml", "model_config.json", "meta.json")


def save_orders(run_dir: Path, orders: list[list[str]], source: dict) -> None:
    write_json_atomic(run_dir / ORDERS, {"orders": [to_compact(o) for o in orders],
                                         "dicts": [to_dict(o) for o in orders], "source": source})


def read_orders(run_dir: Path, spec: SpaceSpec) -> list[list[str]]:
    path = run_dir / ORDERS
    try:
        data = json.loads(path.read_text())
        return [parse_arch(o, spec) for o in data["orders"]]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise UserError(f"{path} is unreadable ({type(exc).__name__}); the run directory is damaged") from None


def save_predictor(run_dir: Path, predictor) -> None:
    from safetensors.torch import save_model

    tmp = run_dir / f".{PREDICTOR}.tmp"
    save_model(predictor, str(tmp))
    os.replace(tmp, run_dir / PREDICTOR)


def load_iot(run_dir: str | Path):
    """IOTModel (eval mode) from a finished `lvbert iot train` directory; safetensors only, nothing unpickled."""
    from safetensors.torch import load_model

    from ..supernet.rundir import load_supernet, require_files
    from .routing import IOTModel, OrderPredictor

    run_dir = Path(run_dir)
    require_files(run_dir, REQUIRED, "IOT")
    space, spec, cfg, meta = load_supernet(run_dir)
    orders = read_orders(run_dir, spec)
    predictor = OrderPredictor(cfg.embedding_size, len(orders))
    missing_keys, unexpected = load_model(predictor, str(run_dir / PREDICTOR), strict=False)
    if missing_keys or unexpected:
        raise UserError(f"{run_dir / PREDICTOR} does not match {ORDERS} ({len(orders)} orders, d={cfg.embedding_size})")
    return IOTModel(space, predictor, orders, spec, cfg, meta).eval()
