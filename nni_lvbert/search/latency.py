"""Latency on the user's own device: a table of per-layer-type forward times, and the search's latency budget.

`lvbert search latency-table --size small --device cpu --batch 1 --seq 128 --out T.json` times, in inference mode
(bf16 on a GPU), the forward of the embeddings, of a layer of each type (dc, sa, ff, glu: a chain of CHAIN distinct
layers, divided) and of the MLM head on a (batch, seq) input: warm-up calls, then the median of repeats, the parts'
calls taken in turn so that a change of load hits all of them alike. A model's latency is predicted as embedding + the sum of its slots' layers (HAT, Wang
et al. 2020): the backbone a classifier or `AutoModel` runs (the MLM head is in the table, not in the budget).

T.json holds one table per device type and torch version (`tables["cpu/torch-2.13.0"]`); writing adds or replaces
that entry. `--max-latency-ms X --latency-table T` makes the search skip (and count) candidates predicted over X,
like `--max-params`; the table must be for the supernet's model shape and for the search's device type.
`latency-table` also prints what a budget can be chosen from (`orders_ms`): the predicted ms of the fastest and the
slowest order of the default space and the percentiles between (a budget at p25 leaves a quarter of the orders).
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

from .. import threads
from ..errors import UserError

FORMAT = "lvbert-latency-table"
# the model fields a layer's time depends on (the vocabulary only changes the MLM head, which is not predicted)
LATENCY_FIELDS = ("hidden_size", "embedding_size", "ff_size", "num_heads", "conv_kernel", "conv_head_size",
                  "glu_activation", "glu_bias", "glu_ff_size")
CHAIN = 4  # layers per timed chain
TABLE_KEYS = {"device", "torch", "size", "shape", "batch", "seq", "ms"}  # what the search reads of a table


def table_key(device_type: str, torch_version: str) -> str:
    return f"{device_type}/torch-{torch_version}"


def device_name(device) -> str:
    import platform

    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def median_ms(fns: dict, repeats: int, warmup: int, sync=None) -> dict:
    """Median milliseconds per call of each callable; calls taken round-robin after `warmup` rounds."""
    times = {name: [] for name in fns}
    for i in range(warmup + repeats):
        for name, fn in fns.items():
            if sync:
                sync()
            t = time.perf_counter()
            fn()
            if sync:
                sync()
            if i >= warmup:
                times[name].append((time.perf_counter() - t) * 1e3)
    return {name: statistics.median(v) for name, v in times.items()}


def part_calls(cfg, dev, dtype, batch: int, seq: int, types=("dc", "sa", "ff", "glu")) -> tuple[dict, dict]:
    """({"embedding": call, <type>: call of a chain of CHAIN layers}, {"head": call}) on one random input.

    Each type runs as a chain of CHAIN distinct layers, each fed the previous one's output, as in a model (its own
    weights, activations passed on): one layer timed alone, again and again on one input, reads warmer caches."""
    import torch

    from ..body import Embeddings, MLMHead
    from ..layers import build_layer

    cfg = type(cfg).from_dict({**cfg.to_dict(), "dropout": 0.0, "attention_dropout": 0.0})
    embeddings = Embeddings(cfg)
    chains = {t: torch.nn.Sequential(*(build_layer(t, cfg) for _ in range(CHAIN))) for t in types}
    head = MLMHead(cfg, embeddings.word)
    for m in (embeddings, head, *chains.values()):
        m.to(dev, dtype).eval()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, cfg.vocab_size, (batch, seq), generator=gen).to(dev)
    x = torch.randn(batch, seq, cfg.hidden_size, generator=gen).to(dev, dtype)
    return ({"embedding": lambda: embeddings(ids), **{t: (lambda c=c: c(x)) for t, c in chains.items()}},
            {"head": lambda: head(x)})


def measure(cfg, size: str, device: str = "cpu", batch: int = 1, seq: int = 128, repeats: int = 50,
            warmup: int = 10, types=("dc", "sa", "ff", "glu")) -> dict:
    """One latency table (a JSON-ready dict) for the ModelConfig `cfg` of `size` on `device`."""
    import torch

    from ..data.validation import resolve_device
    from ..shape import SHAPE_FIELDS

    for name, value in (("batch", batch), ("seq", seq), ("repeats", repeats)):
        if value < 1:
            raise UserError(f"--{name} must be at least 1, got {value}")
    if warmup < 0:
        raise UserError(f"--warmup must be at least 0, got {warmup}")
    if seq > cfg.max_position:
        raise UserError(f"--seq {seq} exceeds the position table of size {size} ({cfg.max_position})")
    dev = resolve_device(device)
    if dev.type not in ("cpu", "cuda"):
        raise UserError(f"latency tables are measured on cpu or cuda, not {dev.type}")
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    layers, head = part_calls(cfg, dev, dtype, batch, seq, types)
    sync = torch.cuda.synchronize if dev.type == "cuda" else None
    with torch.inference_mode():
        ms = median_ms(layers, repeats, warmup, sync)
        ms = {k: v / (CHAIN if k in types else 1) for k, v in ms.items()}
        ms.update(median_ms(head, repeats, warmup, sync))  # apart: its vocabulary matrix flushes the caches
    return {"format": FORMAT, "device": dev.type, "device_name": device_name(dev), "torch": torch.__version__,
            "threads": torch.get_num_threads() if dev.type == "cpu" else None, "dtype": str(dtype).split(".")[-1],
            "size": size, "shape": {f: getattr(cfg, f) for f in SHAPE_FIELDS}, "batch": batch, "seq": seq,
            "repeats": repeats, "warmup": warmup, "ms": {k: round(v, 4) for k, v in ms.items()},
            "predictor": "embedding + sum of the slots' layers (ms); head: the MLM head, not in the prediction"}


def write_table(table: dict, out) -> dict:
    """Add (or replace) `table` in the file `out` under its device/torch key; the file's content."""
    from ..atomic import write_json

    out = Path(out)
    content = {"format": FORMAT, "tables": {}}
    if out.exists():
        content = _read(out)
    content["tables"][table_key(table["device"], table["torch"])] = table
    write_json(out, content)
    return content


