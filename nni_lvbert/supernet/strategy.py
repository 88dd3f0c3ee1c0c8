"""RandomOneShot whose sampled path is a function of (seed, global step).

NNI's RandomOneShot draws paths from an unseeded RandomState: runs are not reproducible, a resumed run
continues with different paths, and DDP ranks train different paths in the same step (each rank's gradient
then belongs to another architecture). Here every rank derives the same path from (seed, step), so a resumed
run replays exactly the path sequence of an uninterrupted one. The code is an NNI 3.0 workaround and lives in
`nni_lvbert.nni_compat` (with what to check before dropping it).
"""
from __future__ import annotations

from ..nni_compat import VAL_STREAM, SeededRandomOneShot, SeededSamplingModule, sample_path  # noqa: F401
