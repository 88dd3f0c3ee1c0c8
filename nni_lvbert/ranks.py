"""DDP ranks: which process is rank 0, and the options it hands to the others.

Lightning's DDP launcher re-runs the command line for ranks > 0. Rank 0 publishes the options it settled on in the
environment its children inherit (`publish`, from `RunDir.open`), and every other rank takes them (`published`, in
`RunDir.begin`) instead of re-checking (or, worse, re-creating) the run directory rank 0 has just made. Plain
dictionaries (`options.to_dict`'s), so this module imports nothing of the package.
"""
from __future__ import annotations

import json
import os

RANK0_ENV = "LVBERT_RANK0_OPTIONS"


def launcher_is_rank_zero() -> bool:
    """True in the process that started the run (Lightning/torchrun children, the processes of other nodes and
    srun's other tasks have a non-zero rank env)."""
    return all(int(os.environ.get(v, "0") or 0) == 0 for v in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"))


def publish(kind: str, options: dict) -> None:
    """Rank 0: hand the settled options of stage `kind` to the ranks Lightning's launcher starts."""
    published = json.loads(os.environ.get(RANK0_ENV, "{}"))
    published[kind] = options
    os.environ[RANK0_ENV] = json.dumps(published)


def published(kind: str) -> dict | None:
    """Rank > 0: the options rank 0 published for stage `kind`; None for a rank started from outside (torchrun,
    SLURM, another node), which runs its own command line, rank 0's."""
    return json.loads(os.environ.get(RANK0_ENV, "{}")).get(kind) or None
