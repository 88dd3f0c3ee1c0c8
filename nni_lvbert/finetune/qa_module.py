"""The Lightning side of extractive QA (SQuAD): window batches, dev logits gathered per window and turned into
answers and EM/F1 after every validation, and `QAAdapter`, the task adapter `run.run_one` trains it through."""
from __future__ import annotations

import statistics

import numpy as np
import torch

from ..data.masking import pad_sequences
from . import squad as S
from .module import FinetuneData, FinetuneModule

TRAIN_KEYS = ("start_positions", "end_positions")


def qa_collate(rows: list[dict], pad_id: int) -> dict:
    """Dynamic padding; training rows keep their start/end positions, dev rows their feature index."""
    batch = pad_sequences(rows, {"input_ids": pad_id, "token_type_ids": 0})
    if "start_positions" in rows[0]:
        for key in TRAIN_KEYS:
            batch[key] = torch.tensor([r[key] for r in rows], dtype=torch.long)
    else:
        batch["feature_index"] = torch.tensor([r["feature_index"] for r in rows], dtype=torch.long)
    return batch


class QAData(FinetuneData):
    def __init__(self, train_rows, dev_features: dict[str, list], batch_size, seed, pad_id, num_workers=0):
        dev_rows = {name: [{"input_ids": f["input_ids"], "token_type_ids": f["token_type_ids"], "feature_index": k}
                           for k, f in enumerate(feats)] for name, feats in dev_features.items()}
        super().__init__(train_rows, dev_rows, batch_size, seed, pad_id, False, num_workers=num_workers)

    def _collate(self, rows):
        return qa_collate(rows, self.pad_id)


class QAModule(FinetuneModule):
    """FinetuneModule for a transformers question-answering model; the dev score is the mean of EM and F1."""

    def __init__(self, model, task, dev_features: dict[str, list], post: dict, **kw):
        super().__init__(model, task, list(dev_features), **kw)
        self.dev_features, self.post = dev_features, post

    def training_step(self, batch, batch_idx):
        loss = self.model(**batch).loss
        self.log("train_loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        index = batch.pop("feature_index").cpu().numpy()
        out = self.model(**batch)
        lengths = batch["attention_mask"].sum(-1).cpu().numpy()
        s, e = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
        store = self._preds.setdefault(dataloader_idx, {})
        for j, k in enumerate(index):
            store[int(k)] = (s[j, :lengths[j]], e[j, :lengths[j]])

    def _record(self):
        dev = {}
        for i, name in enumerate(self.dev_names):
            feats, got = self.dev_features[name], self._preds.get(i, {})
            starts = [got[k][0] if k in got else np.zeros(len(f["input_ids"])) for k, f in enumerate(feats)]
            ends = [got[k][1] if k in got else np.zeros(len(f["input_ids"])) for k, f in enumerate(feats)]
            examples = self.task.dev[name]
            preds = S.postprocess(examples, feats, starts, ends, self.task.v2, **self.post)
            dev[name] = S.evaluate(examples, preds, self.task.v2)
        self._preds, self._labels = {}, {}
        self._remember(statistics.fmean(statistics.fmean((m["em"], m["f1"])) for m in dev.values()), dev)


class QAAdapter:
    """Fine-tuning's task adapter for extractive QA (SQuAD v1.1/v2.0): question/context windows, a
    question-answering model and `QAModule` (see `module.SequenceAdapter`)."""

    qa = True

    def data(self, opts, tok, task: S.QATaskData, seed: int):
        train = task.train[:opts.max_train_examples] if opts.max_train_examples else task.train
        win = {"max_length": opts.max_length, "max_query_length": opts.max_query_length, "doc_stride": opts.doc_stride}
        train_rows = S.featurize(tok, train, train=True, **win)
        dev_features = {n: S.featurize(tok, exs, train=False, **win) for n, exs in task.dev.items()}
        dm = QAData(train_rows, dev_features, opts.batch_size, seed, tok.pad_token_id,
                    num_workers=opts.hardware.num_workers)
        dm.dev_features = dev_features
        dm.post = {"n_best": opts.n_best, "max_answer_length": opts.max_answer_length,
                   "null_threshold": opts.null_threshold}
        return (dm, {"train_examples": len(train), "train_windows": len(train_rows)},
                f"{len(train)} questions → {len(train_rows)} training windows")

    def load_model(self, source: str, task):
        from transformers import AutoModelForQuestionAnswering

        return AutoModelForQuestionAnswering.from_pretrained(source)

    def module(self, model, task, dm, **hp):
        return QAModule(model, task, dm.dev_features, dm.post, **hp)
