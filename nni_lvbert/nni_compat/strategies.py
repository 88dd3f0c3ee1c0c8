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


# --- Any NNI strategy with the project's Lightning modules ---------------------------------------------------------
# NNI 3.0's BaseOneShotLightningModule (RandomOneShot, DARTS, GumbelDARTS, Proxyless, ENAS) forwards
# on_validation_start/end to the evaluator's module but not on_validation_epoch_start/end, and Lightning refuses
# `self.log` in on_validation_end: a module that logs its epoch's metrics at epoch end never logs them under a stock
# one-shot strategy (MLMModule then ends its epoch at the last validation batch, see epoch_end_not_forwarded).
# Drop when: BaseOneShotLightningModule forwards both hooks (tests/test_nni_compat.py checks it does not).
def epoch_end_not_forwarded(module) -> bool:
    """True when `module` is trained inside a wrapper (NNI's one-shot module) whose on_validation_epoch_end is
    Lightning's no-op, so that the module's own on_validation_epoch_end will not run."""
    import pytorch_lightning as pl

    wrapper = module.trainer.lightning_module
    return wrapper is not module and \
        type(wrapper).on_validation_epoch_end is pl.LightningModule.on_validation_epoch_end


# NNI 3.0's multi-trial strategies run each sample in process (SequentialExecutionEngine) and take its metric from
# nni.report_final_result, through a channel whose current parameter is the sample (an ExecutableModelSpace); an
# nnictl trial's parameter is a dict, and outside any trial it is None. A module reports only in the first case, so
# the project's own nnictl trials (which report through TrialReporter) are not reported twice.
# Drop when: NNI's Lightning evaluator takes the metric from the trainer itself.
def in_multi_trial() -> bool:
    """True while NNI's sequential engine evaluates one sample of a multi-trial strategy in this process."""
    import nni
    from nni.nas.space import ExecutableModelSpace

    return isinstance(nni.get_current_parameter(), ExecutableModelSpace)


# NNI 3.0's sequential engine leaves the last sample as the process's current trial parameter (nni.trial._params)
# after the experiment ends, so `in_multi_trial` would stay True for whatever the process trains next (a second
# experiment's one-shot training, a plain Lightning fit) and its modules would report to a finished experiment.
# Drop when: NNI clears the parameter when a sequential experiment ends.
def clear_trial_parameter() -> None:
    """Forget the current trial parameter NNI's sequential engine left behind (see above)."""
    import nni.trial

    nni.trial._params = None


# NNI 3.0's ENAS trains on a ConcatLoader of the train and validation loaders and tells their batches apart by the
# (batch, batch_idx, dataloader_idx) triple Lightning 2.0 handed to training_step; Lightning >= 2.1 unpacks the
# triple and passes the batch alone, so ENAS.training_step fails ("too many values to unpack"). The patched
# loader yields the whole triple as the batch, which Lightning then hands over intact.
# Drop when: ENAS.train_dataloader works with the pinned Lightning (tests/test_python_api.py runs ENAS).
def patch_enas_loader(strategy) -> None:
    """Make `strategy` (an ENAS instance) hand ENAS's training_step its (batch, batch_idx, dataloader_idx)."""
    original = strategy.train_dataloader

    def train_dataloader(train_dataloader_fn, val_dataloader_fn):
        loader = original(train_dataloader_fn, val_dataloader_fn)
        loader.__class__ = _triple_loader_class(type(loader))
        return loader

    strategy.train_dataloader = train_dataloader


def _triple_loader_class(base):
    class TripleAsBatch(base):
        def __next__(self):
            triple = super().__next__()
            return triple, triple[1], triple[2]

    return TripleAsBatch


# NNI 3.0's GridSearch yields models whose `sample` is the very dict Mutable.grid keeps filling: grid() pops the
# labels again once the next model is asked for, so a model the engine runs after that is frozen from an empty sample
# ("SampleMissingError: Label layer00 is missing from sample"). Each yielded model gets its own copy here.
# Drop when: GridSearch's first model runs under the sequential engine (tests/test_python_api.py runs GridSearch).
def patch_grid_search(strategy) -> None:
    """Give every model `strategy` (a GridSearch instance) yields a sample of its own."""
    original = strategy._grid_generator

    def grid_generator(model_space):
        for model in original(model_space):
            model.sample = dict(model.sample)
            yield model

    strategy._grid_generator = grid_generator


# NNI 3.0's sequential engine evaluates every sample of a multi-trial strategy with the one evaluator object: its
# LightningModule and Trainer are reused, so the second trial's trainer.fit starts at the first's max_steps and trains
# nothing, and the module's state carries over. NNI's other engines rebuild the evaluator in each trial process from
# its trace (nni.trace's recorded arguments); fresh_evaluator_per_trial does the same in process.
# Drop when: SequentialExecutionEngine rebuilds the evaluator per model (tests/test_python_api.py checks each trial
# trains its steps).
def fresh_evaluator_per_trial(evaluator) -> None:
    """Make `evaluator` (NNI's Lightning) evaluate each model with a new instance rebuilt from its trace."""
    def _execute(model):
        return rebuilt(evaluator).evaluate(model.executable_model())

    evaluator._execute = _execute


def rebuilt(obj):
    """A new instance of a traced object made from its recorded arguments (traced arguments rebuilt too); anything
    else (a DataModule, a callback) as it is."""
    from nni.common.serializer import is_traceable

    if not is_traceable(obj, must_be_instance=True):
        return obj
    return type(obj)(*(rebuilt(a) for a in obj.trace_args),  # the traced class: the new instance is traced too
                     **{k: rebuilt(v) for k, v in obj.trace_kwargs.items()})
