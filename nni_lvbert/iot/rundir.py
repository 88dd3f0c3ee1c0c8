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

from ..arch import parse_arch, to_compact, to_dict
from ..config import SpaceSpec
from ..errors import UserError
from ..rundir import RunDir
from ..supernet.rundir import WEIGHTS

PREDICTOR = "predictor.safetensors"
ORDERS = "orders.json"
REQUIRED = (WEIGHTS, PREDICTOR, ORDERS, "space.yaml", "model_config.json", "meta.json")


def save_orders(run: RunDir, orders: list[list[str]], source: dict) -> None:
    run.write_json(ORDERS, {"orders": [to_compact(o) for o in orders], "dicts": [to_dict(o) for o in orders],
                            "source": source})


def read_orders(run: RunDir, spec: SpaceSpec) -> tuple[list[list[str]], dict]:
    """(orders, where they came from) of an IOT run directory."""
    data = run.read_json(ORDERS)
    try:
        return [parse_arch(o, spec) for o in data["orders"]], data.get("source", {})
    except (KeyError, TypeError) as exc:
        raise UserError(f"{run / ORDERS} is unreadable ({type(exc).__name__}); the run directory is damaged") from None


def load_iot(path):
    """IOTModel (eval mode) from a finished `lvbert iot train` directory; safetensors only, nothing unpickled."""
    from ..supernet.rundir import load_supernet
    from .routing import IOTModel, OrderPredictor

    run = RunDir(path, "IOT")
    run.require(REQUIRED)
    sn = load_supernet(path)
    orders, _ = read_orders(run, sn.spec)
    predictor = OrderPredictor(sn.cfg.embedding_size, len(orders))
    run.load_weights(predictor, PREDICTOR, f"{ORDERS} ({len(orders)} orders, d={sn.cfg.embedding_size})")
    return IOTModel(sn.space, predictor, orders, sn.spec, sn.cfg, sn.meta).eval()
