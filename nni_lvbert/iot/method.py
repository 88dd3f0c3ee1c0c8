"""IOT's own settings, one option group (`IOTMethod`) shared by `lvbert iot train`, `study iot` and
`study iot-finetune`: held as one value (`opts.method`), flat wherever a user or a file sees them (flags, --config
keys, options.json: `options.flat_group`). Defaults: the official IOT code (`defaults.py`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ..errors import UserError
from ..options import opt
from .defaults import C1, C2, CLAMP, TAU, TAU_DECAY, TAU_EVERY, TAU_MIN


@dataclass(frozen=True)
class IOTMethod:
    GROUP: ClassVar[str] = "IOT (defaults: official IOT code)"

    tau: float = opt(TAU, "Gumbel-softmax temperature (start)")
    tau_min: float = opt(TAU_MIN, "temperature floor")
    tau_decay: float = opt(TAU_DECAY, "r in tau = max(tau * exp(-r * step), tau_min), step floored to --tau-every "
                                      "(0: constant tau)")
    tau_every: int = opt(TAU_EVERY, "temperature update period")
    c1: float = opt(C1, "weight of the exploration loss L_D = KL(uniform || mean p) (0: without it)")
    c2: float = opt(C2, "weight of the exploitation loss L_S = -mean KL(uniform || p_x) (0: without it)")
    clamp: float = opt(CLAMP, "probability clamp before Gumbel")
    gumbel: bool = opt(True, "no Gumbel noise (deterministic weights)")

    def settings(self) -> dict:
        """{name: value} of the eight settings (IOTStrategy's and the fine-tuning loss's keywords, meta.json's
        "iot", the studies' reports)."""
        return dataclasses.asdict(self)

    def check(self, m: int) -> None:
        """One clear error for the first setting out of range with M orders."""
        checks = [
            (self.tau > 0, f"--tau must be positive, got {self.tau}"),
            (self.tau_min > 0, f"--tau-min must be positive, got {self.tau_min}"),
            (self.tau_decay >= 0, f"--tau-decay must be >= 0, got {self.tau_decay}"),
            (self.tau_every >= 1, f"--tau-every must be at least 1, got {self.tau_every}"),
            (self.c1 >= 0, f"--c1 must be >= 0, got {self.c1}"),
            (self.c2 >= 0, f"--c2 must be >= 0, got {self.c2}"),
            (0 <= self.clamp < 1.0 / m, f"--clamp must be in [0, 1/M) = [0, {1.0 / m:.3g}) for M={m}, got "
                                         f"{self.clamp}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise UserError(msg)
