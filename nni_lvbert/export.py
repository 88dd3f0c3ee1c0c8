"""`lvbert export`: a subnet cut out of a trained supernet (or IOT) run, as a Hugging Face model directory.

    lvbert export --supernet runs/quickstart/supernet --arch runs/quickstart/search/best_arch.json --out runs/quickstart/model
    lvbert export --supernet runs/quickstart/iot --out runs/quickstart/model-iot     # an IOT run: its most used order by default
    lvbert export --supernet runs/quickstart/supernet --arch best_arch.json --out M --onnx   # + M/model.onnx
    lvbert export --model runs/quickstart/pretrain/hf --onnx     # model.onnx into an existing LV-BERT directory

The subnet inherits the supernet's weights exactly: NNI's `ModelSpace.freeze(arch)` keeps the chosen layers'
modules, and `nni_lvbert.hf.save_hf_model` writes them as `LVBertForMaskedLM` (+ tokenizer + bundled code). The
directory loads with `AutoModelForMaskedLM.from_pretrained(DIR)` after `import nni_lvbert`, or anywhere with
`trust_remote_code=True`. `--onnx` also writes `model.onnx` into it (`nni_lvbert.hf.exporting`: dynamic batch and
sequence length; needs onnx and onnxscript, and onnxruntime for the check of its outputs against PyTorch's).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import UserError
from .options import opt


@dataclass(frozen=True)
class ExportOptions:
    supernet: str | None = opt(None, "a finished `lvbert supernet train` (or `lvbert iot train`) run directory",
                               metavar="RUN")
    arch: str | None = opt(None, "compact string (ccsf...), digits, name, NNI dict JSON or best_arch.json; for an "
                                 "IOT run one of its orders (default: its most used order)")
    out: str | None = opt(None, "model directory to write (with --supernet)", metavar="DIR")
    overwrite: bool = opt(False, "replace a non-empty --out")
    onnx: bool = opt(False, "also write model.onnx into the model directory (torch.onnx dynamo exporter, dynamic "
                            "batch and sequence; needs onnx, onnxscript, and onnxruntime to check it)")
    model: str | None = opt(None, "instead of --supernet: an existing LV-BERT model directory (lvbert pretrain/"
                                  "finetune output) to write model.onnx into (with --onnx)", metavar="DIR")


def register(sub) -> None:
    from .cliargs import add_command

    add_command(sub, "export", "a subnet of a supernet/IOT run -> Hugging Face model directory (config.json, "
                               "model.safetensors, tokenizer, code)", ExportOptions, run)


def is_iot_run(path) -> bool:
    from .iot.rundir import ORDERS, PREDICTOR

    return (Path(path) / ORDERS).is_file() and (Path(path) / PREDICTOR).is_file()


def choose_arch(run_path, spec, meta: dict, text: str | None):
    """The Arch to export: `text` parsed against the space; for an IOT run it must be one of the orders, and by
    default it is the order used most in the run's final evaluation (the first when none was recorded)."""
    from .arch import Arch

    if not is_iot_run(run_path):
        if text is None:
            raise UserError(f"{run_path} is a supernet run: give the subnet with --arch")
        return Arch.parse(text, spec)
    from .iot.rundir import read_orders
    from .rundir import RunDir

    orders, _ = read_orders(RunDir(run_path, "IOT"), spec)
    if text is None:
        usage = [o.get("usage") for o in (meta.get("final") or {}).get("orders", [])]
        if len(usage) == len(orders) and all(isinstance(u, (int, float)) for u in usage):
            return orders[max(range(len(orders)), key=lambda i: (usage[i], -i))]
        return orders[0]
    arch = Arch.parse(text, spec)
    if arch not in orders:
        raise UserError(f"{arch.compact} is not one of the IOT run's orders: {', '.join(o.compact for o in orders)}")
    return arch


def export_subnet(run_path, arch_text: str | None, out, overwrite: bool = False) -> dict:
    """Write the subnet of a supernet/IOT run as a Hugging Face directory; a JSON-ready summary."""
    from .hf.save import check_model_dir, save_hf_model
    from .supernet.rundir import load_supernet, supernet_dir

    check_model_dir(Path(out), overwrite)  # before loading anything
    supernet_dir(run_path)  # a missing or unfinished run: its line before torch/NNI are imported
    from .search.scorer import space_as_trained

    sn = load_supernet(run_path)
    arch = choose_arch(sn.path, sn.spec, sn.meta, arch_text)
    subnet = sn.space.freeze(arch.dict).eval()
    provenance = {"source": "iot" if is_iot_run(sn.path) else "supernet", "run": str(Path(sn.path).resolve()),
                  "space": space_as_trained(sn.spec, sn.meta), "run_steps": sn.meta.get("steps"),
                  "run_val_mlm_acc": sn.meta.get("final_val_mlm_acc")}
    path = save_hf_model(subnet, sn.cfg, arch, sn.path / "tokenizer", out, overwrite=overwrite,
                         provenance=provenance)
    return {"out": str(path), "arch": arch.compact, "model_class": "LVBertForMaskedLM", **provenance,
            "files": sorted(p.name for p in Path(path).iterdir())}


def run(args) -> dict:
    from .cliargs import options_from_args

    opts = options_from_args(ExportOptions, args)
    if opts.model is not None:
        if opts.supernet or opts.arch or opts.out:
            raise UserError("--model converts an existing model directory: drop --supernet/--arch/--out")
        if not opts.onnx:
            raise UserError("--model DIR needs --onnx (the directory is already a Hugging Face model)")
        from .hf.exporting import write_onnx

        return {"model": opts.model, **write_onnx(opts.model)}
    if opts.supernet is None or opts.out is None:
        raise UserError("give --supernet RUN and --out DIR (or --model DIR --onnx)")
    if opts.onnx:
        from .hf.exporting import check_onnx_packages

        check_onnx_packages()  # before writing anything
    summary = export_subnet(opts.supernet, opts.arch, opts.out, opts.overwrite)
    if opts.onnx:
        from .hf.exporting import write_onnx

        summary.update(write_onnx(summary["out"]))
        summary["files"] = sorted(p.name for p in Path(summary["out"]).iterdir())
    return summary
