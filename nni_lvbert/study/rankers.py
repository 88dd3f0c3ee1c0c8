"""The rankers a ranking study compares: each scores every compared order (larger is better) and records what the
scores cost in core-minutes (training included). Each is an option of an ordinary command, not study-only code:

- `spos` (the study's `--supernet`) or `NAME=RUN` (any supernet run directory: `lvbert supernet train`, with
  `--sampling fair` for FairNAS): inherited-weight scores (`lvbert search score`); cost = the supernet's
  training plus the scoring;
- `short:N`: N steps of stand-alone MLM pre-training (`lvbert pretrain --max-steps N`) at the study's batch and lr,
  kept in the model store; cost = the trainings plus the scoring;
- `zc:NAME`: a zero-cost proxy of a freshly initialised model (`lvbert search score --proxy NAME`); cost = its
  computation;
- `rerank:K:N` (or `rerank:K:N:BASE`): two-stage search (`lvbert search run --rerank K --rerank-steps N`) over the
  study's orders: the K best of the supernet ranker BASE (default spos) re-ranked by N steps of stand-alone
  pre-training (the same models as `short:N`), above the other orders in BASE's order; its scores are minus the
  ranks in that ranking (-1 the best); cost = BASE's plus the K trainings and their scoring.

`--rank-by loss` ranks the trained rankers by (minus) validation MLM loss instead of accuracy.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ..cost import core_minutes, scoring_minutes
from ..errors import UserError


@dataclass(frozen=True)
class Ranker:
    name: str  # as the study reports it
    kind: str  # supernet | short | zc | rerank
    arg: str  # the supernet run directory, the steps, the proxy, or K:N:BASE

    @property
    def first_stage(self) -> str:
        """A two-stage ranker's BASE: the name of the supernet ranker whose K best it re-ranks."""
        return self.arg.split(":")[2]


def parse_rankers(items: list[str], supernet: str) -> list[Ranker]:
    """`spos`, `NAME=RUN`, `short:N`, `zc:PROXY`; one error line for anything else."""
    out: list[Ranker] = []
    for item in items:
        if item == "spos":
            out.append(Ranker("spos", "supernet", supernet))
        elif "=" in item:
            name, run = item.split("=", 1)
            if not name or not run:
                raise UserError(f"--rankers item {item!r}: give NAME=RUN (a supernet run directory)")
            out.append(Ranker(name, "supernet", run))
        elif item.startswith("short:"):
            steps = item.split(":", 1)[1]
            if not steps.isdigit() or int(steps) < 1:
                raise UserError(f"--rankers item {item!r}: short:N needs N >= 1 training steps")
            out.append(Ranker(item, "short", steps))
        elif item.startswith("zc:"):
            from ..search.proxies import check_proxy  # torch: only for a zero-cost ranker

            out.append(Ranker(item, "zc", check_proxy(item.split(":", 1)[1])))
        elif item.startswith("rerank:"):
            parts = item.split(":")[1:]
            if len(parts) not in (2, 3) or not all(p.isdigit() and int(p) >= 1 for p in parts[:2]):
                raise UserError(f"--rankers item {item!r}: give rerank:K:N or rerank:K:N:BASE (K >= 1 orders "
                                "re-ranked by N >= 1 stand-alone steps; BASE a supernet ranker, default spos)")
            out.append(Ranker(item, "rerank", ":".join([*parts[:2], parts[2] if len(parts) == 3 else "spos"])))
        else:
            raise UserError(f"unknown ranker {item!r}; use spos, NAME=RUN (a supernet run directory), short:N, "
                            "zc:grad-norm|snip|synflow or rerank:K:N[:BASE]")
    names = [r.name for r in out]
    if len(set(names)) != len(names):
        raise UserError(f"--rankers names repeat: {', '.join(names)}")
    supernets = [r.name for r in out if r.kind == "supernet"]
    for r in out:
        if r.kind == "rerank" and r.first_stage not in supernets:
            raise UserError(f"ranker {r.name}: its first stage {r.first_stage!r} is not a supernet ranker of "
                            f"--rankers ({', '.join(supernets) or 'none'})")
    for r in out:
        if r.kind == "supernet" and not Path(r.arg).is_dir():
            raise UserError(f"ranker {r.name}: supernet directory not found: {r.arg}")
        if r.kind == "supernet" and not ((Path(r.arg) / "meta.json").is_file() or
                                         (Path(r.arg) / "fewshot.json").is_file()):
            raise UserError(f"ranker {r.name}: {r.arg} is not a finished supernet run or few-shot directory")
    return out


