"""One nnictl trial of a stand-alone experiment (`study/nnictl.py`, experiments/standalone.yml): train one model of
the store and report it.

    python -m nni_lvbert.study.trial --specs models.json [--model KEY]

The model key comes from the tuner (`nni.get_next_parameter()["model"]`; `--model KEY` outside nnictl). The spec is
rebuilt from models.json and must give the same key (same spec, same directory name as the study's in-process path);
`store.train_standalone` trains it into the store, or skips it when finished there (resumes it when interrupted,
waits when another process holds its lock). Then, from the run's meta.json, every validation record's MLM accuracy
is an intermediate result and the final one the final result ({"default": accuracy, "model": key, "val_mlm_loss",
"steps", "trained"}: trained 0 when the store had it; an ELECTRA model of `study downstream`: its generator's MLM
accuracy and "val_gen_loss"). The store trains with `--val-every` = the budget's steps, so the curve is one point
per model unless the run was resumed from a longer one. A failed trial exits non-zero with one
`error:` line last on stderr (NNI's web UI: the trial's stderr log).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UserError
from ..threads import start_trial


def run_trial(specs_file: Path, key: str | None) -> dict:
    from ..nni_compat import in_nni_trial
    from ..safeio import read_json
    from ..standalone.store import train_standalone
    from .nnictl import spec_from_json

    listing = read_json(specs_file, "models.json of a stand-alone experiment")
    models = listing.get("models")
    if not isinstance(models, dict) or "store" not in listing:
        raise UserError(f"{specs_file} is not a models.json written by `lvbert study ranking|iot|downstream "
                        "--nnictl DIR`")
    reporting = in_nni_trial()
    if key is None:
        if not reporting:
            raise UserError("not an nnictl trial: give the model with --model KEY")
        import nni

        key = (nni.get_next_parameter() or {}).get("model")
        if key is None:
            raise UserError("the tuner sent no 'model' parameter (is the search space standalone_space.json?)")
    if key not in models:
        raise UserError(f"model {key} is not in {specs_file} ({len(models)} models)")
    spec = spec_from_json(models[key]["spec"])
    if spec.dirname() != key:
        raise UserError(f"{key} rebuilds as {spec.dirname()} here: its data path {spec.data} resolves differently on "
                        "this machine; mount the data at the same path as where the experiment was written")
    store = Path(listing["store"])
    before = (store / key / "meta.json").is_file()
    print(f"{models[key]['what']}: {key} {'already in' if before else 'training into'} {store}", file=sys.stderr,
          flush=True)
    path = train_standalone(spec, store, progress=False)
    from ..rundir import RunDir

    meta = RunDir(path, "pretrain").meta
    final = meta.get("final") or {}
    # MLM's accuracy, or ELECTRA's generator's (what `study downstream` scores an ELECTRA model by)
    acc, loss = ("val_mlm_acc", "val_mlm_loss") if "val_mlm_acc" in final else ("val_gen_mlm_acc", "val_gen_loss")
    if acc not in final:
        raise UserError(f"{path}/meta.json has no final val_mlm_acc (nor an ELECTRA generator's val_gen_mlm_acc)")
    # the key in the metric itself: NNI may list another trial's parameters beside it (nni_compat/trials.py)
    result = {"default": float(final[acc]), "model": key, "steps": int(meta.get("steps", 0)),
              "trained": int(not before)}
    if loss in final:
        result[loss] = float(final[loss])
    if reporting:
        import nni

        for record in meta.get("validation", []):
            if acc in record:
                nni.report_intermediate_result(float(record[acc]))
        nni.report_final_result(result)
    return {"run": str(path), **result}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nni_lvbert.study.trial", description=__doc__.split("\n\n")[0])
    parser.add_argument("--specs", required=True, metavar="FILE", help="the experiment's models.json")
    parser.add_argument("--model", default=None, metavar="KEY", help="the model key (default: the tuner's)")
    args = parser.parse_args(argv)
    start_trial(Path(args.specs).parent / "standalone.yml")  # cores / trialConcurrency each (threads.py)
    try:
        result = run_trial(Path(args.specs), args.model)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001  (a crash: its traceback, then the one line the web UI's log ends with)
        import traceback

        traceback.print_exc()
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    import json

    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