def _read(path: Path) -> dict:
    from ..safeio import read_json

    fix = f"write one with `lvbert search latency-table --out {path}`"
    content = read_json(path, "latency table", fix)  # missing, damaged or not an object: one line
    if content.get("format") != FORMAT or not isinstance(content.get("tables"), dict):
        raise UserError(f"{path} is not a latency table ({fix})")
    return content


def load_table(path, device_type: str) -> dict:
    """The table of `path` for `device_type` (this torch version's, else the only one for that device type)."""
    import torch

    path = Path(path)
    tables = _read(path)["tables"]
    mine = [k for k in tables if k.split("/")[0] == device_type]
    key = table_key(device_type, torch.__version__)
    if key in tables or len(mine) == 1:
        table = tables[key if key in tables else mine[0]]
        if not isinstance(table, dict) or not TABLE_KEYS <= set(table) or not isinstance(table["ms"], dict):
            raise UserError(f"latency table {path}: its {device_type} entry lacks {', '.join(sorted(TABLE_KEYS))}; "
                            f"measure it again with `lvbert search latency-table --out {path}`")
        return table
    if not mine:
        raise UserError(f"latency table {path} was measured on {', '.join(sorted(tables)) or 'nothing'}, not on "
                        f"{device_type}: measure it with `lvbert search latency-table --device {device_type} "
                        f"--out {path}`")
    raise UserError(f"latency table {path} has several {device_type} tables ({', '.join(sorted(mine))}) and none for "
                    f"torch {torch.__version__}: measure one with this torch")


