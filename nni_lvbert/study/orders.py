"""The orders a ranking study compares: a seeded set stratified by composition and placement, so that the ground
truth spans the space (attention-heavy, convolution-free, attention-free, mixed with attention early or late, ...)
instead of clustering where uniform draws land (about 6 of each type in 24 slots).

`stratified_orders(candidates, slots, n, seed)` deals n orders round-robin over `STRATA` (each stratum a rule for
the counts of the four layer types and for where attention sits relative to convolution), every order distinct.
The same (candidates, slots, n, seed) gives the same orders on every machine (numpy's PCG64 stream).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..arch import Arch
from ..errors import UserError

SA, DC, FF, GLU = "sa", "dc", "ff", "glu"


@dataclass(frozen=True)
class Stratum:
    """Counts as fractions of the slots: (low, high) for sa and dc; ff and glu share the rest at random.
    placement: "early" puts every sa before every dc, "late" after, "any" leaves the random permutation."""

    name: str
    sa: tuple[float, float]
    dc: tuple[float, float]
    placement: str = "any"
    uniform: bool = False  # every slot uniform over the candidates (the classic random pool); counts ignored


STRATA = (
    Stratum("attention-heavy, no convolution", sa=(0.5, 0.75), dc=(0, 0)),
    Stratum("mixed, attention early", sa=(0.17, 0.38), dc=(0.17, 0.38), placement="early"),
    Stratum("convolution-heavy, no attention", sa=(0, 0), dc=(0.5, 0.75)),
    Stratum("mixed, attention late", sa=(0.17, 0.38), dc=(0.17, 0.38), placement="late"),
    Stratum("attention-light, no convolution", sa=(0.12, 0.33), dc=(0, 0)),
    Stratum("mixed, interleaved", sa=(0.17, 0.38), dc=(0.17, 0.38)),
    Stratum("convolution-light, no attention", sa=(0, 0), dc=(0.12, 0.33)),
    Stratum("uniform random", sa=(0, 0), dc=(0, 0), uniform=True),
)


def stratified_orders(candidates, slots: int, n: int, seed: int) -> list[tuple[Arch, str]]:
    """n distinct (order, stratum name), dealt round-robin over the strata the candidates allow."""
    import numpy as np

    cands = tuple(candidates)
    strata = [s for s in STRATA if _allowed(s, cands)]
    if n < 1:
        raise UserError(f"--num-archs must be at least 1, got {n}")
    rng = np.random.default_rng(seed)
    seen: set[Arch] = set()
    out: list[tuple[Arch, str]] = []
    for i in range(n):
        stratum = strata[i % len(strata)]
        for _ in range(1000):  # redraw duplicates (a narrow stratum in a short order can repeat itself)
            arch = _draw(stratum, cands, slots, rng)
            if arch not in seen:
                break
        else:
            raise UserError(f"cannot draw {n} distinct orders of {slots} slots from {'/'.join(cands)}")
        seen.add(arch)
        out.append((arch, stratum.name))
    return out


def _allowed(s: Stratum, cands: tuple[str, ...]) -> bool:
    if s.uniform:
        return True
    needs = {t for t, (lo, hi) in ((SA, s.sa), (DC, s.dc)) if hi > 0}
    fill = [t for t in cands if t not in (SA, DC)]
    return needs <= set(cands) and bool(fill)


def _draw(s: Stratum, cands: tuple[str, ...], slots: int, rng) -> Arch:
    if s.uniform:
        return Arch(tuple(cands[int(i)] for i in rng.integers(0, len(cands), slots)))
    counts = {t: int(rng.integers(round(lo * slots), round(hi * slots) + 1)) for t, (lo, hi) in
              ((SA, s.sa), (DC, s.dc))}
    counts = {t: max(c, 1) if (s.sa if t == SA else s.dc)[1] > 0 else 0 for t, c in counts.items()}
    fill = [t for t in cands if t not in (SA, DC)]
    rest = slots - counts[SA] - counts[DC]
    types = [SA] * counts[SA] + [DC] * counts[DC] + [fill[int(i)] for i in rng.integers(0, len(fill), rest)]
    types = [types[int(i)] for i in rng.permutation(slots)]
    if s.placement in ("early", "late"):
        positions = [i for i, t in enumerate(types) if t in (SA, DC)]
        first, second = (SA, DC) if s.placement == "early" else (DC, SA)
        ordered = [first] * counts[first] + [second] * counts[second]
        for pos, t in zip(positions, ordered):
            types[pos] = t
    return Arch(tuple(types))


def composition(arch: Arch) -> dict[str, int]:
    """Counts of each layer type."""
    return {t: sum(1 for x in arch if x == t) for t in (SA, DC, FF, GLU)}


def is_mixed(arch: Arch) -> bool:
    """Holds both attention and convolution (the orders the issue asks tau among)."""
    c = composition(arch)
    return c[SA] > 0 and c[DC] > 0


# The graded set (`--order-set graded`): orders that differ in one count at a time, in steps the seeds can resolve,
# so that the question "does the ranker follow differences stand-alone training sees?" has an answer even where
# the stratified set's orders are indistinguishable: (attention, convolution, placement of the convolutions) at 24
# slots (other slot counts scale). Graded convolution at 6 attention layers, graded attention at 4 convolutions,
# and one convolution moved to the first or the last slot.
GRADED = (
    *((6, k, "even") for k in (0, 1, 2, 3, 4, 6, 8)),
    *((k, 4, "even") for k in (0, 2, 10)),
    (6, 1, "first"),
    (6, 1, "last"),
)


def graded_orders(candidates, slots: int) -> list[tuple[Arch, str]]:
    """The graded set as (order, role): attention spread evenly over the slots, convolution evenly over the slots
    left (or in the first / last slot), feed-forward and GLU alternating in the rest. Deterministic."""
    cands = tuple(candidates)
    fill = [t for t in (FF, GLU) if t in cands]
    if SA not in cands or DC not in cands or not fill:
        raise UserError(f"the graded order set needs sa, dc and ff or glu in the space, not {'/'.join(cands)}")
    out: dict[Arch, str] = {}
    for sa24, dc24, placement in GRADED:
        sa, dc = round(sa24 * slots / 24), max(round(dc24 * slots / 24), min(dc24, 1))
        role = f"attention {sa}, convolution {dc}" + (f" in the {placement} slot" if placement != "even" else "")
        types: list[str | None] = [None] * slots
        for i in _spread(sa, range(slots)):
            types[i] = SA
        free = [i for i, t in enumerate(types) if t is None]
        where = {"first": free[:dc], "last": free[len(free) - dc:]}.get(placement) or _spread(dc, free)
        for i in where:
            types[i] = DC
        rest = (i for i, t in enumerate(types) if t is None)
        for j, i in enumerate(rest):
            types[i] = fill[j % len(fill)]
        out.setdefault(Arch(tuple(types)), role)
    return list(out.items())


def _spread(k: int, positions) -> list[int]:
    """k of the positions, evenly spaced (centred in k equal parts)."""
    positions = list(positions)
    return [positions[int((j + 0.5) * len(positions) / k)] for j in range(k)] if k else []
