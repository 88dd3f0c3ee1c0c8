"""`lvbert info`: parameter counts of an architecture at a size (reproduces LV-BERT Tables 1-2)."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

from .arch import Arch
from .config import ModelConfig, SpaceSpec, load_size, load_space
from .errors import UserError
from .options import opt


def _numel(module) -> int:
    return sum(p.numel() for p in module.parameters())


def param_counts(cfg: ModelConfig, types) -> dict:
    """Parameter counts of an Arch (or a list of layer types) without building the whole model: one module per
    distinct layer type."""
    from .body import Embeddings, MLMHead
    from .layers import build_layer

    per_type = {t: _numel(build_layer(t, cfg)) for t in sorted(set(types))}
    uses = Counter(types)
    backbone = sum(per_type[t] * (1 if cfg.sharing == "type" else uses[t]) for t in per_type)
    emb = Embeddings(cfg)
    word = emb.word.weight.numel()
    head = _numel(MLMHead(cfg, emb.word))  # tied decoder weight not counted again
    return {
        "word_embedding": word,
        "other_embedding": _numel(emb) - word,
        "backbone": backbone,
        "mlm_head": head,
        "total": _numel(emb) + backbone + head,
        "per_layer": per_type,
        "layer_counts": dict(uses),
    }


def describe(arch, size: str, space: SpaceSpec, **overrides) -> dict:
    cfg = load_size(size, **overrides)
    arch = Arch.parse(arch, space)
    return {
        "arch": arch.compact,
        "arch_dict": arch.dict,
        "size": size,
        "space": space.name,
        "config": cfg.to_dict(),
        "params": param_counts(cfg, arch),
    }


@dataclass(frozen=True)
class InfoOptions:
    arch: str | None = opt(None, "compact string (ccsf...), digits (0/1/2), name (bert, dynamicconv, sandwich, "
                                 "lvbert-small), NNI dict JSON or a best_arch.json path (required)")
    size: str = opt("small", "tiny | small | medium | base (default small; defined in a checkout's "
                             "search_spaces/sizes.yaml, in an installed package's nni_lvbert/search_spaces/sizes.yaml)")
    space: str = opt("lvbert", "search-space name or YAML path")
    vocab_size: int | None = opt(None, "override the size's vocabulary")
    sharing: str | None = opt(None, "cross-layer sharing (ALBERT)", choices=["none", "type"])


def register(sub) -> None:
    from .cliargs import add_command

    add_command(sub, "info", "parameter counts of an architecture at a model size", InfoOptions, run)


def run(args) -> int:
    if not args.arch:
        raise UserError("give the architecture with --arch (letters such as ccsf..., a name such as bert, or a "
                        "best_arch.json)")
    info = describe(args.arch, args.size, load_space(args.space), vocab_size=args.vocab_size, sharing=args.sharing)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    p = info["params"]
    m = lambda n: f"{n / 1e6:.2f}M"
    print(f"arch      {info['arch']}  ({', '.join(f'{t}x{n}' for t, n in p['layer_counts'].items())})")
    print(f"size      {args.size}  (H{info['config']['hidden_size']}, E{info['config']['embedding_size']}, "
          f"FF{info['config']['ff_size']}, vocab {info['config']['vocab_size']})")
    print(f"word emb  {m(p['word_embedding'])}")
    print(f"backbone  {m(p['backbone'])}")
    print(f"other     {m(p['other_embedding'])} embeddings + {m(p['mlm_head'])} MLM head")
    print(f"total     {m(p['total'])}")
    return 0
