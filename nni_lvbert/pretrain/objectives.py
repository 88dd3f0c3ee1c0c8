"""Pre-training objectives over one fixed architecture: MLM, ELECTRA replaced-token detection, ALBERT SOP.

- `MLMObjective`: the project's `FixedMLM` (vocabulary projection only at masked positions).
- `ElectraObjective` (ELECTRA, LV-BERT §4.1): a generator of the same layer order and depth at a fraction of the
  hidden size (`generator_config`) and a discriminator. They share the token, position and segment embeddings
  and the embedding LayerNorm (the very modules); each keeps its own E->H projection. The generator's MLM head
  is tied to the shared word embedding. Fake tokens are Gumbel-max samples of the generator's softmax
  (temperature 1) taken without gradient; a position is "replaced" only when its sample differs from the
  original. Loss = generator MLM + `disc_weight` (50) x discriminator BCE averaged over non-pad tokens.
- `--sop`: a classifier on the final [CLS] state (of the MLM model or the discriminator) predicts whether the
  segments were swapped (ALBERT: pooler dense H->H + tanh, dropout, dense H->2); its loss is added with weight 1.

`forward(batch)` returns a dict: `loss`, its `parts` (the weighted terms' unweighted losses, in the graph) and
the sums every metric is computed from (`metrics.py`), so training, validation and DDP reduction share one
definition.
"""
from __future__ import annotations

import dataclasses

import numpy
import torch
import torch.nn.functional as F
from torch import nn

from ..body import DiscriminatorHead, init_weights
from ..config import ModelConfig
from ..data.masking import model_mask
from ..errors import UserError
from ..modeling import Encoder, FixedMLM, masked_positions

OBJECTIVES = ("mlm", "electra")
DISC_WEIGHT = 50.0  # ELECTRA disc_weight
HEAD_SIZE = 64  # generator heads = max(1, hidden / 64) (ELECTRA get_generator_config)
SHARED_EMBEDDINGS = ("word", "position", "segment", "norm")  # ...and each model keeps its own `project`


