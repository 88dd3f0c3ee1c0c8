"""Benchmark (not a test): one ELECTRA pre-training step vs one MLM step of the same discriminator, and vs
`transformers`' ElectraForPreTraining + ElectraForMaskedLM generator of the same shape.

Same shapes on every side: the interleaved `bert` arch (12 x [self-attention, feed-forward]) at --size (small: H256,
4 heads, FF 1024, E128, vocab 30522), generator at 1/4 hidden (64, 1 head, FF 256) sharing the token / position /
segment embeddings and embedding LayerNorm, own E->H projections; the same ELECTRA-masked batch (15 %, 85 %
[MASK]); loss = generator MLM + 50 x discriminator BCE; Gumbel-max sampling; AdamW + global-norm clipping 1.0;
dropout 0.1. The transformers pair is what its model classes give: the generator computes logits (and the loss) at
every position, ours only at the masked ones.

Step times: the three sides live in one process and their training steps alternate (noise on a shared machine hits
every side alike); the median of --steps per side. Peak RSS: each side in a process of its own. Prints one JSON
object with the ratios side by side.
    python benchmarks/bench_pretrain.py [--size small] [--batch 32] [--seq 128] [--steps 8] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import warnings

from common import interleaved_medians  # this folder is on sys.path when run as a script

warnings.filterwarnings("ignore")
MODES = ("electra", "mlm", "hf-electra")
CLS, SEP, MASK = 2, 3, 4


def masked_batch(vocab: int, batch: int, seq: int) -> dict:
    import torch

    from nni_lvbert.pretrain.data import electra_mask, max_predictions

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab, (batch, seq), generator=g)
    ids[:, 0], ids[:, seq // 2], ids[:, -1] = CLS, SEP, SEP
    types = torch.zeros_like(ids)
    types[:, seq // 2 + 1:] = 1
    attn = torch.ones_like(ids)
    u = torch.rand((2, batch, seq), generator=g)
    masked, labels = electra_mask(ids, attn, [0, CLS, SEP, MASK], MASK, max_predictions(seq), u[0], u[1])
    return {"input_ids": masked, "labels": labels, "attention_mask": attn, "token_type_ids": types}


def hf_pair(cfg, gen_cfg):
    """transformers' ELECTRA discriminator + generator with the shapes of ours, embeddings shared."""
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

    def conf(c):
        return ElectraConfig(vocab_size=c.vocab_size, embedding_size=c.embedding_size, hidden_size=c.hidden_size,
                             num_hidden_layers=12, num_attention_heads=c.num_heads, intermediate_size=c.ff_size,
                             hidden_act="gelu", hidden_dropout_prob=c.dropout, attention_probs_dropout_prob=c.dropout,
                             max_position_embeddings=c.max_position, type_vocab_size=c.type_vocab_size,
                             layer_norm_eps=c.layer_norm_eps)

    disc, gen = ElectraForPreTraining(conf(cfg)), ElectraForMaskedLM(conf(gen_cfg))
    gen.electra.embeddings = disc.electra.embeddings  # shared word/position/segment embeddings + LayerNorm
    gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight  # tied decoder
    return disc, gen


def build(mode: str, size: str, batch: int, seq: int):
    """(modules, params, one training step, attention implementation) of one side, seeded."""
    import torch

    from nni_lvbert.config import load_size
    from nni_lvbert.pretrain.objectives import ElectraObjective, MLMObjective, generator_config, gumbel_max

    torch.manual_seed(0)
    cfg = load_size(size, max_length=seq)
    gen_cfg = generator_config(cfg, 0.25)
    data = masked_batch(cfg.vocab_size, batch, seq)
    if mode == "hf-electra":
        disc, gen = hf_pair(cfg, gen_cfg)
        modules = torch.nn.ModuleList([disc, gen])

        def loss_fn():
            where = data["labels"] != -100
            original = torch.where(where, data["labels"], data["input_ids"])
            g = gen(input_ids=data["input_ids"], attention_mask=data["attention_mask"],
                    token_type_ids=data["token_type_ids"], labels=data["labels"])
            fake = original.clone()
            fake[where] = gumbel_max(g.logits[where])
            replaced = (fake != original).long()
            d = disc(input_ids=fake, attention_mask=data["attention_mask"], token_type_ids=data["token_type_ids"],
                     labels=replaced)
            return g.loss + 50.0 * d.loss
        impl = getattr(disc.config, "_attn_implementation", None)
    else:
        modules = ElectraObjective(cfg, "bert", 0.25) if mode == "electra" else MLMObjective(cfg, "bert")
        impl = "torch sdpa (nni_lvbert layers)"

        def loss_fn():
            return modules(data)["loss"]

    modules.train()
    params = list(modules.parameters())  # shared tensors once
    opt = torch.optim.AdamW(params, lr=1e-4, eps=1e-6, weight_decay=0.01)

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn().backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    return modules, params, step, impl