class LatencyModel:
    """Predicted milliseconds of architectures from one table: embedding + the sum of the slots' layers."""

    def __init__(self, table: dict):
        self.table = table
        self.ms = table["ms"]

    def predict(self, arch) -> float:
        return self.ms["embedding"] + sum(self.ms[t] for t in arch)

    def check(self, cfg, spec, path) -> None:
        """UserError when the table is for another model shape or lacks one of the space's layer types."""
        differ = [f for f in LATENCY_FIELDS if self.table["shape"].get(f) != getattr(cfg, f)]
        if differ:
            shown = ", ".join(f"{f} {self.table['shape'][f]} vs {getattr(cfg, f)}" for f in differ)
            size = size_of(cfg)
            fix = (f"measure it with `{remeasure(self.table, size, path)}`" if size else
                   "no size of sizes.yaml has that shape, and latency-table measures named sizes only")
            raise UserError(f"latency table {path} was measured at size {self.table['size']!r}, not at the "
                            f"supernet's shape ({shown}): {fix}")
        missing = [t for t in spec.candidates if t not in self.ms]
        if missing:
            raise UserError(f"latency table {path} has no time for layer type {', '.join(missing)}")

    def min_ms(self, spec) -> float:
        return self.ms["embedding"] + min(self.ms[t] for t in spec.candidates) * spec.slots

    def spread(self, spec) -> dict:
        """The predicted milliseconds of the space's orders (every order equally likely, as the search's first
        population draws them): the fastest, the slowest and the percentiles between, exact (no sampling)."""
        return {"space": spec.name, "slots": spec.slots, "candidates": list(spec.candidates),
                **{k: round(v, 3) for k, v in order_quantiles(self.ms, spec).items()}}


def checked_model(path, max_ms: float | None, cfg, spec, device_type: str = "cpu") -> LatencyModel | None:
    """The LatencyModel of `--latency-table` for the supernet's shape and the search's device type (None without a
    table). UserError for a missing or mismatched table and for a budget no architecture of the space meets."""
    if max_ms is None and path is None:
        return None
    if path is None:
        raise UserError("--max-latency-ms needs --latency-table T.json (lvbert search latency-table --out T.json)")
    if max_ms is not None and max_ms <= 0:
        raise UserError(f"--max-latency-ms must be positive, got {max_ms}")
    model = LatencyModel(load_table(path, device_type))
    model.check(cfg, spec, path)
    if max_ms is not None and max_ms < model.min_ms(spec):
        spread = model.spread(spec)
        raise UserError(f"no architecture of space {spec.name!r} satisfies --max-latency-ms {max_ms:g}: the fastest "
                        f"is predicted at {model.min_ms(spec):.3f} ms ({model.table['device']}, batch "
                        f"{model.table['batch']} x {model.table['seq']} tokens; a quarter of the orders are under "
                        f"{spread['p25']:g} ms, half under {spread['median']:g} ms)")
    return model


def table_cli(opts) -> dict:  # opts: search.options.LatencyTableOptions
    """`lvbert search latency-table`."""
    from ..config import load_size, load_space

    threads.settle(opts.threads)
    cfg = load_size(opts.size)
    table = measure(cfg, opts.size, opts.device, opts.batch, opts.seq, opts.repeats, opts.warmup)
    if opts.out:
        write_table(table, opts.out)
    return {"out": opts.out, "key": table_key(table["device"], table["torch"]),
            **{k: table[k] for k in ("device_name", "threads", "dtype", "size", "batch", "seq", "ms")},
            "orders_ms": LatencyModel(table).spread(load_space(DEFAULT_SPACE))}


DEFAULT_SPACE = "lvbert"  # the space whose orders latency-table summarises (the supernet's default)
QUANTILES = {"fastest": 0.0, "p10": 0.10, "p25": 0.25, "median": 0.5, "p75": 0.75, "p90": 0.90, "slowest": 1.0}


def order_quantiles(ms: dict, spec) -> dict:
    """{name: predicted ms} at QUANTILES of the space's orders, each order equally likely. An order's prediction
    depends only on how many slots hold each type, so the distribution is summed over those counts (a
    multinomial), exactly: C(slots + k - 1, k - 1) counts, 2,925 for 24 slots of 4 types."""
    from itertools import combinations
    from math import factorial

    types, n = list(spec.candidates), spec.slots
    points = []
    for bars in combinations(range(n + len(types) - 1), len(types) - 1):  # stars and bars: the counts
        edges = (-1, *bars, n + len(types) - 1)
        counts = [edges[i + 1] - edges[i] - 1 for i in range(len(types))]
        ways = factorial(n)
        for c in counts:
            ways //= factorial(c)
        points.append((ms["embedding"] + sum(c * ms[t] for c, t in zip(counts, types)), ways))
    points.sort()
    total = len(types) ** n
    out, seen, i = {}, 0, 0
    for name, q in sorted(QUANTILES.items(), key=lambda kv: kv[1]):
        if q == 1.0:
            out[name] = points[-1][0]
            continue
        while seen + points[i][1] < q * total and i < len(points) - 1:  # the first order the quantile reaches
            seen += points[i][1]
            i += 1
        out[name] = points[i][0]
    return out


