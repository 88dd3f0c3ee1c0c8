"""The Python face for NNI users: the space, the best-architecture JSON and the exported model, around NNI's own
`NasExperiment`, evaluator and strategies (docs/guide/python-api.md walks through it; tests/test_python_api.py runs
every NNI 3.0 strategy through it). Everything here is importable from `nni_lvbert`.
"""
from __future__ import annotations

import json
from pathlib import Path

from .errors import UserError

# NNI 3.0's strategies that need tianshou (ENAS's controller, PolicyBasedRL's policy)
RL_STRATEGIES = ("ENAS", "PolicyBasedRL")
TIANSHOU_FIX = ("pip install --no-deps tianshou==0.4.11 gym==0.26.2 gym-notices cloudpickle numba llvmlite h5py "
                "(NNI 3.0 was written against tianshou 0.4's API; PyPI's tianshou 1.x/2.x differ)")


def build_space(space: str | Path = "lvbert", size: str | None = None, *, data=None, **overrides):
    """NNI `ModelSpace` of LV-BERT (`LVBertSpace`: one labelled `LayerChoice` per slot). `space`: a name of
    search_spaces/ or a space YAML path; `size`: a row of sizes.yaml (default: the space's own size); `data`: the
    `PreparedData` it trains on (its tokenizer's vocabulary size); `overrides`: ModelConfig fields (e.g. dropout)."""
    from .config import load_size, load_space
    from .space import LVBertSpace

    spec = load_space(space)
    cfg = load_size(size or spec.size, **overrides)
    if data is not None:
        cfg.vocab_size = data.vocab_size
    model_space = LVBertSpace(spec, cfg)
    model_space.size = size or spec.size  # the size's name, for best_arch.json
    return model_space


def check_strategy(strategy) -> None:
    """Raise one `UserError` line naming the fix when NNI's `strategy` (an instance, or its class name: NNI's
    PolicyBasedRL() itself fails without tianshou) cannot run here (ENAS and PolicyBasedRL without a tianshou that
    NNI 3.0 works with)."""
    name = strategy if isinstance(strategy, str) else type(strategy).__name__
    if name in RL_STRATEGIES and not tianshou_usable():
        raise UserError(f"{name} needs tianshou 0.4 and gym: {TIANSHOU_FIX}")


def tianshou_usable() -> bool:
    """True when tianshou imports with the API NNI 3.0 uses (tianshou.policy.BasePolicy/PPOPolicy, gym)."""
    try:
        import gym  # noqa: F401
        from tianshou.policy import BasePolicy, PPOPolicy  # noqa: F401
    except ImportError:  # absent, or a tianshou without these names (1.x, 2.x)
        return False
    return True


def run_experiment(space, evaluator, strategy, workdir: str | Path = "runs/nni", *, max_trials: int | None = None):
    """`NasExperiment(space, evaluator, strategy).run()` with the project's NNI 3.0 fixes (nni_compat: resumable
    checkpoints on torch >= 2.6, NNI's files and manifest entry under `workdir`, stopped after an error too); a
    one-shot strategy trains `space` in place; a multi-trial one trains each sample in this process (NNI's sequential
    engine: no NNI manager, no web UI). `max_trials` bounds a multi-trial strategy. Returns the experiment
    (`export_top_models(formatter="dict")` gives the best architectures)."""
    from nni.nas.experiment import NasExperimentConfig
    from nni.nas.oneshot.pytorch.strategy import OneShotStrategy

    from .nni_compat import (
        clear_trial_parameter,
        fresh_evaluator_per_trial,
        patch_enas_loader,
        patch_grid_search,
        run_nas_experiment,
    )

    check_strategy(strategy)
    patch = {"ENAS": patch_enas_loader, "GridSearch": patch_grid_search}.get(type(strategy).__name__)
    if patch is not None:
        patch(strategy)
    config = None
    if not isinstance(strategy, OneShotStrategy):
        config = NasExperimentConfig("sequential", "raw")
        fresh_evaluator_per_trial(evaluator)  # each trial its own module and Trainer, as NNI's other engines do
    try:
        return run_nas_experiment(space, evaluator, strategy, Path(workdir), config, max_trials=max_trials)
    finally:
        if config is not None:
            clear_trial_parameter()  # the last sample stays NNI's current parameter otherwise (nni_compat)


def best_arch_json(arch, space, *, strategy: str, score: float | None = None,
                   metric: str = "val_mlm_acc (NNI strategy)") -> dict:
    """The best-architecture record `lvbert search run` writes (best_arch.json: arch, compact, score, metric,
    params, backbone_flops, strategy, space, size), for an architecture an NNI strategy exported (a dict
    {"layer00": "sa", ...} or any spelling `Arch.parse` reads). `lvbert export/pretrain/finetune --arch` read it."""
    from .arch import Arch
    from .info import param_counts
    from .search.cost import CostModel

    arch = Arch.parse(arch, space.spec)
    params = param_counts(space.config, arch)
    return {"arch": arch.dict, "compact": arch.compact, "score": score, "metric": metric,
            "params": {k: params[k] for k in ("backbone", "word_embedding", "other_embedding", "mlm_head", "total")},
            "backbone_flops": CostModel(space.config, space.spec).flops(arch), "strategy": strategy,
            "space": space.spec.name, "size": getattr(space, "size", None) or space.spec.size}


def write_best_arch(path: str | Path, arch, space, **kwargs) -> Path:
    """Write `best_arch_json(arch, space, **kwargs)` to `path` (parents made); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(best_arch_json(arch, space, **kwargs), indent=2) + "\n", encoding="utf-8")
    return path


def fixed_model(space, arch):
    """The fixed model of `arch` (a dict, a best_arch.json path or any `Arch.parse` spelling) in `space`, with the
    space's current weights (a trained supernet's: the chosen layers alias its parameters; copy.deepcopy before
    training it on its own). Its forward is the MLM model's."""
    from .arch import Arch

    return space.freeze(Arch.parse(arch, space.spec).dict).eval()


def export_model_dir(space, arch, out: str | Path, tokenizer_dir: str | Path, *, overwrite: bool = False) -> Path:
    """Write the fixed model of `arch` with the space's (trained supernet's) weights as a Hugging Face directory,
    as `lvbert export` does (config.json, model.safetensors, tokenizer, code); returns its path."""
    from .arch import Arch
    from .hf.save import check_model_dir, save_hf_model

    check_model_dir(Path(out), overwrite)
    arch = Arch.parse(arch, space.spec)
    return save_hf_model(fixed_model(space, arch), space.config, arch, tokenizer_dir, out, overwrite=overwrite,
                         provenance={"source": "python-api", "space": space.spec.to_dict()})
