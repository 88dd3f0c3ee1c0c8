"""A tiny supernet run directory for search tests, built without the supernet trainer.

hidden 32, 6 slots of dc/sa/ff/glu, ~500-token vocabulary, sequences of 32 tokens; trained for a few dozen SPOS
steps with a plain torch loop so that candidates get different (non-zero) MLM accuracies.
"""
from __future__ import annotations

import json
import lzma
from pathlib import Path

import numpy as np
import pytest
import torch

from nni_lvbert.cli import main
from nni_lvbert.config import SpaceSpec
from nni_lvbert.data.corpus import EMBEDDED_DIR
from tests.conftest import tiny_config

SLOTS = 6


def wiki_texts(n: int) -> list[str]:
    out = []
    with lzma.open(EMBEDDED_DIR / "wikipedia_vital_en.jsonl.xz", "rt", encoding="utf-8") as f:
        for line in f:
            out.append(json.loads(line)["text"])
            if len(out) == n:
                break
    return out


def tiny_spec(name: str = "tiny6", slots: int = SLOTS, candidates=("dc", "sa", "ff", "glu")) -> SpaceSpec:
    return SpaceSpec(name=name, slots=slots, candidates=list(candidates), size="tiny")


def prepare_tiny_data(root: Path):
    from nni_lvbert.data import prepare

    corpus = root / "corpus.txt"
    if not corpus.exists():
        corpus.write_text("\n\n".join(wiki_texts(160)) + "\n", encoding="utf-8")
    return prepare([str(corpus)], "tiny", vocab_size=500, max_length=32, val_fraction=0.1,
                   cache_dir=root / "cache")


def build_tiny_supernet(run_dir: Path, data, spec: SpaceSpec | None = None, steps: int = 40, seed: int = 0,
                        **cfg_overrides) -> Path:
    """Write a supernet run directory (weights, space, config, tokenizer, meta.json) for `spec`."""
    from nni_lvbert.data.masking import mlm_collator
    from nni_lvbert.space import LVBertSpace
    from nni_lvbert.rundir import RunDir
    from nni_lvbert.supernet.rundir import WEIGHTS
    from nni_lvbert.supernet.strategy import SeededRandomOneShot

    spec = spec or tiny_spec()
    torch.manual_seed(seed)
    cfg = tiny_config(vocab_size=data.vocab_size, **cfg_overrides)
    space = LVBertSpace(spec, cfg)
    SeededRandomOneShot().mutate_model(space)
    if steps:
        tok = data.tokenizer()
        train = data.train_dataset()[:]
        collate = mlm_collator(tok, 0.15, seed=seed)
        opt = torch.optim.Adam(space.parameters(), lr=3e-3)
        rng = np.random.default_rng(seed)
        space.train()
        for step in range(steps):
            idx = rng.choice(len(train["input_ids"]), size=16, replace=False)
            rows = [{"input_ids": train["input_ids"][i], "token_type_ids": train["token_type_ids"][i]} for i in idx]
            batch = collate(rows)
            for i, layer in enumerate(space.layers):
                layer.resample(memo={layer.label: spec.candidates[int(rng.integers(len(spec.candidates)))]})
            out = space(batch["input_ids"], batch.get("attention_mask"), batch["token_type_ids"], batch["labels"])
            opt.zero_grad()
            out.loss.backward()
            opt.step()
        space.eval()
    run = RunDir(run_dir, "supernet")
    run.path.mkdir(parents=True, exist_ok=True)
    run.save_static(spec, cfg, data.tokenizer_dir)
    run.save_weights(space, WEIGHTS)
    run.write_json("meta.json", {
        "run_dir": str(run_dir), "space": spec.to_dict(), "size": "tiny-test", "seed": seed, "steps": steps,
        "data": {"path": str(data.path)}, "final_val_mlm_acc": None,
    })
    return run_dir


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("search")
    data = prepare_tiny_data(root)
    run = build_tiny_supernet(root / "supernet", data, steps=30)
    other = build_tiny_supernet(root / "other", data, spec=tiny_spec("tiny4", 4, ("dc", "ff")), steps=0)
    space_file = root / "tiny6.yaml"
    space_file.write_text("name: tiny6\nslots: 6\ncandidates: [dc, sa, ff, glu]\nsize: tiny\n")
    return {"root": root, "data": data, "run": run, "other": other, "space_file": space_file}


@pytest.fixture(scope="module")
def scorer(tiny):
    from nni_lvbert.search.scorer import SupernetScorer

    return SupernetScorer(tiny["run"], val_tokens=2048, batch_size=32)


def run_cli(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]