def size_of(cfg) -> str | None:
    """The name of the size in sizes.yaml with `cfg`'s latency shape (None when none has it)."""
    from ..config import load_size, size_names

    for name in size_names():
        named = load_size(name)
        if all(getattr(named, f) == getattr(cfg, f) for f in LATENCY_FIELDS):
            return name
    return None


def remeasure(table: dict, size: str, path) -> str:
    """The latency-table command that measures `table` again (device, batch, sequence, threads) at `size`."""
    threads = f" --threads {table['threads']}" if table.get("threads") else ""
    return (f"lvbert search latency-table --size {size} --device {table['device']} --batch {table['batch']} "
            f"--seq {table['seq']}{threads} --out {path}")


class LatencySearch:
    """The latency side of a search: the predictor, the budget (rejected candidates are counted) and the front."""

    def __init__(self, model: LatencyModel, path: str, max_ms: float | None):
        self.model, self.path, self.max_ms = model, str(path), max_ms
        self.rejected = 0

    @classmethod
    def from_options(cls, max_ms, path, pareto: bool, cfg, spec, device_type: str) -> LatencySearch | None:
        """None without a table; UserError for --pareto without one, a mismatched table or an impossible budget."""
        if pareto and path is None:
            raise UserError("--pareto needs --latency-table T.json (the front is score vs predicted latency)")
        model = checked_model(path, max_ms, cfg, spec, device_type)
        return None if model is None else cls(model, path, max_ms)

    def accept(self, arch) -> bool:
        if self.max_ms is None or self.model.predict(arch) <= self.max_ms:
            return True
        self.rejected += 1
        return False

    def record(self, arch) -> dict:
        return {"predicted_ms": round(self.model.predict(arch), 4)}

    def settings(self) -> dict:
        t = self.model.table
        return {"max_latency_ms": self.max_ms, "latency_table": str(Path(self.path).resolve()),
                "latency_key": table_key(t["device"], t["torch"]), "latency_batch": t["batch"],
                "latency_seq": t["seq"]}

    def summary(self, arch) -> dict:
        return {**self.settings(), **self.record(arch), "rejected_over_latency": self.rejected}


def both(first, second):
    """The conjunction of two optional predicates (None: no constraint)."""
    if first is None or second is None:
        return first or second
    return lambda arch: first(arch) and second(arch)


def pareto_front(points: list[dict]) -> list[dict]:
    """The points (dicts with `score` and `predicted_ms`) no other point beats on both (higher score, lower
    latency), fastest first; one per architecture."""
    best: dict[str, dict] = {}
    for p in points:
        best.setdefault(p["arch"], p)
    front, top = [], float("-inf")
    for p in sorted(best.values(), key=lambda p: (p["predicted_ms"], -p["score"])):
        if p["score"] > top:
            front.append(p)
            top = p["score"]
    return front


def write_pareto(records: list[dict], out: Path, max_ms: float | None = None) -> dict:
    """pareto.json (the front and every evaluated point) and pareto.png in `out`; the JSON's content."""
    from ..atomic import pyplot, save_figure, write_json

    points = [{"arch": r["arch"], "score": r["score"], "predicted_ms": r["predicted_ms"]}
              for r in records if r.get("predicted_ms") is not None and r.get("score") is not None]
    front = pareto_front(points)
    content = {"x": "predicted latency (ms)", "y": "inherited score (MLM accuracy)", "max_latency_ms": max_ms,
               "front": front, "evaluated": len({p["arch"] for p in points})}
    write_json(out / "pareto.json", content)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    ax.scatter([p["predicted_ms"] for p in points], [p["score"] for p in points], s=10, alpha=0.4,
               label="evaluated")
    ax.plot([p["predicted_ms"] for p in front], [p["score"] for p in front], "o-", color="C3", label="Pareto front")
    if max_ms is not None:
        ax.axvline(max_ms, color="grey", linestyle="--", label=f"budget {max_ms:g} ms")
    ax.set_xlabel("predicted latency (ms)")
    ax.set_ylabel("inherited MLM accuracy")
    ax.set_title("Score vs predicted latency")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, out / "pareto.png")
    return content
