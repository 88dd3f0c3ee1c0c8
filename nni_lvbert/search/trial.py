"""NNI trial for the nnictl path: score one architecture with weights inherited from a supernet run directory.

    python -m nni_lvbert.search.trial --supernet runs/quickstart/supernet     (as experiments/search.yml's trialCommand)

The architecture comes from `nni.get_next_parameter()` (or `--arch` outside NNI). The trial loads the trained
supernet (the one-shot NNI space, from supernet.safetensors) and freezes it to that architecture with NNI's
`ModelSpace.freeze`, which keeps the chosen layers' weights: the same modules the in-process scorer runs, so the
score is identical. It scores the MLM accuracy on the same fixed-masked validation tokens and reports it with
`nni.report_final_result`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from ..errors import UserError
from ..layout import SUPERNET
from ..nni_compat import ignore_nni_import_warnings
from ..supernet.rundir import supernet_dir
from ..threads import HELP as THREADS_HELP
from ..threads import settle, start_trial
from .defaults import BATCH_SIZE, VAL_TOKENS


def load_candidate(run_dir, arch, spec=None, cfg=None):
    """The model of `arch` (an Arch or a list of layer types) with the supernet's trained weights (eval mode), by
    NNI's public route: the trained one-shot space (`load_supernet`, safetensors) frozen to the architecture
    (`ModelSpace.freeze` keeps the chosen layers' weights; the same modules the in-process scorer runs).
    `spec`/`cfg` are accepted for older callers; the run directory's own are used."""
    from ..arch import Arch
    from ..supernet.rundir import load_supernet

    return load_supernet(run_dir).space.freeze(Arch(arch).dict).eval()


def score_trial(run_dir, arch, val_tokens: int = VAL_TOKENS, batch_size: int = BATCH_SIZE, data=None,
                device="auto") -> dict:
    from ..arch import Arch
    from ..data.validation import load_val_batches, model_accuracy, resolve_device
    from .cost import CostModel

    start = time.perf_counter()
    run = supernet_dir(run_dir)
    spec, cfg, meta = run.spec, run.cfg, run.meta
    arch = Arch.parse(arch, spec)
    device = resolve_device(device)
    data = data or (meta.get("data") or {}).get("path")
    if not data:
        raise UserError("the supernet's meta.json records no prepared data directory; pass --data")
    batches, stats = load_val_batches(data, val_tokens, batch_size, cfg.pad_token_id, cfg.vocab_size,
                                      cfg.max_position, run_dir=run_dir, device=device)
    model = load_candidate(run_dir, arch).to(device)
    score = model_accuracy(model, batches)
    cost = CostModel(cfg, spec)
    return {"arch": arch.compact, "mlm_acc": score, "backbone_params": cost.params(arch),
            "backbone_flops": cost.flops(arch), "val_tokens": stats["tokens"],
            "masked_tokens": stats["masked_tokens"], "seconds": round(time.perf_counter() - start, 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nni_lvbert.search.trial", description=__doc__.splitlines()[0])
    p.add_argument("--supernet", default=os.environ.get("LVBERT_SUPERNET", SUPERNET),
                   help=f"supernet run directory (default: $LVBERT_SUPERNET or {SUPERNET})")
    p.add_argument("--arch", default=None, help="score this architecture instead of nni.get_next_parameter()")
    p.add_argument("--val-tokens", type=int, default=VAL_TOKENS)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--data", default=None, help="prepared data directory (default: the supernet's)")
    p.add_argument("--threads", type=int, default=None, help=THREADS_HELP)
    p.add_argument("--device", default="auto", help="auto (GPU if visible) | cpu | cuda[:N] | mps (default auto)")
    args = p.parse_args(argv)
    start_trial()  # before torch: OMP_WAIT_POLICY beside another trial (threads.py)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    ignore_nni_import_warnings()
    try:
        import nni

        arch = args.arch
        if arch is None:
            arch = nni.get_next_parameter()
            if not arch:
                raise UserError("no parameters from NNI (run under nnictl, or pass --arch)")
        settle(args.threads)
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