def supernet_scores(ranker: Ranker, archs, masking: str, data: str, data_seed: int, val_tokens: int,
                    rank_by: str) -> dict:
    """Inherited-weight scores from a supernet run or a few-shot directory (each order routed to its owner)."""
    from ..search.scorer import open_scorer

    start = time.perf_counter()
    scorer = open_scorer(ranker.arg, val_tokens=val_tokens, data=data, prefix_cache=False, device="cpu",
                         masking=masking, data_seed=data_seed)
    metrics = {a.compact: scorer.metrics(a) for a in archs}
    fewshot = scorer.meta.get("fewshot")
    train = fewshot["core_minutes"] if fewshot else core_minutes(scorer.meta)
    return {"scores": {a: rank_score(m, rank_by) for a, m in metrics.items()}, "metrics": metrics,
            "sampling": "few-shot " + fewshot["split"] if fewshot else scorer.meta.get("sampling", "spos"),
            "steps": scorer.meta.get("steps"), "train_core_minutes": train,
            "core_minutes": train + scoring_minutes(time.perf_counter() - start)}


def short_scores(ranker: Ranker, archs, spec_of, store: Path, validation, rank_by: str, progress: bool) -> dict:
    """`spec_of(arch, budget_steps)` gives the arch's Standalone spec at N steps; `validation` a `store.Validation`
    (each model scored once per validation set)."""
    from ..rundir import RunDir
    from ..standalone.store import train_all

    specs = [(f"{ranker.name}: {a.compact}", spec_of(a, int(ranker.arg))) for a in archs]
    paths = train_all(specs, store, progress)
    metrics = dict(zip((a.compact for a in archs), validation.metrics_all(paths, f"{ranker.name} ")))
    train = sum(core_minutes(RunDir(p, "pretrain").meta) for p in paths)
    return {"scores": {a: rank_score(m, rank_by) for a, m in metrics.items()}, "metrics": metrics,
            "steps": int(ranker.arg), "runs": [str(p) for p in paths], "train_core_minutes": train,
            "core_minutes": train + validation.core_minutes(paths)}


def best_first(scores: dict[str, float]) -> list[str]:
    """The orders of `scores`, best first (sorted() is stable: ties keep their order)."""
    return sorted(scores, key=lambda a: -scores[a])


def two_stage(first: dict[str, float], second: dict[str, float], k: int) -> list[str]:
    """The two-stage ranking, best first: the k best orders of `first` (ties: the earlier order) sorted by `second`
    (ties: by `first`), then the other orders in `first`'s order. `second` needs only those k orders."""
    by_first = best_first(first)
    top = by_first[:k]
    return sorted(top, key=lambda a: (-second[a], top.index(a))) + by_first[k:]


def rerank_scores(ranker: Ranker, archs, first: dict, spec_of, store: Path, validation, rank_by: str,
                  progress: bool) -> dict:
    """The K best orders of the first stage's `first` result, each pre-trained stand-alone for N steps (`spec_of`
    as for short:N, so the same store models) and scored; scores are minus the ranks of `two_stage` (-1 best)."""
    k, steps = (int(v) for v in ranker.arg.split(":")[:2])
    by_arch = {a.compact: a for a in archs}
    top = best_first(first["scores"])[:k]
    second = short_scores(Ranker(f"{ranker.name} (stage 2)", "short", str(steps)), [by_arch[a] for a in top],
                          spec_of, store, validation, rank_by, progress)
    ranking = two_stage(first["scores"], second["scores"], k)
    return {"scores": {a: -float(rank) for rank, a in enumerate(ranking, 1)}, "metrics": second["metrics"],
            "first_stage": ranker.first_stage, "k": k, "steps": steps, "stage2_scores": second["scores"],
            "runs": second["runs"],
            "train_core_minutes": first.get("train_core_minutes", 0.0) + second["train_core_minutes"],
            "core_minutes": first["core_minutes"] + second["core_minutes"]}


def zc_scores(ranker: Ranker, archs, cfg, batch, seed: int) -> dict:
    from ..search.proxies import proxy_score

    start = time.perf_counter()
    scores = {a.compact: proxy_score(ranker.arg, cfg, a, batch, seed=seed) for a in archs}
    return {"scores": scores, "proxy": ranker.arg, "core_minutes": scoring_minutes(time.perf_counter() - start)}


def rank_score(metrics: dict, rank_by: str) -> float:
    """What a trained ranker and the ground truth rank by: accuracy, or minus the loss (larger is better)."""
    return metrics["mlm_acc"] if rank_by == "acc" else -metrics["mlm_loss"]
