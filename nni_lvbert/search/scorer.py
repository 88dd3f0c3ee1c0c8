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
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch

from ..arch import Arch, slot_label
from ..errors import UserError
from ..modeling import masked_rows, mlm_accuracy
from .defaults import BATCH_SIZE, VAL_TOKENS

MASKINGS = ("fixed", "full")


def resolve_device(name: str | None = "auto"):
    """`auto` (a GPU when torch sees one, else the CPU), `cpu`, `cuda`, `cuda:N` or `mps`; one line if unavailable."""

    name = (name or "auto").strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise UserError(f"unknown device {name!r}; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"device {name!r} requested but this torch ({torch.__version__}) sees no CUDA GPU; "
                            "use --device cpu, or install a CUDA build of torch (see docs/guide/gpu.md)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"device {name!r} requested but only {torch.cuda.device_count()} CUDA GPU(s) are visible")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"device {name!r} requested but MPS is not available")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"unsupported device {name!r}; use auto, cpu, cuda, cuda:N or mps")
    return device


@dataclass
class ValBatch:
    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    mask: torch.Tensor | None  # None when nothing is padded
    positions: torch.Tensor  # flat (batch x seq) indices of the positions to predict (`modeling.masked_positions`)
    target: torch.Tensor  # labels at those positions
    tokens: int
    seq: torch.Tensor | None = None  # the validation sequence of each row (standard errors cluster by sequence)


def load_val_batches(data_path, val_tokens: int, batch_size: int, pad_token_id: int,
                     vocab_size: int | None = None, max_position: int | None = None,
                     run_dir=None, device=None, masking: str = "fixed", data_seed: int = 0
                     ) -> tuple[list[ValBatch], dict]:
    """The first validation sequences with at least `val_tokens` tokens in all (or the whole split), batched.
    With `run_dir`, the data must have been tokenized with that run's tokenizer.

    masking: `fixed` scores the split's own fixed 15 % masking (one pass: what the search uses); `full` masks every
    token exactly once over `FULL_ROUNDS` disjoint rounds seeded by `data_seed` (`data.masking.full_split_rounds`):
    about 7x the tokens and the time, and about 2.6x smaller standard errors (sqrt 7)."""
    from ..data import PreparedData
    from ..data.masking import PadCollator, model_mask
    from ..rundir import RunDir

    if val_tokens < 1:
        raise UserError(f"--val-tokens must be at least 1, got {val_tokens}")
    if batch_size < 1:
        raise UserError(f"batch size must be at least 1, got {batch_size}")
    path = Path(data_path)
    if not path.is_dir():
        raise UserError(f"prepared data directory not found: {path} (pass --data, or prepare it again)")
    data = PreparedData.load(path)
    if vocab_size is not None and data.vocab_size != vocab_size:
        raise UserError(f"{path} has a {data.vocab_size}-token vocabulary but the supernet has {vocab_size}")
    if run_dir is not None:
        RunDir(run_dir, "supernet").check_data_tokenizer(path)
    ds = data.val_dataset()
    rows, tokens = [], 0
    chunk = 256
    for start in range(0, len(ds), chunk):
        part = ds[start:start + chunk]
        for ids, types, labels in zip(part["input_ids"], part["token_type_ids"], part["labels"]):
            rows.append({"input_ids": ids, "token_type_ids": types, "labels": labels})
            tokens += len(ids)
            if tokens >= val_tokens:
                break
        if tokens >= val_tokens:
            break
    if not rows:
        raise UserError(f"{path} has an empty validation split")
    if max_position is not None and max(len(r["input_ids"]) for r in rows) > max_position:
        raise UserError(f"{path} has sequences longer than the supernet's position table ({max_position})")
    if masking not in MASKINGS:
        raise UserError(f"unknown validation masking {masking!r}; use {' or '.join(MASKINGS)}")
    sequences = len(rows)
    if masking == "full":
        from ..data.masking import full_split_rounds

        rows = [r for part in full_split_rounds(rows, data.tokenizer(), seed=data_seed) for r in part]
    else:
        rows = [{**r, "seq": i} for i, r in enumerate(rows)]
    collate = PadCollator(pad_token_id)
    batches = []
    for b in range(0, len(rows), batch_size):
        seq = torch.tensor([r.pop("seq") for r in rows[b:b + batch_size]])
        batch = collate(rows[b:b + batch_size])  # with the host counts: no device sync here or when scoring
        mask, positions = model_mask(batch), batch["mlm_positions"]
        ids, types, target = batch["input_ids"], batch["token_type_ids"], batch["labels"].reshape(-1)[positions]
        if device is not None:
            ids, types, positions, target = (t.to(device) for t in (ids, types, positions, target))
            mask = mask.to(device) if mask is not None else None
        batches.append(ValBatch(ids, types, mask.bool() if mask is not None else None, positions, target,
                                batch["real_tokens"], seq))
    stats = {"data": str(data.path), "sequences": sequences,
             "tokens": tokens, "masking": masking,
             "masked_tokens": sum(len(b.positions) for b in batches), "batches": len(batches),
             "requested_tokens": val_tokens, "whole_split": tokens < val_tokens}
    return batches, stats


def batches_accuracy(head, hidden, batches: list[ValBatch]) -> float:
    """MLM accuracy of the hidden states of validation batches (`modeling.mlm_accuracy`); the vocabulary
    projection runs only at masked positions. The scorer and the nnictl trial score through it."""
    return mlm_accuracy((head(masked_rows(h, b.positions)), b.target) for h, b in zip(hidden, batches))


def batches_metrics(head, hidden, batches: list[ValBatch]) -> dict:
    """MLM accuracy (`modeling.mlm_correct`) and loss (cross-entropy, nats) over validation batches, each with its
    standard error. Masked tokens of one sequence are not independent, so the errors are cluster-robust by
    validation sequence (the ratio-estimator variance (S/(S-1)) sum_i (y_i - m n_i)^2 / N^2 over the S sequences,
    y_i the sequence's correct count or loss sum, n_i its masked tokens, N = sum n_i)."""
    import torch.nn.functional as F

    from ..modeling import mlm_correct

    if any(b.seq is None for b in batches):
        raise ValueError("standard errors need the batches' sequence ids (load_val_batches sets them)")
    size = max(int(b.seq.max()) for b in batches) + 1
    sums = {name: torch.zeros(size, dtype=torch.float64, device=batches[0].target.device)
            for name in ("n", "correct", "loss")}
    for h, b in zip(hidden, batches):
        logits = head(masked_rows(h, b.positions)).float()
        rows = b.seq.to(b.positions.device)[b.positions // h.shape[1]]
        sums["n"].index_add_(0, rows, torch.ones_like(b.target, dtype=torch.float64))
        sums["correct"].index_add_(0, rows, mlm_correct(logits, b.target).double())
        sums["loss"].index_add_(0, rows, F.cross_entropy(logits, b.target, reduction="none").double())
    n, keep = sums["n"].cpu(), sums["n"].cpu() > 0
    n = n[keep]
    total, seqs = float(n.sum()), int(keep.sum())
    out = {"masked_tokens": int(total), "sequences": seqs}
    for name, key in (("correct", "mlm_acc"), ("loss", "mlm_loss")):
        y = sums[name].cpu()[keep]
        mean = float(y.sum()) / total
        var = seqs / max(seqs - 1, 1) * float(((y - mean * n) ** 2).sum()) / total ** 2
        out[key], out[f"{key}_se"] = mean, var ** 0.5
    return out


def model_metrics(model, batches) -> dict:
    """`batches_metrics` of one built model (a stand-alone model, a frozen subnet)."""
    with torch.inference_mode():
        hidden = [model.encode(b.input_ids, b.mask, b.token_type_ids) for b in batches]
        return batches_metrics(model.head, hidden, batches)


class PrefixCache:
    """Hidden states of the validation set after a prefix of slots, keyed by the prefix (`arch[:d]`, an Arch)."""

    def __init__(self, max_bytes: int, keep: int):
        self.max_bytes, self.keep = max_bytes, keep
        self.states: OrderedDict[Arch, list[torch.Tensor]] = OrderedDict()  # LRU order, most recent last
        self.bytes = 0
        self.best: list[tuple[float, Arch]] = []  # (score, arch) of the `keep` best, best first
        self.pinned: dict[Arch, int] = {}  # prefix -> number of best archs through it
        self.hits = 0

    @staticmethod
    def _size(states: list[torch.Tensor]) -> int:
        return sum(t.numel() * t.element_size() for t in states)

    def longest(self, arch: Arch) -> tuple[int, list[torch.Tensor] | None]:
        for d in range(len(arch) - 1, 0, -1):
            states = self.states.get(arch[:d])
            if states is not None:
                self.states.move_to_end(arch[:d])
                self.hits += 1
                return d, states
        return 0, None

    def put(self, prefix: Arch, states: list[torch.Tensor]) -> None:
        if prefix in self.states:
            self.states.move_to_end(prefix)
            return
        size = self._size(states)
        if size > self.max_bytes:
            return
        self.states[prefix] = states
        self.bytes += size
        self._evict()

    def _evict(self) -> None:
        if self.bytes <= self.max_bytes:
            return
        for prefix in list(self.states):  # least recently used first; the best candidates' prefixes stay
            if self.bytes <= self.max_bytes:
                return
            if prefix not in self.pinned:
                self.bytes -= self._size(self.states.pop(prefix))
        while self.bytes > self.max_bytes and self.states:  # pinned prefixes alone exceed the budget
            prefix, states = self.states.popitem(last=False)
            self.bytes -= self._size(states)

    def scored(self, arch: Arch, score: float) -> None:
        """Keep the prefixes of the best `keep` candidates: the parents of the next generation."""
        if self.keep <= 0:
            return
        if len(self.best) >= self.keep and (-score, arch) >= (-self.best[-1][0], self.best[-1][1]):
            return
        self.best.append((score, arch))
        self.best.sort(key=lambda e: (-e[0], e[1]))
        for d in range(1, len(arch)):
            self.pinned[arch[:d]] = self.pinned.get(arch[:d], 0) + 1
        if len(self.best) > self.keep:
            _, out = self.best.pop()
            for d in range(1, len(out)):
                self.pinned[out[:d]] -= 1
                if not self.pinned[out[:d]]:
                    del self.pinned[out[:d]]
        self._evict()


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


def score_cli(args) -> dict:
    """`lvbert search score`: the inherited-weight MLM accuracy and loss of one architecture, with standard errors
    (or, with --proxy, a zero-cost proxy at the supernet's shape)."""
    from .cost import CostModel
    from .proxies import check_proxy, proxy_score

    if args.proxy:
        check_proxy(args.proxy)
    scorer = open_scorer(args.supernet, val_tokens=args.val_tokens, batch_size=args.batch_size, data=args.data,
                            prefix_cache=False, device=args.device, masking=args.val_masking)
    arch = scorer.parse(args.arch)
    if args.proxy:
        scores = {"proxy": args.proxy, "score": proxy_score(args.proxy, scorer.cfg, arch, scorer.batches[0],
                                                            seed=args.seed), "seed": args.seed}
    else:
        scores = scorer.metrics(arch)
    return {"arch": arch.compact, **scores, **CostModel(scorer.cfg, scorer.spec).describe(arch),
            "val_tokens": scorer.val_stats["tokens"], "masking": args.val_masking,
            "masked_tokens": scorer.val_stats["masked_tokens"]}


def model_accuracy(model, batches) -> float:
    """MLM accuracy of one built model (a frozen subnet, a stand-alone model) over pre-built validation batches: each
    batch through `model.encode`, then `batches_accuracy` (vocabulary projection only at masked positions). The nnictl
    trial and the studies score one architecture with it; `SupernetScorer` scores many on the supernet itself."""
    with torch.inference_mode():
        hidden = (model.encode(b.input_ids, b.mask, b.token_type_ids) for b in batches)
        return batches_accuracy(model.head, hidden, batches)
