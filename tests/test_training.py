"""The trainer conventions of trainer.build_trainer that every Lightning command shares."""
from __future__ import annotations

import pytest


def _trainer(tmp_path, progress: bool, model_summary: bool = False):
    from nni_lvbert.train_options import TrainOptions
    from nni_lvbert.trainer import build_trainer

    opts = TrainOptions.flat(max_steps=2, batch_size=1, val_every=1, val_batches=1, ckpt_every=1, accelerator="cpu",
                             progress=progress, model_summary=model_summary)
    trainer, _ = build_trainer(tmp_path / "t", opts)
    return trainer


def test_model_summary_has_no_column_of_zero_flops(tmp_path, caplog):
    """Lightning's summary counts FLOPs only through an example input, which our modules do not have: no FLOPs
    column of zeros and no '0 Total Flops' line; with an example input the FLOPs stay (and are not zero)."""
    import logging

    import torch
    from pytorch_lightning.demos.boring_classes import BoringModel

    tables = []
    for example in (False, True):
        model = BoringModel()
        model.example_input_array = torch.randn(2, 32) if example else None
        caplog.clear()
        with caplog.at_level(logging.INFO):
            _trainer(tmp_path / str(example), progress=False, model_summary=True).fit(model)
        (table,) = [r.getMessage() for r in caplog.records if "Total params" in r.getMessage()]
        tables.append(table)
        assert not [r for r in caplog.records if "already configured" in r.getMessage()]  # no note about ours
    assert "FLOPs" not in tables[0] and "Flops" not in tables[0] and "Trainable params" in tables[0]
    assert "FLOPs" in tables[1] and "Total Flops" in tables[1] and "0         Total Flops" not in tables[1]


@pytest.mark.parametrize("rich", [True, False])
def test_progress_bar_shows_neither_a_negative_epoch_total_nor_the_logger_version(tmp_path, monkeypatch, rich):
    import importlib.util

    from pytorch_lightning.callbacks import RichProgressBar, TQDMProgressBar
    from pytorch_lightning.callbacks.progress import ProgressBar
    from pytorch_lightning.demos.boring_classes import BoringModel

    if not rich:  # as where rich is not installed: Lightning's tqdm bar
        find_spec = importlib.util.find_spec
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: None if name == "rich" else find_spec(name, *a))
    trainer = _trainer(tmp_path, progress=True)
    trainer.fit(BoringModel())  # a real (2-step) fit: Lightning sets max_epochs there
    assert trainer.global_step == 2
    bars = [c for c in trainer.callbacks if isinstance(c, ProgressBar)]
    assert len(bars) == 1 and isinstance(bars[0], RichProgressBar if rich else TQDMProgressBar)
    bar = bars[0]
    assert trainer.max_epochs == -1  # max_steps ends the run
    assert "v_num" not in bar.get_metrics(trainer, None)
    if rich:
        # Lightning 2.6's own description: 'Epoch 0/-2' (the method we override must still exist and be used)
        assert "/-2" in RichProgressBar._get_train_description(bar, 0)
        assert bar._get_train_description(3).strip() == "Epoch 3"


def test_no_progress_bar_with_no_progress(tmp_path):
    from pytorch_lightning.callbacks.progress import ProgressBar

    trainer = _trainer(tmp_path, progress=False)
    assert not any(isinstance(c, ProgressBar) for c in trainer.callbacks)
    assert trainer.progress_bar_callback is None


def test_lightning_start_up_noise_is_dropped_and_nothing_else(tmp_path, caplog):
    import logging
    import warnings

    from pytorch_lightning import Trainer
    from torch.utils import _pytree

    from nni_lvbert import trainer as training

    with warnings.catch_warnings(record=True) as before:
        warnings.simplefilter("always")
        _pytree.LeafSpec()  # what Lightning's _pytree.py builds: torch warns
    assert any("LeafSpec" in str(w.message) for w in before)

    with warnings.catch_warnings(record=True) as after:
        warnings.simplefilter("always")
        training.quiet_lightning()
        _pytree.LeafSpec()
        warnings.warn("another FutureWarning", FutureWarning)
    assert [str(w.message) for w in after] == ["another FutureWarning"]

    log = logging.getLogger("pytorch_lightning.utilities.rank_zero")
    with caplog.at_level(logging.INFO, logger=log.name):
        log.removeFilter(training._DROP_LITLOGGER_TIP)  # as before any build_trainer
        Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, max_steps=1)
        unquieted = [r.getMessage() for r in caplog.records]
        caplog.clear()
        _trainer(tmp_path, progress=False)  # build_trainer quiets Lightning itself
        log.info("another rank-zero line")
    assert training.LITLOGGER_TIP in unquieted  # word for word what Lightning 2.6 logs
    messages = [r.getMessage() for r in caplog.records]
    assert "another rank-zero line" in messages and "GPU available: False, used: False" in messages
    assert not any("litlogger" in m.lower() for m in messages)
