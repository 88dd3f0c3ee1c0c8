"""Benchmark (not a test) and correctness oracle of the fine-tuning loop: our interleaved `bert` arch vs
transformers' BertForSequenceClassification of the same shape, starting from the same weights (the round-1 oracle
mapping, tests/test_model.py::bert_names), on the same task and batches.

Three parts, one JSON:
1. speed: full training steps (forward, backward, AdamW over the layer-wise-decay groups, schedule) of the two models
   alternate on the same dynamically padded batches, dropout 0.1 (the recipe); the median step time of each gives
   examples/s and their ratio (target >= 1.2 on CPU). Ours runs on the real tokens only (layers/rows.py).
2. exact oracle: dropout 0 and the same head on both sides (a linear layer on the final [CLS] state: transformers'
   pooler is replaced by the identity). Each model is fine-tuned by `lvbert finetune`'s own loop
   (`finetune.run.run_one`: its Lightning module, batches, recipe, validation): the dev curves, the logged training
   losses and the final dev logits must agree up to float rounding.
3. within noise: dropout 0.1, several seeds (their dropout masks differ between the two implementations): the dev
   score's median and spread of each side.

Starting weights: --model DIR, an LV-BERT model directory of the `bert` arch with E = H (e.g. the hf/ of
`lvbert pretrain --arch bert --size tiny`), or else a random BERT of --layers x --hidden.
    OMP_NUM_THREADS=2 python benchmarks/bench_finetune.py [--model DIR] [--task sotu-era] [--seeds 0 1 2]
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
warnings.filterwarnings("ignore")


def source_model(args, task):
    """(LV-BERT classifier, tokenizer, layers): from --model or random; dropout set by `twins`."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    import nni_lvbert  # noqa: F401  (Auto registration)
    from nni_lvbert.data import prepare
    from nni_lvbert.hf import LVBertConfig, LVBertForSequenceClassification

    if args.model:
        tok = AutoTokenizer.from_pretrained(args.model)
        model = LVBertForSequenceClassification.from_pretrained(args.model, num_labels=task.num_labels)
        types, cfg = model.config.layer_types, model.config
        if types != ["sa", "ff"] * (len(types) // 2) or cfg.embedding_size != cfg.hidden_size or cfg.sharing != "none":
            sys.exit(f"error: --model {args.model}: the oracle needs the bert arch (sa,ff repeated), E = H and no "
                     "sharing")
        return model, tok, len(types) // 2
    tok = PreTrainedTokenizerFast.from_pretrained(str(prepare(size="tiny").tokenizer_dir))
    h, n = args.hidden, args.layers
    config = LVBertConfig(layer_types=["sa", "ff"] * n, vocab_size=len(tok), hidden_size=h, embedding_size=h,
                          ff_size=4 * h, num_heads=h // 64, max_position=512, num_labels=task.num_labels,
                          pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    return LVBertForSequenceClassification(config), tok, n


def twins(source, n_layers: int, dropout: float, seed: int):
    """(ours, transformers') with the source's encoder weights, one fresh classifier (seeded) on both, `dropout`
    everywhere; transformers' pooler replaced by the identity, so both heads read the final [CLS] state."""
    from transformers import BertConfig, BertForSequenceClassification

    from nni_lvbert.hf import LVBertForSequenceClassification
    from tests.test_model import bert_names

    c = source.config
    ours_cfg = copy.deepcopy(c)
    ours_cfg.dropout = ours_cfg.attention_dropout = ours_cfg.classifier_dropout = dropout
    ours = LVBertForSequenceClassification(ours_cfg)
    state = {k: v for k, v in source.state_dict().items() if not k.startswith("classifier.")}
    torch.manual_seed(seed)
    head = torch.nn.Linear(c.hidden_size, c.num_labels)
    torch.nn.init.normal_(head.weight, std=c.initializer_range)
    torch.nn.init.zeros_(head.bias)
    state.update({"classifier.weight": head.weight.detach(), "classifier.bias": head.bias.detach()})
    ours.load_state_dict(state)
    hf = BertForSequenceClassification(BertConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=n_layers, num_attention_heads=c.num_heads,
        intermediate_size=c.ff_size, hidden_act="gelu", max_position_embeddings=c.max_position,
        type_vocab_size=c.type_vocab_size, layer_norm_eps=c.layer_norm_eps, hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout, classifier_dropout=dropout, num_labels=c.num_labels,
        pad_token_id=c.pad_token_id))
    hf.bert.pooler.dense, hf.bert.pooler.activation = torch.nn.Identity(), torch.nn.Identity()
    names = {k: v for k, v in bert_names(n_layers).items() if not k.startswith("head.")}
    mapped = {hf_name: state[f"lvbert.{ours_name}"] for ours_name, hf_name in names.items()}
    mapped.update({"classifier.weight": state["classifier.weight"], "classifier.bias": state["classifier.bias"]})
    missing, unexpected = hf.load_state_dict(mapped, strict=False)
    if unexpected or any(not k.endswith("position_ids") for k in missing):
        raise RuntimeError(f"oracle mapping incomplete: missing {missing}, unexpected {unexpected}")
    return ours, hf


def speed(source, n_layers, rows, pad_id, args) -> dict:
    """Alternating training steps on the same batches; median step time of each side."""
    from nni_lvbert.finetune.module import collate
    from nni_lvbert.finetune.recipe import optimizer_and_schedule

    g = torch.Generator().manual_seed(0)
    order = torch.randperm(len(rows), generator=g).tolist()
    b = args.batch_size
    batches = [collate([rows[i] for i in order[(s * b) % len(rows):][:b]], pad_id, False)
               for s in range(args.speed_steps)]
    models = dict(zip(("ours", "transformers"), twins(source, n_layers, 0.1, 0)))
    opts = {k: optimizer_and_schedule(m, args.lr, args.speed_steps) for k, m in models.items()}
    times: dict[str, list] = {k: [] for k in models}
    for i, batch in enumerate(batches):
        for name, model in models.items():
            opt, sched = opts[name]
            model.train()
            t = time.perf_counter()
            model(**batch).loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            if i >= 3:
                times[name].append(time.perf_counter() - t)
    step = {k: statistics.median(v) for k, v in times.items()}
    real = sum(int(x["attention_mask"].sum()) for x in batches) / sum(x["attention_mask"].numel() for x in batches)
    return {"steps": len(batches), "real_token_fraction": round(real, 3),
            **{k: {"step_s": round(v, 4), "examples_per_s": round(b / v, 1)} for k, v in step.items()},
            "examples_per_s_ours_over_transformers": round(step["transformers"] / step["ours"], 3)}


def finetune_pair(source, n_layers, tok, task, dropout, seed, args, root: Path) -> dict:
    """Both twins through `lvbert finetune`'s loop; their histories, logged losses and trained models."""
    from nni_lvbert.finetune.run import FinetuneOptions, run_one

    opts = FinetuneOptions(model=args.model or "", tasks=[task.name], seeds=[seed], epochs=args.epochs,
                           max_length=args.max_length, batch_size=args.batch_size, lr=args.lr, progress=False,
                           out=str(root))
    out = {}
    for name, model in zip(("ours", "transformers"), twins(source, n_layers, dropout, seed)):
        path = root / f"{name}-d{dropout}-s{seed}"
        meta = run_one(opts, model.config, tok, task, seed, path, f"[{name} dropout {dropout} seed {seed}]",
                       model=model)
        with open(path / "logs" / "csv" / "metrics.csv") as f:
            losses = {int(r["step"]): float(r["train_loss"]) for r in csv.DictReader(f) if r.get("train_loss")}
        out[name] = {"meta": meta, "losses": losses, "model": model.eval()}
    return out


def dev_logits(model, rows, pad_id):
    from nni_lvbert.finetune.module import collate

    with torch.no_grad():
        return torch.cat([model(**{k: v for k, v in collate(rows[i:i + 128], pad_id, False).items()
                                   if k != "labels"}).logits for i in range(0, len(rows), 128)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="LV-BERT model directory of the bert arch (default: a random BERT)")
    ap.add_argument("--task", default="sotu-era")
    ap.add_argument("--layers", type=int, default=4, help="random BERT: layers (default 4)")
    ap.add_argument("--hidden", type=int, default=256, help="random BERT: hidden size (default 256)")
    ap.add_argument("--speed-steps", type=int, default=40)
    ap.add_argument("--epochs", type=float, default=None, help="fine-tuning epochs (default: the task's)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from nni_lvbert.finetune.module import encode
    from nni_lvbert.finetune.tasks import load_task

    task = load_task(args.task)
    source, tok, n_layers = source_model(args, task)
    args.max_length = min(args.max_length, source.config.max_position)
    train = encode(tok, task.train, task, args.max_length, train=True)
    dev_name, dev_split = next(iter(task.dev.items()))
    dev = encode(tok, dev_split, task, args.max_length, train=False)
    result = {"model": args.model or f"random bert {args.layers} x H{args.hidden}", "task": task.name,
              "threads": torch.get_num_threads(), "config": vars(args),
              "speed": speed(source, n_layers, train, tok.pad_token_id, args)}
    # Lightning prints its model summary on stdout: keep stdout for the JSON
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):
        exact = finetune_pair(source, n_layers, tok, task, 0.0, args.seeds[0], args, Path(tmp))
        o, t = exact["ours"], exact["transformers"]
        lo, lt = dev_logits(o["model"], dev, tok.pad_token_id), dev_logits(t["model"], dev, tok.pad_token_id)
        steps = sorted(set(o["losses"]) & set(t["losses"]))
        result["exact_oracle"] = {
            "dropout": 0.0, "seed": args.seeds[0], "steps": o["meta"]["steps"],
            "dev_curve": {k: [h["score"] for h in exact[k]["meta"]["history"]] for k in exact},
            "max_train_loss_diff": max(abs(o["losses"][s] - t["losses"][s]) for s in steps),
            "logged_losses_compared": len(steps),
            "final_dev_logits_max_abs_diff": float((lo - lt).abs().max()),
            "final_dev_prediction_agreement": float((lo.argmax(-1) == lt.argmax(-1)).float().mean()),
            "dev_set": dev_name}
        per_seed: dict[str, list] = {"ours": [], "transformers": []}
        for seed in args.seeds:
            pair = finetune_pair(source, n_layers, tok, task, 0.1, seed, args, Path(tmp))
            for k, scores in per_seed.items():
                scores.append(pair[k]["meta"]["score"])
    med = {k: statistics.median(v) for k, v in per_seed.items()}
    spread = {k: max(v) - min(v) for k, v in per_seed.items()}
    result["within_noise"] = {
        "dropout": 0.1, "seeds": args.seeds, "dev_scores": per_seed, "median": med, "spread": spread,
        "median_diff": round(med["ours"] - med["transformers"], 3),
        "within_seed_spread": abs(med["ours"] - med["transformers"]) <= max(spread.values())}
    result["targets"] = {"examples_per_s_ours_over_transformers": ">= 1.2",
                         "met": result["speed"]["examples_per_s_ours_over_transformers"] >= 1.2}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
