"""NNI 3.0 workarounds in strategies: multi-trial strategies in process, one-shot (SPOS / IOT)."""
from __future__ import annotations

# --- Multi-trial strategies in process ---------------------------------------------------------------------------
# NNI 3.0's ExecutableModelSpace.execute() calls the evaluator's private `_execute(model)`, which instantiates the
# model; search/strategy.py's SampleEvaluator overrides it to score the sample on the shared supernet without building
# anything.
# Strategy.run() swallows KeyboardInterrupt and records it only in the private `_status`.
# Drop when: Evaluator has a public model-free hook and Strategy exposes its status (or re-raises the interrupt).
def strategy_interrupted(strategy) -> bool:
    from nni.nas.strategy.base import StrategyStatus

    return strategy._status == StrategyStatus.INTERRUPTED


# --- One-shot (SPOS / IOT) ---------------------------------------------------------------------------------------
# NNI 3.0's one-shot mutation refuses an already mutated space ("Module ... of type PathSamplingLayer has dangling
# mutables and is not supported"), e.g. a trained supernet from load_supernet handed to IOTStrategy.
# Drop when: RandomOneShot().mutate_model() accepts a mutated space (tests/test_nni_compat.py checks it refuses).
def keep_already_mutated(module, name, memo, mutate_kwargs):
    """Mutation hook: a path-sampling layer is already a supernet module; keep it."""
    from nni.nas.oneshot.pytorch.supermodule.base import BaseSuperNetModule

    return True if isinstance(module, BaseSuperNetModule) else None


# NNI 3.0's one-shot modules add their own parameters only as a separate optimizer
# (BaseOneShotLightningModule.configure_architecture_optimizers). IOT's predictor instead joins the evaluator's
# optimizer as a param group under its LambdaLR schedule; torch has no public way to give a scheduler a new group, so
# this extends LambdaLR's `base_lrs`, `lr_lambdas` and `_last_lr`.
# Drop when: NNI lets a one-shot module extend the evaluator's optimizer, or torch's LRScheduler accepts a new group.
def extend_lambda_lr(sched, optimizer) -> None:
    """Make `sched` (a LambdaLR) drive the group just added to `optimizer` with group 0's lambda."""
    import torch

    if not isinstance(sched, torch.optim.lr_scheduler.LambdaLR):
        raise TypeError(f"IOT can extend a LambdaLR schedule to the predictor, not {type(sched).__name__}")
    group = optimizer.param_groups[-1]
    group["initial_lr"] = group["lr"]
    sched.base_lrs.append(group["lr"])
    sched.lr_lambdas.append(sched.lr_lambdas[0])
    group["lr"] = group["initial_lr"] * sched.lr_lambdas[-1](sched.last_epoch)
    sched._last_lr = [g["lr"] for g in optimizer.param_groups]
