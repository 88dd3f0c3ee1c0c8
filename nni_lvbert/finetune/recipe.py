"""LV-BERT's fine-tuning recipe (Table 6; ELECTRA's configure_finetuning.py, which LV-BERT's code follows).

AdamW (ε 1e-6, weight decay 0.01, none on biases and LayerNorm), 10 % linear warm-up then linear decay to 0,
batch 32, sequence 128; lr 3e-4 for small/medium and 1e-4 for base (2e-4 on SQuAD); epochs 10 for RTE and STS-B,
2 for SQuAD, 3 otherwise.

**Layer-wise learning-rate decay** exactly as the official code (`_get_layer_lrs`): with n = number of blocks
(the 24 slots of LV-BERT are 12 blocks of two slots: block i = slots 2i and 2i+1), a parameter at depth d gets
lr × decay^(n + 2 − d), where embeddings (and their E→H projection) have depth 0, block i depth i + 1 and the task
head depth n + 2. The official quirk: no parameter has depth n + 1 (= 13 for 24 slots), so the top block already
trains at lr × decay² and the head at lr. We keep it (`head_depth` below) so that numbers compare with the paper.
With `sharing="type"` a shared module serves several blocks: it gets the depth of the highest block using it.
BERT-style models (`bert.encoder.layer.<i>`, one layer = one block) get the same grouping.
"""
from __future__ import annotations

import re

LR_SMALL, LR_BASE, LR_BASE_QA = 3e-4, 1e-4, 2e-4
DECAY = 0.8
SLOTS_PER_BLOCK = 2


def default_lr(config, qa: bool = False) -> float:
    """3e-4 for small/medium; for base (hidden >= 768) 1e-4, or 2e-4 on SQuAD."""
    if getattr(config, "hidden_size", 256) < 768:
        return LR_SMALL
    return LR_BASE_QA if qa else LR_BASE


def depths(model) -> tuple[dict[str, int], int]:
    """{parameter name: depth} and the head depth (n_blocks + 2)."""
    config = model.config
    types = getattr(config, "layer_types", None)
    if getattr(config, "model_type", "") == "lvbert":
        n_slots, per = len(types), SLOTS_PER_BLOCK
    else:
        n_slots, per = config.num_hidden_layers, 1
    n_blocks = -(-n_slots // per)
    head = n_blocks + 2
    out = {}
    for name, _ in model.named_parameters():
        m = re.search(r"\.(?:layers|layer)\.(\d+)\.", name)
        s = re.search(r"\.shared\.(\w+)\.", name)
        if m:
            out[name] = int(m.group(1)) // per + 1
        elif s:
            out[name] = max(i for i, t in enumerate(types) if t == s.group(1)) // per + 1
        elif ".embeddings." in name or name.startswith("embeddings."):
            out[name] = 0
        else:
            out[name] = head  # classifier, pooler, qa_outputs: the task head
    return out, head


def param_groups(model, lr: float, weight_decay: float = 0.01, decay: float = DECAY) -> list[dict]:
    """AdamW parameter groups: one per (depth, with/without weight decay), lr × decay^(head − depth)."""
    by_depth, head = depths(model)
    groups: dict[tuple[int, bool], dict] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        d = by_depth[name]
        no_wd = p.ndim == 1  # biases and LayerNorm weights (ELECTRA: "LayerNorm", "layer_norm", "bias")
        g = groups.setdefault((d, no_wd), {"params": [], "names": [], "depth": d,
                                           "lr": lr * decay ** (head - d),
                                           "weight_decay": 0.0 if no_wd else weight_decay})
        g["params"].append(p)
        g["names"].append(name)
    return [groups[k] for k in sorted(groups)]


def optimizer_and_schedule(model, lr, total_steps, warmup_fraction=0.1, weight_decay=0.01, decay=DECAY, eps=1e-6):
    import torch

    from ..trainer import adamw, linear_warmup_decay

    groups = param_groups(model, lr, weight_decay, decay)
    opt = adamw([{k: v for k, v in g.items() if k != "names"} for g in groups], lr=lr, eps=eps, betas=(0.9, 0.999))
    warmup = round(warmup_fraction * total_steps)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, linear_warmup_decay(warmup, total_steps))