def generator_config(cfg: ModelConfig, fraction: float) -> ModelConfig:
    """The generator's ModelConfig: hidden = round(fraction x H), heads = max(1, hidden/64), FF = 4 x hidden,
    the discriminator's embedding size, vocabulary, sequence length, dropout and sharing."""
    hidden = round(cfg.hidden_size * fraction)
    if not 0 < fraction <= 1 or hidden < 1:
        raise UserError(f"--generator-fraction must be in (0, 1] and leave a hidden size of at least 1; got "
                        f"{fraction} of {cfg.hidden_size}")
    heads = max(1, hidden // HEAD_SIZE)
    if hidden % heads:
        raise UserError(f"generator hidden size {hidden} ({fraction} x {cfg.hidden_size}) is not divisible by its "
                        f"{heads} heads; choose another --generator-fraction")
    return dataclasses.replace(cfg, hidden_size=hidden, num_heads=heads, ff_size=4 * hidden, glu_ff_size=None)


class SOPHead(nn.Module):
    """ALBERT sentence-order prediction on the final [CLS] state: pooler (dense + tanh), dropout, dense -> 2."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout = nn.Dropout(cfg.dropout)
        self.classifier = nn.Linear(cfg.hidden_size, 2)
        init_weights(self, cfg.initializer_range)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(torch.tanh(self.pooler(hidden[:, 0]))))


GUMBEL_ROWS = 16  # CPU: rows of noise drawn at a time, so that a chunk stays in cache through its five passes


def _gumbel_argmax(logits: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """argmax(logits + Gumbel noise), the noise made in place from `uniform`: ELECTRA's -log(-log(u + 1e-9) + 1e-9)."""
    uniform.add_(1e-9).log_().neg_().add_(1e-9).log_()  # = -noise; in place: half the time of the formula
    return torch.sub(logits, uniform).argmax(-1)


def gumbel_max(logits: torch.Tensor) -> torch.Tensor:
    """One sample per row of softmax(logits) (temperature 1): argmax(logits + Gumbel noise), as ELECTRA's
    sample_from_softmax; no gradient. The uniforms are float32 in [0, 1) in steps of 2^-24 (as torch.rand's).

    On CPU they come from numpy's SFC64 generator, seeded by one draw from torch's global generator (so a run is
    still a function of its seed), 16 rows at a time: torch's CPU generator draws one number after another, and
    the noise over the vocabulary at the masked positions (608 x 30522 at `small`) took 8 % of an ELECTRA step.
    On other devices and under torch.compile, torch.rand on the logits' device."""
    with torch.no_grad():
        logits = logits.detach().float()
        if logits.device.type != "cpu" or torch.compiler.is_compiling():
            return _gumbel_argmax(logits, torch.rand(logits.shape, device=logits.device))
        rng = numpy.random.Generator(numpy.random.SFC64(int(torch.randint(0, (1 << 63) - 1, ()))))
        rows = logits.reshape(-1, logits.shape[-1])
        samples = [_gumbel_argmax(chunk, torch.from_numpy(rng.random(tuple(chunk.shape), dtype=numpy.float32)))
                   for chunk in rows.split(GUMBEL_ROWS)]
        return torch.cat(samples).reshape(logits.shape[:-1])


def _sop(head: SOPHead | None, hidden: torch.Tensor, batch: dict, out: dict) -> torch.Tensor:
    """SOP loss (0 without --sop), recorded in out["parts"] with its sums."""
    if head is None:
        return hidden.new_zeros(())
    logits = head(hidden)
    target = batch["sop_labels"]
    loss = F.cross_entropy(logits.float(), target)
    out["parts"]["sop"] = loss
    out.update(sop_loss=loss.detach() * target.numel(), sop_correct=(logits.argmax(-1) == target).sum(),
               sop_count=torch.tensor(target.numel(), device=target.device))
    return loss


class MLMObjective(nn.Module):
    def __init__(self, cfg: ModelConfig, arch, sop: bool = False):
        super().__init__()
        self.mlm = FixedMLM(cfg, arch)
        self.sop_head = SOPHead(cfg) if sop else None

    def forward(self, batch: dict) -> dict:
        hidden = self.mlm.encode(batch["input_ids"], model_mask(batch), batch.get("token_type_ids"))
        res = self.mlm.mlm(hidden, batch["labels"], positions=batch.get("mlm_positions"))
        out = {"parts": {"mlm": res.loss}, "mlm_loss": res.loss.detach() * res.count, "mlm_correct": res.correct,
               "mlm_count": res.count}
        out["loss"] = res.loss + _sop(self.sop_head, hidden, batch, out)
        return out


class ElectraObjective(nn.Module):
    def __init__(self, cfg: ModelConfig, arch, generator_fraction: float, sop: bool = False,
                 disc_weight: float = DISC_WEIGHT):
        super().__init__()
        self.disc_weight = disc_weight
        self.generator_config = generator_config(cfg, generator_fraction)
        self.discriminator = Encoder(cfg, arch)
        self.disc_head = DiscriminatorHead(cfg)
        init_weights(self.disc_head, cfg.initializer_range)
        self.generator = FixedMLM(self.generator_config, arch)
        for name in SHARED_EMBEDDINGS:  # the very modules: one set of parameters, trained by both losses
            setattr(self.generator.embeddings, name, getattr(self.discriminator.embeddings, name))
        self.generator.head.word = [self.discriminator.embeddings.word]  # the generator's MLM decoder
        self.sop_head = SOPHead(cfg) if sop else None

    def forward(self, batch: dict) -> dict:
        ids, mask, types, labels = batch["input_ids"], model_mask(batch), batch.get("token_type_ids"), batch["labels"]
        positions = batch.get("mlm_positions")  # counted by the collator (no device sync), else found here
        if positions is None:
            positions = masked_positions(labels)
        original = torch.where(labels != -100, labels, ids)
        gen = self.generator.mlm(self.generator.encode(ids, mask, types), labels, positions=positions)
        flat = original.reshape(-1)
        sample = gumbel_max(gen.logits)  # one per position; a padding position (pad_positions) keeps its token:
        sample = torch.where(labels.reshape(-1).index_select(0, positions) != -100, sample,
                             flat.index_select(0, positions))
        fake = flat.index_copy(0, positions, sample).view_as(original)
        replaced = fake != original  # only where the sample differs
        hidden = self.discriminator.encode(fake, mask, types)
        logits = self.disc_head(hidden)
        disc_logits, disc_labels = logits.reshape(-1).float(), replaced.reshape(-1).float()
        if mask is None:  # nothing padded: every token counts
            real, n_real = None, disc_labels.numel()
            disc_loss = F.binary_cross_entropy_with_logits(disc_logits, disc_labels)
        else:  # the mean over real tokens as a masked sum (no data-dependent shape: one graph when compiled)
            real = mask.reshape(-1).bool()
            n_real = real.sum()
            disc_loss = F.binary_cross_entropy_with_logits(disc_logits, disc_labels, reduction="none").where(
                real, 0.0).sum() / n_real
        out = {"parts": {"generator": gen.loss, "discriminator": disc_loss}, "fake_ids": fake,
               "mlm_loss": gen.loss.detach() * gen.count, "mlm_correct": gen.correct, "mlm_count": gen.count,
               "disc_loss": disc_loss.detach() * n_real, "disc_logits": disc_logits.detach(),
               "disc_labels": disc_labels, "disc_real": real}  # per token (batch x seq); real: None = all
        out["loss"] = gen.loss + self.disc_weight * disc_loss + _sop(self.sop_head, hidden, batch, out)
        return out


def build_objective(objective: str, cfg: ModelConfig, arch, *, sop: bool = False, generator_fraction: float = 0.25,
                    disc_weight: float = DISC_WEIGHT) -> nn.Module:
    if objective == "mlm":
        return MLMObjective(cfg, arch, sop)
    if objective == "electra":
        return ElectraObjective(cfg, arch, generator_fraction, sop, disc_weight)
    raise UserError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
