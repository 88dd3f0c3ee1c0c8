"""Benchmark (not a test): the GPU targets of the project in one process, on --device (cuda: bf16 autocast).

- model:    training tokens/s of our interleaved `bert` vs transformers' BertForMaskedLM of the same shape
            (bench_model's pair). `ours` gets the batch as training does (masked positions and real tokens counted
            on the host by the collators: no host sync in a step); `ours_device_counts` finds them on the device
            (two host syncs per step; the GPU check's 0.92x had these and three more in the accuracy count). MFU = 6 x parameters x tokens/s over the device's dense bf16 peak;
            host_syncs_per_step from torch.cuda.set_sync_debug_mode (expected: 0 for ours, several for the other).
            Target: ours >= 1.5x HF.
- model_compiled (with --compile, last: the longest compilation): ours with every layer block compiled (the CLI's
            `--compile`), and with the whole model (embeddings, layers, head, loss) as one graph:
            `ours_whole_default`, and `ours_whole_reduce-overhead` with CUDA graphs (inductor); HF eager again.
- layers:   fwd+bwd of dc / sa / ff / glu at --size's hidden size (and compiled with --compile), and of dc with its
            other convolution kernels (`DynamicConv.impl`: shifted adds for the depthwise convolution, unfolded
            windows for the dynamic one; the same function); plain `dc` is the layer's own pick for the device
            (`dynamic_conv.FASTEST`, from this part's numbers on an H200).
            Target dc <= 1.2x sa.
- supernet: a supernet training step on one sampled path vs the fixed model of the same arch (bench_supernet's
            sides). Target <= 1.05x.
The sides of each part alternate their steps (noise hits every side alike; CUDA is synchronised around each step);
medians of --steps. Each part is timed on its own: one that fails is reported with its error and the others still
run; a side of a model part that fails its first step is reported with its error. Prints one JSON object and
writes it to --out after every part. Search scoring on the GPU:
`bench_search.py --size small --device cuda`.
    python benchmarks/bench_gpu.py [--device cuda] [--size small] [--batch 128] [--seq 128] [--steps 20] [--compile]
                                   [--compile-backend inductor]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmarks
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the source tree (PYTHONPATH-free on a GPU host)
warnings.filterwarnings("ignore")

PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12}  # dense, spec sheets


def peak_flops(device) -> float | None:
    import torch

    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(steps: dict, n: int, device) -> dict:
    """`interleaved_medians` with CUDA synchronised around each call; 3 warm-up rounds (compilation, optimizer
    state, allocator)."""
    from common import interleaved_medians

    return interleaved_medians(steps, n, warmup=3, sync=lambda: sync(device))


def train_step(model, loss_fn, device, amp: bool):
    """One AdamW training step of `model` (bf16 autocast when `amp`)."""
    import torch

    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(model)
        loss.backward()
        opt.step()
    return step


def host_syncs(step, device) -> int | None:
    """How many times one call of `step` makes the host wait for the GPU (torch.cuda.set_sync_debug_mode's
    warnings); None off CUDA."""
    import torch

    if device.type != "cuda":
        return None
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def compiled_copy(model, backend: str = "inductor"):
    import copy

    from nni_lvbert.callbacks import compile_layers

    twin = copy.deepcopy(model)
    compile_layers(twin, backend)
    return twin


def host_batch(vocab: int, a, device) -> dict:
    """bench_model's seeded masked batch with the collators' host counts (`data.masking.host_counts`), on device."""
    import torch

    from common import masked_batch
    from nni_lvbert.data.masking import host_counts

    ids, mask, labels = masked_batch(vocab, a.batch, a.seq)
    batch = host_counts({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}


def sync_free_loss(batch: dict):
    """The training loss as the Lightning modules call it: host-counted positions, no mask when nothing is padded."""
    from nni_lvbert.data.masking import model_mask

    return lambda m: m(batch["input_ids"], model_mask(batch), labels=batch["labels"],
                       positions=batch["mlm_positions"]).loss


def whole_compiled(model, mode: str, backend: str):
    """A copy of `model` whose whole forward (embeddings, every layer, MLM head and loss) is one torch.compile graph
    (`fullgraph`: the host counts leave no sync to break it), as `lvbert pretrain --compile` compiles its objective.
    mode "reduce-overhead": CUDA graphs (inductor only)."""
    import copy

    twin = copy.deepcopy(model)
    twin.compile(backend=backend, fullgraph=True, **({"mode": mode} if mode != "default" else {}))
    return twin


def model_sides(a, device, amp, compiled: bool) -> dict:
    """Ours vs HF: eager (host counts, and device counts as before), or ours compiled (layer blocks, whole model)."""
    import copy

    from bench_model import build_pair
    from nni_lvbert.data.masking import pad_positions
    from nni_lvbert.pretrain.module import COMPILED_POSITIONS

    cfg, ours, hf = build_pair(a.size)
    batch = host_batch(cfg.vocab_size, a, device)
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    fast = sync_free_loss(batch)
    whole = sync_free_loss(pad_positions(batch, COMPILED_POSITIONS))  # as pre-training's collator under --compile
    sides = {"hf": (hf, lambda m: m(input_ids=ids, attention_mask=mask, labels=labels).loss)}
    if not compiled:
        sides["ours"] = (ours, fast)
        sides["ours_device_counts"] = (copy.deepcopy(ours), lambda m: m(ids, mask, labels=labels).loss)
    else:
        sides["ours_compiled"] = (compiled_copy(ours, a.compile_backend), fast)
        modes = ["default", "reduce-overhead"] if a.compile_backend == "inductor" else ["default"]
        for mode in modes:
            sides[f"ours_whole_{mode}"] = (whole_compiled(ours, mode, a.compile_backend), whole)
    params = {name: sum(p.numel() for p in m.parameters()) for name, (m, _) in sides.items()}
    steps, failed = {}, {}
    for name, (m, f) in sides.items():  # a side that fails its first step is reported, the others still timed
        try:
            t = time.perf_counter()
            steps[name] = train_step(m, f, device, amp)
            steps[name]()
            print(f"  {name}: first step {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
        except Exception as exc:  # noqa: BLE001
            steps.pop(name, None)
            failed[name] = {"error": f"{type(exc).__name__}: {exc}"[:1500]}
    syncs = {name: host_syncs(step, device) for name, step in steps.items()}
    secs = timed(steps, a.steps, device)
    tokens, peak = a.batch * a.seq, peak_flops(device)
    out = {"shape": f"bert-{a.size} E=H={cfg.hidden_size}, 12 SA + 12 FF, batch {a.batch} x {a.seq}", **failed}
    for name, s in secs.items():
        out[name] = {"step_ms": round(s * 1e3, 2), "tokens_per_s": round(tokens / s),
                     "mfu": round(6 * params[name] * tokens / s / peak, 4) if peak else None,
                     "host_syncs_per_step": syncs[name]}
    for name in secs:
        if name.startswith("ours") and "hf" in secs:
            out[f"{name}_over_hf"] = round(secs["hf"] / secs[name], 3)
    return out


def part_model(a, device, amp) -> dict:
    return model_sides(a, device, amp, compiled=False)


def part_model_compiled(a, device, amp) -> dict:
    return model_sides(a, device, amp, compiled=True)


def part_layers(a, device, amp) -> dict:
    import torch

    from nni_lvbert.config import load_size
    from nni_lvbert.layers import LAYER_CLASSES, build_layer
    from nni_lvbert.layers.dynamic_conv import DEPTHWISE, LIGHTWEIGHT

    cfg = load_size(a.size, max_length=a.seq)
    x = torch.randn(a.batch, a.seq, cfg.hidden_size, device=device, requires_grad=True)
    layers = {t: build_layer(t, cfg).to(device).train() for t in LAYER_CLASSES}
    for impl in [(d, w) for d in DEPTHWISE for w in LIGHTWEIGHT]:  # "dc": DynamicConv's own pick (fastest_impl)
        layers[f"dc[{'+'.join(impl)}]"] = variant = build_layer("dc", cfg).to(device).train()
        variant.impl = impl  # the same function with other kernels (layers/dynamic_conv.py)
    if a.compile:
        layers.update({f"{t}_compiled": compiled_copy(m, a.compile_backend) for t, m in list(layers.items())})

    def step(layer):
        def run():
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                y = layer(x, None)
            y.float().sum().backward()
        return run

    secs = timed({t: step(m) for t, m in layers.items()}, a.steps, device)
    out = {"shape": f"H{cfg.hidden_size}, batch {a.batch} x {a.seq}, fwd+bwd",
           "ms": {t: round(s * 1e3, 3) for t, s in secs.items()}, "dc_over_sa": round(secs["dc"] / secs["sa"], 3)}
    best = min((t for t in secs if t.startswith("dc") and not t.endswith("_compiled")), key=secs.get)
    out["best_dc"], out["best_dc_over_sa"] = best, round(secs[best] / secs["sa"], 3)
    if a.compile:
        out["dc_over_sa_compiled"] = round(secs["dc_compiled"] / secs["sa_compiled"], 3)
        best = min((t for t in secs if t.startswith("dc") and t.endswith("_compiled")), key=secs.get)
        out["best_dc_compiled"], out["best_dc_over_sa_compiled"] = best, round(secs[best] / secs["sa_compiled"], 3)
    return out


def part_supernet(a, device, amp) -> dict:
    from bench_supernet import build_side

    sides = {mode: build_side(mode, a.size, a.arch, a.seq) for mode in ("fixed", "supernet")}
    loss = sync_free_loss(host_batch(sides["fixed"][0].config.vocab_size, a, device))

    def step(model, select):
        inner = train_step(model, loss, device, amp)

        def run():
            select()
            inner()
        return run

    secs = timed({mode: step(*side) for mode, side in sides.items()}, a.steps, device)
    return {"shape": f"{a.arch} at {a.size}, batch {a.batch} x {a.seq}",
            **{mode: {"step_ms": round(s * 1e3, 2), "tokens_per_s": round(a.batch * a.seq / s)}
               for mode, s in secs.items()},
            "supernet_over_fixed": round(secs["supernet"] / secs["fixed"], 3)}


PARTS = {"model": part_model, "layers": part_layers, "supernet": part_supernet,
         "model_compiled": part_model_compiled}  # last: the longest compilation
TARGETS = {"model.ours_over_hf (or model_compiled.ours_*_over_hf)": ">= 1.5", "layers.dc_over_sa": "<= 1.2",
           "supernet.supernet_over_fixed": "<= 1.05"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size", default="small")
    ap.add_argument("--arch", default="lvbert-small", help="the supernet part's path (default lvbert-small)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--compile", action="store_true",
                    help="also time the layer blocks under torch.compile, and the whole model as one graph")
    ap.add_argument("--compile-backend", default="inductor", help="torch.compile backend (default inductor)")
    ap.add_argument("--no-amp", dest="amp", action="store_false", help="fp32 (default on cuda: bf16 autocast)")
    ap.add_argument("--parts", nargs="+", choices=list(PARTS),
                    help="default: model, layers, supernet, and with --compile model_compiled")
    ap.add_argument("--out", type=Path, help="also write the JSON here (after every part)")
    a = ap.parse_args()
    import torch

    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"error: --device {a.device}: torch {torch.__version__} sees no CUDA device", file=sys.stderr)
        return 2
    amp = a.amp and device.type == "cuda"
    report = {"torch": torch.__version__, "device": torch.cuda.get_device_name(device) if device.type == "cuda"
              else a.device, "bf16_autocast": amp, "peak_bf16_flops": peak_flops(device), "targets": TARGETS}
    a.parts = a.parts or [p for p in PARTS if a.compile or p != "model_compiled"]
    for name in a.parts:
        t = time.perf_counter()
        try:
            report[name] = PARTS[name](a, device, amp)
        except Exception as exc:  # noqa: BLE001  (one part failing must not lose the others' numbers)
            report[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
        report[name]["seconds"] = round(time.perf_counter() - t, 1)
        if a.out:
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps(report, indent=2))
        print(f"{name}: done in {report[name]['seconds']} s", file=sys.stderr, flush=True)
    print(json.dumps(report, indent=2))
    return 0 if all("error" not in report[p] for p in a.parts) else 1


if __name__ == "__main__":
    sys.exit(main())
