"""Every training preset in one table (the defaults of the options left unset): per training command, a `paper`
row (LV-BERT Table 5, ELECTRA's configure_pretraining.py) and a `tiny` row sized for minutes on 2 CPU cores; the
studies' stand-alone budgets (`study`: `tiny`, and the CI-sized `quick`) are rows of the same table.

A run writes the values it used into its options.json, so `--resume` keeps them even when a later version changes
this table.
"""
from __future__ import annotations

FIELDS = ("lr", "warmup_steps", "max_steps", "batch_size", "dropout", "val_every", "val_batches", "ckpt_every",
          "generator_fraction")

TABLE = {
    #                       lr    warm-up      steps  batch  drop  val every  val batches  ckpt every  generator
    "supernet": {
        "paper":        (2e-4,  10_000, 2_000_000,   128,  0.1,   10_000,   100,  5_000),  # LV-BERT Table 5
        "tiny":         (2e-3,     100,     1_500,    32,  0.0,      250,    20,    100),  # ~10 min, 2 CPU cores
    },
    # IOT paper: continued pre-training of a small supernet (our choice: the official IOT code trains NMT models,
    # its schedule does not carry over to BERT pre-training)
    "iot": {
        "paper":        (1e-4,   1_000,   100_000,   128,  0.1,    5_000,   100,  1_000),
        "tiny":         (1e-3,      20,       300,    32,  0.0,      100,    10,     50),
    },
    # LV-BERT Table 5 / ELECTRA (small/medium lr 5e-4, base 2e-4 and batch 256; 1M steps, 10k warm-up, dropout
    # 0.1); ELECTRA's generator is 1/4 of the discriminator's hidden size for small, 1/3 for medium and base.
    # `paper` serves any size without its own row (resume.resume_from reads this key).
    "pretrain": {
        "paper":        (5e-4,  10_000, 1_000_000,   128,  0.1,   10_000,   100,  5_000,  0.25),
        "small":        (5e-4,  10_000, 1_000_000,   128,  0.1,   10_000,   100,  5_000,  0.25),
        "medium":       (5e-4,  10_000, 1_000_000,   128,  0.1,   10_000,   100,  5_000,  1 / 3),
        "base":         (2e-4,  10_000, 1_000_000,   256,  0.1,   10_000,   100,  5_000,  1 / 3),
        "tiny":         (2e-3,     100,     1_000,    32,  0.0,      100,    20,    100,  0.25),
        # ELECTRA at tiny learns at a quarter of MLM's lr: at 2e-3 the discriminator stays at the constant answer
        # "original" (AUC 0.52 after 1,000 steps), even against a fixed unigram sampler in place of the generator;
        # at 5e-4 its AUC rises steadily (docs/results.md, "Pre-training at tiny")
        "tiny-electra": (5e-4,     100,     1_000,    32,  0.0,      100,    20,    100,  0.25),
    },
    # the studies' stand-alone budget (study/common.py): every compared model gets the same; "tiny" is the CPU
    # regime of docs/results.md (which says how it was chosen), "quick" checks that everything runs, not what wins
    "study": {
        "tiny":         (2e-3,     100,     1_500,    32,  0.0),
        "quick":        (2e-3,       3,        30,     8,  0.0),
    },
}


def presets(stage: str) -> dict[str, dict]:
    """{preset name: {option: value}} of one stage."""
    return {name: dict(zip(FIELDS, row)) for name, row in TABLE[stage].items()}
