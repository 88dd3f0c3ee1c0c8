"""Every workaround for NNI 3.0 behaviour, in this package (checked with nni 3.0, torch 2.13, pytorch-lightning 2.6):
`experiment.py` (nnictl's lock, in-process NasExperiments, their manifest entries, nnictl's experiments),
`trials.py` (nnictl trials and tuners), `remote.py` (the `remote` training service over SSH), `strategies.py`
(multi-trial and one-shot strategies), and here the import warning. Everything is importable from
`nni_lvbert.nni_compat`.

Each block says which NNI 3.0 behaviour it covers and how to drop it. After an NNI upgrade run
`pytest tests/test_nni_compat.py` first: it checks that each workaround still does what it claims and that the NNI
internals it touches still exist, so a changed internal fails there, loudly. Importing this package imports no NNI
(the CLI installs the warning filter before any NNI import). The project's own NNI classes live with their stage
(supernet/strategy.py: the seeded SPOS strategy; search/strategy.py: strategies and the sample evaluator;
search/nnictl.py: reading a stopped experiment's trials); their blocks here say which NNI behaviour they work around.
"""
from __future__ import annotations

import warnings

from .experiment import (  # noqa: F401  (re-exports; tests check _DROP_NO_CHECKPOINT_CALLBACK is installed)
    _DROP_NO_CHECKPOINT_CALLBACK,
    NNI_FAILURE_LOGGERS,
    NO_CHECKPOINT_CALLBACK,
    DropMessage,
    DropWhileInterrupted,
    PidFileLock,
    WeightsOnlyTorchSerializer,
    check_nnictl_filelock,
    experiment_dir,
    experiment_id_in,
    manifest_in,
    quiet_nni_logging,
    run_nas_experiment,
    use_pid_file_lock,
    use_weights_only_serializer,
)
from .remote import REMOTE_WORKER_ENV, remote_trial_keeper_pids  # noqa: F401
from .strategies import (  # noqa: F401
    clear_trial_parameter,
    epoch_end_not_forwarded,
    extend_lambda_lr,
    fresh_evaluator_per_trial,
    in_multi_trial,
    keep_already_mutated,
    patch_enas_loader,
    patch_grid_search,
    strategy_interrupted,
)
from .trials import (  # noqa: F401
    TrialReporter,
    TunerGaveUp,
    in_nni_trial,
    stop_when_tuner_gives_up,
    trial_error_line,
    trial_stderr,
    watch_resumed_trials,
)

# --- Import warning --------------------------------------------------------------------------------------------
# NNI 3.0 regenerates its torch.nn stub (nni/nas/nn/pytorch/layers.py) when torch's version differs from the stub's
# and warns "<class ...> is found to be not a nn.Module" (RuntimeWarning) for each non-Module class in torch.nn
# (torch 2.13: Buffer, LinearCrossEntropyOptions). Harmless. pyproject.toml's pytest filterwarnings repeats it.
# Drop when: `python -W error::RuntimeWarning -c "import nni.nas.nn.pytorch"` passes (drop pyproject's line too).
NOT_A_MODULE_WARNING = ".*is found to be not a nn.Module.*"


def ignore_nni_import_warnings() -> None:
    warnings.filterwarnings("ignore", message=NOT_A_MODULE_WARNING)
