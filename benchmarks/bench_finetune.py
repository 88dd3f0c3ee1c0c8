"""Benchmark (not a test): fine-tuning examples/s of our interleaved `bert` arch vs transformers'
BertForSequenceClassification of the same shape, on the same task, batches and starting weights.

Both models start from one random BERT (HF weights copied into ours with the round-1 oracle mapping,
tests/test_model.py), train with the same recipe (LLRD groups, AdamW, warm-up + linear decay) on the same
dynamically padded batches of the embedded `sotu-era` task, and are scored on its dev set. HF's classifier reads a
pooler (tanh dense on [CLS]) that ours does not have (ELECTRA's head), so the dev metric agrees within noise, not
bit for bit.

    OMP_NUM_THREADS=2 python benchmarks/bench_finetune.py --layers 4 --steps 60
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def copy_weights(hf, ours, n_layers):
    from tests.test_model import copy_hf_bert_into_ours  # the oracle mapping (MLM names)

    class View(torch.nn.Module):  # our backbone under the MLM model's names, without the MLM head
        def __init__(self, backbone):
            super().__init__()
            self.embeddings, self.layers = backbone.embeddings, backbone.layers

        def state_dict(self, *a, **k):
            sd = super().state_dict(*a, **k)
            return {**sd, **{f"head.{n}": None for n in ("dense.weight", "dense.bias", "norm.weight", "norm.bias",
                                                         "bias")}}

        def load_state_dict(self, sd, strict=True):
            return super().load_state_dict({k: v for k, v in sd.items() if not k.startswith("head.")})

    class Donor:  # HF weights with the MLM head entries the mapping expects (unused)
        def __init__(self, m):
            self.m = m

        def state_dict(self):
            sd = dict(self.m.state_dict())
            for n in ("dense.weight", "dense.bias", "LayerNorm.weight", "LayerNorm.bias"):
                sd[f"cls.predictions.transform.{n}"] = None
            sd["cls.predictions.bias"] = None
            return sd

    copy_hf_bert_into_ours(Donor(hf), View(ours.lvbert), n_layers)
    ours.classifier.load_state_dict(hf.classifier.state_dict())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-4)
    args = ap.parse_args()
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    from nni_lvbert.data import prepare
    from nni_lvbert.finetune.module import collate, encode
    from nni_lvbert.finetune.recipe import optimizer_and_schedule
    from nni_lvbert.finetune.tasks import load_task
    from nni_lvbert.hf import LVBertConfig, LVBertForSequenceClassification

    tok = PreTrainedTokenizerFast.from_pretrained(str(prepare(size="tiny").tokenizer_dir))
    task = load_task("sotu-era")
    train = encode(tok, task.train, task, args.max_length, train=True)
    dev = encode(tok, task.dev["dev"], task, args.max_length, train=False)
    H, L = args.hidden, args.layers
    hf = BertForSequenceClassification(BertConfig(
        vocab_size=len(tok), hidden_size=H, num_hidden_layers=L, num_attention_heads=H // 64,
        intermediate_size=4 * H, max_position_embeddings=512, num_labels=task.num_labels,
        pad_token_id=tok.pad_token_id))
    ours = LVBertForSequenceClassification(LVBertConfig(
        layer_types=["sa", "ff"] * L, vocab_size=len(tok), hidden_size=H, embedding_size=H, ff_size=4 * H,
        num_heads=H // 64, max_position=512, num_labels=task.num_labels, pad_token_id=tok.pad_token_id))
    copy_weights(hf, ours, L)
    g = torch.Generator().manual_seed(0)
    order = torch.randperm(len(train), generator=g).tolist()
    batches = [collate([train[i] for i in order[(s * args.batch_size) % len(train):][:args.batch_size]],
                       tok.pad_token_id, False) for s in range(args.steps)]
    dev_batches = [collate(dev[i:i + 128], tok.pad_token_id, False) for i in range(0, len(dev), 128)]
    results = {}
    for name, model in (("ours", ours), ("transformers", hf)):
        torch.manual_seed(0)
        opt, sched = optimizer_and_schedule(model, args.lr, args.steps)
        model.train()
        start = time.perf_counter()
        for b in batches:
            loss = model(**b).loss
            loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
        secs = time.perf_counter() - start
        model.eval()
        correct = 0
        with torch.no_grad():
            for b in dev_batches:
                correct += int((model(**{k: v for k, v in b.items() if k != "labels"}).logits.argmax(-1)
                                == b["labels"]).sum())
        results[name] = {"examples_per_s": round(args.steps * args.batch_size / secs, 1),
                         "train_s": round(secs, 1), "dev_acc": round(100 * correct / len(dev), 2)}
    results["speedup"] = round(results["ours"]["examples_per_s"] / results["transformers"]["examples_per_s"], 2)
    print(json.dumps({"config": vars(args), "threads": torch.get_num_threads(), **results}, indent=1))


if __name__ == "__main__":
    main()
