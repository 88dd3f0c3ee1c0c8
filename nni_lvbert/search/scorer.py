"""Score candidate architectures with weights inherited from the trained supernet (LV-BERT §3.3).

The score is the MLM accuracy (correct / masked tokens) on the first sequences of the fixed-masked validation
split, until at least `val_tokens` tokens. Everything happens in one process on the mutated supernet itself:

- each slot's `PathSamplingLayer` is pointed at the candidate's layer type (`resample(memo=...)`): no copy of the
  supernet, no `space.freeze()`; eval mode and `torch.inference_mode()`;
- the validation set is read and batched once;
- the vocabulary projection runs only at masked positions;
- prefix reuse: the hidden states of the whole validation set after the first d slots are cached, keyed by the
  prefix `arch[:d]` (an Arch of d slots). A candidate resumes from its longest cached prefix. Kept are the
  prefixes of the last candidate (consecutive candidates of an Algorithm-1 generation are in lexicographic order),
  the prefixes of the best `keep` candidates so far (the parents of the next generation) and, within `cache_mb`,
  the most recently used others. Scores with and without the cache are the same computation on the same tensors;
- known scores are never recomputed (`scores`, keyed by Arch, seeded from history.jsonl when resuming);
- the accuracy is `modeling.mlm_accuracy` (exact argmax, ties included), as in training and the nnictl trial.

The validation set and the metrics are `data/validation.py`'s, the prefix cache `prefix_cache.py`'s.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from ..arch import Arch, slot_label
from ..data.validation import ValBatch, batches_accuracy, batches_metrics, load_val_batches, resolve_device
from ..errors import UserError
from .defaults import BATCH_SIZE, VAL_TOKENS
from .prefix_cache import PrefixCache


class SupernetScorer:
    """MLM accuracy of architectures with inherited supernet weights.

    `supernet` is a run directory or a loaded `Supernet`; `data` overrides the prepared data directory recorded
    in the run's meta.json. `device`: see `resolve_device`; cached prefixes live there too. `val` reuses another
    scorer's (batches, val_stats) on the same data (a few-shot split's sub-supernets), checked against this run's
    tokenizer instead of read again.
    """

    def __init__(self, supernet, *, val_tokens: int = VAL_TOKENS, batch_size: int = BATCH_SIZE, data=None,
                 prefix_cache: bool = True, cache_mb: int = 1024, keep: int = 10, device: str | None = "auto",
                 masking: str = "fixed", data_seed: int = 0, val: tuple[list[ValBatch], dict] | None = None):
        from ..supernet.rundir import load_supernet

        if isinstance(supernet, (str, Path)):
            supernet = load_supernet(supernet)
        self.run_dir = str(supernet.path)
        space, spec, cfg, meta = supernet.space, supernet.spec, supernet.cfg, supernet.meta
        self.device = resolve_device(device)
        self.space, self.spec, self.cfg, self.meta = space.to(self.device).eval(), spec, cfg, meta
        self.labels = [slot_label(i) for i in range(spec.slots)]
        self.layers = list(space.layers)
        if len(self.layers) != spec.slots or not all(hasattr(m, "resample") for m in self.layers):
            raise UserError("the supernet's slots are not NNI path-sampling layers")
        data = data or (meta.get("data") or {}).get("path")
        if not data:
            raise UserError("the supernet's meta.json records no prepared data directory; pass --data")
        if val is not None:
            from ..rundir import RunDir

            RunDir(self.run_dir, "supernet").check_data_tokenizer(Path(val[1]["data"]))
            self.batches, self.val_stats = val
        else:
            self.batches, self.val_stats = load_val_batches(
                data, val_tokens, batch_size, cfg.pad_token_id, cfg.vocab_size, cfg.max_position,
                run_dir=self.run_dir, device=self.device, masking=masking, data_seed=data_seed)
        self.prefix_cache = prefix_cache
        self.cache = PrefixCache(int(cache_mb * 2**20), keep if prefix_cache else 0)
        self.scores: dict[Arch, float] = {}
        self.computed = 0  # candidates actually run through the network
        self.slots_computed = 0
        self.seconds = 0.0
        with torch.inference_mode():
            self._embedded = [space.embeddings(b.input_ids, b.token_type_ids) for b in self.batches]

    def parse(self, arch) -> Arch:
        """Any `Arch.parse` spelling, checked against the supernet's space."""
        return Arch.parse(arch, self.spec)

    def remember(self, records) -> None:
        """Scores already known (history.jsonl records), never computed again. A record whose arch does not read
        as one of this space is left out: a resumed search reports it when its replay reaches it."""
        from .history import record_arch

        for r in records:
            try:
                arch = record_arch(r, self.spec)
            except UserError:
                continue
            if arch is not None:
                self.scores.setdefault(arch, r["score"])

    def score(self, arch) -> float:
        arch = self.parse(arch)
        if arch in self.scores:
            return self.scores[arch]
        start = time.perf_counter()
        with torch.inference_mode():
            d, states = self.cache.longest(arch) if self.prefix_cache else (0, None)
            x = states if states is not None else self._embedded
            for i in range(d, len(arch)):
                layer = self.layers[i]
                layer.resample(memo={self.labels[i]: arch[i]})
                x = [layer(h, b.mask) for h, b in zip(x, self.batches)]
                if self.prefix_cache and i + 1 < len(arch):
                    self.cache.put(arch[:i + 1], x)
            score = batches_accuracy(self.space.head, x, self.batches)
        self.scores[arch] = score
        if self.prefix_cache:
            self.cache.scored(arch, score)
        self.computed += 1
        self.slots_computed += len(arch) - d
        self.seconds += time.perf_counter() - start
        return score

    def metrics(self, arch) -> dict:
        """`batches_metrics` of one architecture (accuracy and loss with standard errors; no cache, not
        remembered): what a ranking study compares with stand-alone training."""
        arch = self.parse(arch)
        with torch.inference_mode():
            x = self._embedded
            for i, layer in enumerate(self.layers):
                layer.resample(memo={self.labels[i]: arch[i]})
                x = [layer(h, b.mask) for h, b in zip(x, self.batches)]
            return batches_metrics(self.space.head, x, self.batches)

    def stats(self) -> dict:
        return {"device": str(self.device), "computed": self.computed, "known": len(self.scores), "slots_computed": self.slots_computed,
                "seconds": round(self.seconds, 3), "prefix_cache": self.prefix_cache,
                "cache_mb": round(self.cache.bytes / 2**20, 1), **{f"val_{k}": v for k, v in self.val_stats.items()}}

    def describe(self) -> dict:
        return {"run_dir": self.run_dir, "space": space_as_trained(self.spec, self.meta), "size": self.meta.get("size"),
                "steps": self.meta.get("steps"), "final_val_mlm_acc": self.meta.get("final_val_mlm_acc")}


