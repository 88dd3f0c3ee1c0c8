"""Candidate orders for IOT: top-M of a search's history, explicit architectures, or block permutations.

Every order is an architecture of the search space (an `Arch`: one layer type per slot); all M orders share the
supernet's per-slot modules, so slot i with type t is the same module in every order choosing t there.
"""
from __future__ import annotations

import itertools
import math
from pathlib import Path

from .. import layout
from ..arch import Arch
from ..config import LAYER_TYPES, TYPE_OF_LETTER, SpaceSpec
from ..errors import UserError
from ..search.history import HISTORY, read_history, record_arch

DEFAULT_M = 4
DEFAULT_SEARCH_DIR = layout.SEARCH


def check_m(m: int) -> None:
    if m < 2:
        raise UserError(f"IOT needs at least 2 candidate orders, got M={m}")


def _distinct(orders: list[Arch], what: str) -> None:
    seen: dict[Arch, int] = {}
    for i, o in enumerate(orders):
        if o in seen:
            raise UserError(f"{what}: orders {seen[o] + 1} and {i + 1} are the same architecture ({o.compact})")
        seen[o] = i


def explicit_orders(values: list[str], spec: SpaceSpec) -> list[Arch]:
    """Arch strings / names / JSON files, each checked against the space."""
    orders = []
    for v in values:
        try:
            orders.append(Arch.parse(v, spec))
        except UserError as exc:
            raise UserError(f"order {v!r}: {exc}") from None
    check_m(len(orders))
    _distinct(orders, "--orders")
    return orders


def parse_block(text: str, spec: SpaceSpec) -> list[str]:
    """'sa,ff,dc' (layer types) or 'sfc' (letters) -> ['sa', 'ff', 'dc'] (a block, not an Arch: it has fewer slots)."""
    text = text.strip()
    if "," in text or text in LAYER_TYPES:
        types = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in types if t not in LAYER_TYPES]
        if bad:
            raise UserError(f"--block: unknown layer type(s) {', '.join(bad)}; choose from {', '.join(LAYER_TYPES)}")
    else:
        bad = sorted({ch for ch in text if ch not in TYPE_OF_LETTER})
        if bad:
            raise UserError(f"--block: unknown layer letter(s) {', '.join(repr(b) for b in bad)}; "
                            "use c=dc s=sa f=ff g=glu or a comma list like sa,ff,dc")
        types = [TYPE_OF_LETTER[ch] for ch in text]
    if not types:
        raise UserError("--block is empty")
    outside = [t for t in dict.fromkeys(types) if t not in spec.candidates]
    if outside:
        raise UserError(f"--block: layer type(s) {', '.join(outside)} not in space {spec.name!r} "
                        f"(candidates: {', '.join(spec.candidates)})")
    if len(types) > spec.slots:
        raise UserError(f"--block has {len(types)} layers but space {spec.name!r} has only {spec.slots} slots")
    return types


def block_orders(block: list[str], m: int, spec: SpaceSpec) -> list[Arch]:
    """IOT-style orders: the first M distinct permutations of `block` (itertools order, identity first), each
    repeated to fill the space's slots (truncated when the slots are not a multiple of the block)."""
    check_m(m)
    reps = math.ceil(spec.slots / len(block))
    orders, seen = [], set()
    for perm in itertools.permutations(block):
        order = Arch((perm * reps)[: spec.slots])
        if order not in seen:
            seen.add(order)
            orders.append(order)
            if len(orders) == m:
                return orders
    raise UserError(f"block {','.join(block)} has only {len(orders)} distinct orders over {spec.slots} slots; "
                    f"asked for M={m}")


def history_orders(search_dir: str | Path, m: int, spec: SpaceSpec) -> tuple[list[Arch], list[float]]:
    """Top-M distinct architectures by `score` from a search output directory (or a history.jsonl file).

    Tolerant reader (`history.record_arch`): `arch` may be any `Arch.parse` spelling, NNI's dict form included
    (`arch_dict` is used when `arch` is missing); records without a numeric score are skipped; an arch seen twice
    keeps its best.
    """
    check_m(m)
    p = Path(search_dir)
    path = p if p.is_file() else p / HISTORY
    if not p.exists():
        raise UserError(f"search directory not found: {p}")
    if not path.is_file():
        raise UserError(f"no {HISTORY} in {p}: run `lvbert search run` first, or pass --orders / --block")
    best: dict[Arch, tuple[float, int]] = {}  # arch -> (its best score, its first record)
    for i, rec in enumerate(read_history(path)):
        score = rec.get("score")
        if not isinstance(score, (int, float)) or isinstance(score, bool) or math.isnan(score):
            continue
        try:
            arch = record_arch(rec, spec)
        except UserError as exc:
            raise UserError(f"{path} record {i + 1}: {exc}") from None
        if arch is None:
            continue
        if arch not in best or score > best[arch][0]:
            best[arch] = (float(score), best.get(arch, (0, i))[1])
    ranked = sorted(best, key=lambda a: (-best[a][0], best[a][1]))[:m]
    if len(best) < m:
        raise UserError(f"{path} has {len(best)} distinct scored architecture(s); IOT asked for M={m}")
    return ranked, [best[a][0] for a in ranked]


def resolve_orders(spec: SpaceSpec, orders: list[str] | None = None, orders_from: str | None = None,
                   block: str | None = None, m: int | None = None) -> tuple[list[Arch], dict]:
    """Exactly one source (default: top-M of layout.SEARCH). Returns (orders, description of the source)."""
    given = [name for name, v in (("--orders", orders), ("--orders-from", orders_from), ("--block", block)) if v]
    if len(given) > 1:
        raise UserError(f"give one source of candidate orders, not {' and '.join(given)}")
    if orders:
        if m is not None and m != len(orders):
            raise UserError(f"--m {m} does not match the {len(orders)} orders given with --orders")
        out = explicit_orders(orders, spec)
        return out, {"source": "explicit"}
    m = DEFAULT_M if m is None else m
    check_m(m)
    if block:
        types = parse_block(block, spec)
        return block_orders(types, m, spec), {"source": "block", "block": types}
    search = orders_from or DEFAULT_SEARCH_DIR
    if not orders_from and not Path(search).exists():
        raise UserError(f"no candidate orders: {search} not found; pass --orders-from SEARCH_DIR, --orders ARCH... "
                        "or --block TYPES")
    out, scores = history_orders(search, m, spec)
    return out, {"source": "search", "search": str(search), "scores": scores}
