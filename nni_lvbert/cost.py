"""What a run cost: core-minutes of a training (from its meta.json) and of this process's scoring work."""
from __future__ import annotations


def core_minutes(meta: dict) -> float:
    """A training run's cost from its meta.json (`common_meta`): seconds x CPU threads (x ranks) / 60; on an
    accelerator, device-minutes x ranks."""
    scale = meta.get("world_size") or 1
    if meta.get("device_type", "cpu") == "cpu":
        scale *= meta.get("cpu_threads") or 1
    return meta["train_seconds"] * scale / 60


def scoring_minutes(seconds: float) -> float:
    """Core-minutes of `seconds` of this process's work (x its torch threads)."""
    import torch

    return seconds * torch.get_num_threads() / 60