class FewShotScorer:
    """`SupernetScorer`'s interface over a few-shot supernet directory (`supernet/fewshot.py`): each order is scored
    by the sub-supernet that owns it (the one trained on the sub-space of its choice in the split slot)."""

    def __init__(self, path, **kwargs):
        from ..supernet.fewshot import read_fewshot

        self.fewshot = read_fewshot(path)
        owners = list(self.fewshot["owners"].items())
        first = SupernetScorer(Path(path) / owners[0][1], **kwargs)  # the validation batches are read once
        self.subs = {owners[0][0]: first, **{choice: SupernetScorer(Path(path) / sub, **kwargs,
                                                                    val=(first.batches, first.val_stats))
                                             for choice, sub in owners[1:]}}
        self.run_dir, self.slot = str(path), int(self.fewshot["label"][len("layer"):])
        self.spec, self.cfg, self.space, self.device = first.spec, first.cfg, first.space, first.device
        self.batches, self.val_stats = first.batches, first.val_stats
        self.meta = {**first.meta, "steps": self.fewshot["total_steps"], "fewshot": self.fewshot}
        self.scores: dict[Arch, float] = {}

    def parse(self, arch) -> Arch:
        return Arch.parse(arch, self.spec)

    def owner(self, arch: Arch) -> SupernetScorer:
        return self.subs[arch[self.slot]]

    def remember(self, records) -> None:
        for sub in self.subs.values():
            sub.remember(records)
        self.scores.update({a: s for sub in self.subs.values() for a, s in sub.scores.items()})

    def score(self, arch) -> float:
        arch = self.parse(arch)
        if arch not in self.scores:
            self.scores[arch] = self.owner(arch).score(arch)
        return self.scores[arch]

    def metrics(self, arch) -> dict:
        arch = self.parse(arch)
        return self.owner(arch).metrics(arch)

    @property
    def computed(self) -> int:
        return sum(sub.computed for sub in self.subs.values())

    def stats(self) -> dict:
        subs = {choice: sub.stats() for choice, sub in self.subs.items()}
        return {"fewshot": self.fewshot["split"], "computed": self.computed, "known": len(self.scores),
                "seconds": round(sum(s["seconds"] for s in subs.values()), 3), "subs": subs}

    def describe(self) -> dict:
        return {"run_dir": self.run_dir, "space": space_as_trained(self.spec, self.meta), "size": self.meta.get("size"),
                "steps": self.fewshot["total_steps"], "fewshot": self.fewshot}


def space_as_trained(spec, meta: dict) -> dict:
    """A run's space with the size it was trained at (its meta.json), not the space file's default size (space.yaml
    keeps the file's: `size: small` for a `--size tiny` run)."""
    return {**spec.to_dict(), "size": meta.get("size") or spec.size}


def scored_shape(supernet) -> tuple:
    """(space spec, model config) of a supernet run or a few-shot directory, read without weights or data: what
    the search checks its constraints against before it loads anything."""
    from ..supernet.fewshot import is_fewshot, read_fewshot
    from ..supernet.rundir import supernet_dir

    if is_fewshot(supernet):
        supernet = Path(supernet) / next(iter(read_fewshot(supernet)["owners"].values()))
    run = supernet_dir(supernet)
    return run.spec, run.cfg


def open_scorer(supernet, **kwargs):
    """A `SupernetScorer` for a supernet run directory, a `FewShotScorer` for a few-shot directory."""
    from ..supernet.fewshot import is_fewshot

    if isinstance(supernet, (str, Path)) and is_fewshot(supernet):
        return FewShotScorer(supernet, **kwargs)
    return SupernetScorer(supernet, **kwargs)
