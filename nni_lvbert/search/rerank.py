"""Two-stage search (`lvbert search run --rerank K --rerank-steps N`): the supernet proposes, short stand-alone
training decides.

Stage 1 is the search itself (inherited-weight scores). Stage 2 takes the K best distinct orders of its history,
pre-trains each stand-alone for N MLM steps (the model store under OUT/rerank/, one `lvbert pretrain` run
directory each: resumable, kill -9 included), scores each on the whole validation split with every token masked
once (`standalone.scoring.Validation`, which keeps each model's metrics in its directory, so a resumed search neither
retrains nor rescores) and picks the best. rerank.json records both stages' scores and costs.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from ..errors import UserError

RERANK = "rerank.json"
STORE = "rerank"


def top_distinct(records: list[dict], k: int) -> list[dict]:
    """The k best-scored distinct orders of a search history (ties: the first evaluated first)."""
    best: dict[str, tuple[int, dict]] = {}
    for i, r in enumerate(records):
        if r["arch"] not in best or r["score"] > best[r["arch"]][1]["score"]:
            best[r["arch"]] = (i, r)
    return [r for _, r in sorted(best.values(), key=lambda e: (-e[1]["score"], e[0]))][:k]


def check(k: int, steps: int) -> None:
    if k < 0:
        raise UserError(f"--rerank must be 0 (off) or at least 1, got {k}")
    if k and steps < 1:
        raise UserError(f"--rerank-steps must be at least 1, got {steps}")


def budget_for(size: str, steps: int):
    """N steps at the stand-alone pre-training preset of `size` (lr, batch; warm-up at most a tenth of N)."""
    from ..pretrain.train import PretrainOptions
    from ..standalone.store import Budget

    preset = PretrainOptions(size=size, objective="mlm")
    return Budget(steps=steps, lr=preset.resolved("lr"), warmup_steps=preset.resolved("warmup_steps"),
                  batch_size=preset.resolved("batch_size"), dropout=0.0).shortened(steps)


def rerank(records: list[dict], k: int, steps: int, scorer, out: Path, seed: int, progress: bool, log) -> dict:
    """Stage 2 over the history `records`; returns rerank.json's content (its `pick` is the chosen order)."""
    from ..atomic import write_json
    from ..cost import core_minutes
    from ..rundir import RunDir
    from ..standalone.scoring import ALL_TOKENS, Validation
    from ..standalone.store import preset_size, standalone_spec, train_all

    size = preset_size(scorer)
    budget = budget_for(size, steps)
    data = scorer.val_stats["data"]
    top = top_distinct(records, k)
    specs = [(f"re-rank {i + 1}/{len(top)}: {r['arch']} ({steps} stand-alone steps)",
              standalone_spec(r["arch"], seed, size=size, cfg=scorer.cfg.to_dict(), budget=budget, data=data,
                              data_seed=0)) for i, r in enumerate(top)]
    log(f"re-ranking the {len(top)} best distinct orders by {steps} steps of stand-alone pre-training")
    paths = train_all(specs, out / STORE, progress)
    validation = Validation.load(data, scorer.cfg, ALL_TOKENS, masking="full", data_seed=0)
    metrics = validation.metrics_all(paths, "re-ranked ")
    candidates = [{"arch": r["arch"], "inherited": r["score"], **m, "run": run.name,
                   "core_minutes": core_minutes(RunDir(run, "pretrain").meta) + validation.core_minutes([run])}
                  for r, m, run in zip(top, metrics, paths)]
    pick = max(candidates, key=lambda c: (c["mlm_acc"], c["inherited"]))
    result = {"k": k, "steps": steps, "budget": dataclasses.asdict(budget), "seed": seed,
              "metric": "mlm_acc after stand-alone pre-training (whole validation split, every token masked once)",
              "candidates": candidates, "pick": pick["arch"], "pick_inherited_rank": candidates.index(pick) + 1,
              "core_minutes": sum(c["core_minutes"] for c in candidates)}
    write_json(out / RERANK, result)
    return result