def peak_rss(mode: str, size: str, batch: int, seq: int, threads: int) -> float:
    """Peak RSS (MB) of a process that builds one side and trains it 3 steps (optimizer state included)."""
    import torch

    torch.set_num_threads(threads)
    _, _, step, _ = build(mode, size, batch, seq)
    for _ in range(3):
        step()
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def step_times(size: str, batch: int, seq: int, steps: int, threads: int) -> dict:
    """All sides in this process, their training steps alternating (noise hits every side alike): median step time
    of each after 2 warm-up steps (optimizer state, allocator)."""
    import torch

    torch.set_num_threads(threads)
    sides = {mode: build(mode, size, batch, seq) for mode in MODES}
    medians = interleaved_medians({mode: step for mode, (_, _, step, _) in sides.items()}, steps, warmup=2)
    out = {}
    for mode, (_, params, _, impl) in sides.items():
        step_s = medians[mode]
        out[mode] = {"mode": mode, "params": sum(p.numel() for p in params), "attention": impl,
                     "step_s": round(step_s, 4), "tokens_per_s": round(batch * seq / step_s, 1)}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="small")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rss", choices=MODES, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rss:
        print(json.dumps({"peak_rss_mb": peak_rss(a.rss, a.size, a.batch, a.seq, a.threads)}))
        return
    common = ["--size", a.size, "--batch", str(a.batch), "--seq", str(a.seq), "--threads", str(a.threads)]
    rss = {}
    for mode in MODES:  # each side's memory in a process of its own, started while this one is still small
        out = subprocess.run([sys.executable, __file__, "--rss", mode, *common], capture_output=True, text=True,
                             check=True)  # (Linux carries a process's peak RSS over into the programs it starts)
        rss[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    res = step_times(a.size, a.batch, a.seq, a.steps, a.threads)
    for mode in MODES:
        res[mode].update(rss[mode])
    e, m, h = res["electra"], res["mlm"], res["hf-electra"]
    step_ratio = e["step_s"] / m["step_s"]
    speed_ratio = e["tokens_per_s"] / h["tokens_per_s"]
    rss_ratio = e["peak_rss_mb"] / h["peak_rss_mb"]
    print(json.dumps({
        "shape": f"bert (12 x sa,ff) at {a.size}, generator 1/4 hidden, batch {a.batch} x seq {a.seq}, "
                 f"{a.threads} threads, {a.steps} timed steps per side",
        **res,
        "electra_step_over_mlm_step": round(step_ratio, 3),
        "tokens_per_s_ours_over_transformers": round(speed_ratio, 3),
        "peak_rss_ours_over_transformers": round(rss_ratio, 3),
        "targets": {"electra_step_over_mlm_step": "<= 1.35", "tokens_per_s_ours_over_transformers": ">= 1.5",
                    "peak_rss_ours_over_transformers": "<= 1.0"},
        "met": {"electra_step_over_mlm_step": step_ratio <= 1.35, "tokens_per_s_ours_over_transformers":
                speed_ratio >= 1.5, "peak_rss_ours_over_transformers": rss_ratio <= 1.0},
    }, indent=2))


if __name__ == "__main__":
    main()
