"""The classification task an IOT run is fine-tuned on (`lvbert study iot-finetune`): loaded, checked against the
run (a classification task within its position table) and encoded with the run's tokenizer."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
from transformers import AutoTokenizer

from ..errors import UserError
from ..finetune.module import encode
from ..finetune.tasks import load_task
from ..rundir import RunDir


def task_rows(run: Path, name: str | None, data: str | None, columns: tuple, max_length: int | None,
              n_train: int | None, n_dev: int | None):
    """(task, tokenizer, max length, train rows, {dev name: rows}) for the IOT run `run`: `columns` (text, text
    pair, label) of the user's files, `n_train`/`n_dev` examples spread over each split (`first`; None: all); one
    line when unusable."""
    if not name:
        raise UserError("no task given (--task, e.g. sotu-era)")
    task = load_task(name, data, None, *columns)
    if task.kind != "classification":
        raise UserError(f"--task {name} is a {task.kind} task; IOT fine-tuning takes classification tasks "
                        "(an instance is right or wrong under each order)")
    positions = RunDir(run, "IOT").cfg.max_position
    length = max_length or min(128, positions)
    if length > positions:
        raise UserError(f"--max-length {length} exceeds the model's position table ({positions})")
    tok = AutoTokenizer.from_pretrained(str(run / "tokenizer"))
    dev = {dev_name: encode(tok, first(s, n_dev), task, length, train=False) for dev_name, s in task.dev.items()}
    return task, tok, length, encode(tok, first(task.train, n_train), task, length, train=True), dev


def first(split, n: int | None):
    """n examples spread evenly over a split (every len/n-th: splits sorted by label keep every label); all: None."""
    if not n or n >= len(split):
        return split
    idx = np.linspace(0, len(split) - 1, n).round().astype(int).tolist()
    return dataclasses.replace(split, text_a=[split.text_a[i] for i in idx], labels=[split.labels[i] for i in idx],
                               text_b=[split.text_b[i] for i in idx] if split.text_b else None)
