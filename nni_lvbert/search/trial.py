"""NNI trial for the nnictl path: score one architecture with weights inherited from a supernet run directory.

    python -m nni_lvbert.search.trial --supernet runs/supernet     (as experiments/search.yml's trialCommand)

The architecture comes from `nni.get_next_parameter()` (or `--arch` outside NNI). The trial builds the fixed
`LVBertForMaskedLM` of that architecture and loads only the chosen layers' tensors from supernet.safetensors (the
same tensors the in-process scorer uses, without importing NNI's NAS stack or the other candidates' weights), scores
the MLM accuracy on the same fixed-masked validation tokens and reports it with `nni.report_final_result`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ..errors import UserError
from ..supernet.rundir import read_run_dir  # noqa: F401  (re-exported: the trial needs no NNI import)


def load_candidate(run_dir, types: list[str], spec, cfg):
    """The fixed model of `types` with the supernet's weights for exactly these layers (eval mode)."""
    from safetensors import safe_open

    from ..modeling import LVBertForMaskedLM
    from ..supernet.rundir import WEIGHTS

    model = LVBertForMaskedLM(cfg, types, spec)
    wanted = model.state_dict()
    state = {}
    with safe_open(str(Path(run_dir) / WEIGHTS), framework="pt") as f:
        keys = set(f.keys())
        for name in wanted:
            src = name
            if name.startswith("layers."):
                _, i, rest = name.split(".", 2)
                src = f"layers.{i}.{types[int(i)]}.{rest}"
                if src not in keys:  # sharing='type': the file keeps one copy of each shared tensor
                    src = next((k for k in keys if k.startswith("layers.") and
                                k.split(".", 3)[2] == types[int(i)] and k.split(".", 3)[3] == rest), src)
            if src not in keys:
                raise UserError(f"{Path(run_dir) / WEIGHTS} lacks tensor {src}: not a supernet of this space")
            state[name] = f.get_tensor(src)
    model.load_state_dict(state)
    return model.eval()


def mlm_accuracy(model, batches) -> float:
    """Correct / masked tokens over pre-built validation batches (vocab projection only at masked positions)."""
    import torch

    from ..modeling import predicts_target

    correct = count = 0
    with torch.inference_mode():
        for b in batches:
            x = model.embeddings(b.input_ids, b.token_type_ids)
            for layer in model.layers:
                x = layer(x, b.mask)
            logits = model.head(x[b.masked])
            correct += int(predicts_target(logits, b.target).sum())
            count += int(b.target.numel())
    return correct / count if count else 0.0


def score_trial(run_dir, arch, val_tokens: int = 16384, batch_size: int = 64, data=None, device="auto") -> dict:
    from ..arch import parse_arch, to_compact
    from .cost import CostModel
    from .scorer import load_val_batches, resolve_device

    start = time.perf_counter()
    spec, cfg, meta = read_run_dir(run_dir)
    types = parse_arch(arch, spec)
    device = resolve_device(device)
    data = data or (meta.get("data") or {}).get("path")
    if not data:
        raise UserError("the supernet's meta.json records no prepared data directory; pass --data")
    batches, stats = load_val_batches(data, val_tokens, batch_size, cfg.pad_token_id, cfg.vocab_size,
                                      cfg.max_position, run_dir=run_dir, device=device)
    model = load_candidate(run_dir, types, spec, cfg).to(device)
    score = mlm_accuracy(model, batches)
    cost = CostModel(cfg, spec)
    return {"arch": to_compact(types), "mlm_acc": score, "backbone_params": cost.params(types),
            "backbone_flops": cost.flops(types), "val_tokens": stats["tokens"],
            "masked_tokens": stats["masked_tokens"], "seconds": round(time.perf_counter() - start, 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nni_lvbert.search.trial", description=__doc__.splitlines()[0])
    p.add_argument("--supernet", default=os.environ.get("LVBERT_SUPERNET", "runs/supernet"),
                   help="supernet run directory (default: $LVBERT_SUPERNET or runs/supernet)")
    p.add_argument("--arch", default=None, help="score this architecture instead of nni.get_next_parameter()")
    p.add_argument("--val-tokens", type=int, default=16384)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--data", default=None, help="prepared data directory (default: the supernet's)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--device", default="auto", help="auto (GPU if visible) | cpu | cuda[:N] | mps (default auto)")
    args = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import nni

        arch = args.arch
        if arch is None:
            arch = nni.get_next_parameter()
            if not arch:
                raise UserError("no parameters from NNI (run under nnictl, or pass --arch)")
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        result = score_trial(args.supernet, arch, args.val_tokens, args.batch_size, args.data, args.device)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    nni.report_final_result({"default": result["mlm_acc"], "backbone_params": result["backbone_params"],
                             "backbone_flops": result["backbone_flops"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
