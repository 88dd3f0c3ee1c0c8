"""The pre-training LightningModule: the supernet's `MLMModule` (AdamW β 0.9/0.999, ε 1e-6, weight decay on
everything but LayerNorm weights and biases, linear warm-up then linear decay) around an objective of
`objectives.py`, plus global gradient-norm clipping and per-step random state.

Randomness: at every training step torch's global generator is seeded from (seed, global step, rank), so dropout
and the generator's Gumbel samples are a function of the step: a run resumed from a checkpoint continues exactly as
an uninterrupted one (the batches are already a function of (seed, batch)). Validation seeds from (data seed,
batch index): every validation of every run over the same data draws the same samples.

`--compile BACKEND` (`compile_for_training`): the training forward of the whole objective (embeddings, every layer,
heads, losses, ELECTRA's sampling) is compiled, with CUDA graphs (mode "reduce-overhead") for inductor on a GPU:
one replay per step instead of thousands of kernel launches. The masked positions of each training batch are
padded to a multiple of COMPILED_POSITIONS by the training collator, on the host (`data.masking.pad_positions`:
ignored rows), and their count is marked dynamic: one graph, few CUDA graph recordings. Validation stays eager.
H200, `small`, batch 128 x 128 (bench_gpu.py, the model alone): 9.6 ms a compiled MLM step, 36.3 ms eager.

Logged: train_loss, train_{gen_,}mlm_acc, train_disc_loss/acc, train_sop_acc, tok/s; at validation
val_loss, val_{gen_,}mlm_acc, val_disc_loss/acc/precision/recall/auc, val_sop_acc (see metrics.py).
"""
from __future__ import annotations

import torch

from ..data.resumable import batch_seed
from ..supernet.lightning_module import MLMModule, log_throughput
from .metrics import histogram, step_sums, summarize

STEP_STREAM, VAL_STREAM = 3, 4  # batch_seed streams (data.py uses 0 = masking and 1 = SOP)
PROGRESS = ("mlm_acc", "gen_mlm_acc", "disc_acc", "sop_acc")
COMPILED_POSITIONS = 64  # --compile: masked positions per training batch padded to a multiple of it


class PretrainModule(MLMModule):
    def __init__(self, objective_model, objective: str, *, lr: float, warmup_steps: int, max_steps: int,
                 weight_decay: float, clip_grad: float | None, seed: int, data_seed: int,
                 disc_weight: float = 50.0):
        super().__init__(lr=lr, warmup_steps=warmup_steps, max_steps=max_steps, weight_decay=weight_decay)
        self.set_model(objective_model)
        self.objective, self.clip_grad, self.seed, self.data_seed = objective, clip_grad, seed, data_seed
        self.disc_weight = disc_weight
        self._hist = None
        self._compiled = {}  # "forward": the compiled training forward, "cudagraphs": whether it replays graphs

    def forward(self, batch):
        return self.model(batch)

    def compile_for_training(self, backend: str) -> str:
        """--compile: torch.compile the whole objective for training steps (see the module docstring). The
        compiled callable shares the objective's parameters; it is kept out of the module tree (a plain dict), so
        parameter names, checkpoints and exports stay as they are."""
        cudagraphs = backend == "inductor" and self.device.type == "cuda"
        mode = "reduce-overhead" if cudagraphs else None
        self._compiled = {"forward": torch.compile(self.model.forward, backend=backend, mode=mode),
                          "cudagraphs": cudagraphs}
        return f"the whole {type(self.model).__name__} for training steps" + (" (CUDA graphs)" if cudagraphs else "")

    def on_train_batch_start(self, batch, batch_idx):
        torch.manual_seed(batch_seed(self.seed, self.trainer.global_step, self.trainer.global_rank, STEP_STREAM))

    def training_step(self, batch, batch_idx):
        if self._compiled:
            if self._compiled["cudagraphs"]:
                torch.compiler.cudagraph_mark_step_begin()  # the last step's graph outputs may be overwritten now
            if "mlm_positions" in batch:  # varies by step: one graph for every count, not one compile per count
                torch._dynamo.maybe_mark_dynamic(batch["mlm_positions"], 0)
            out = self._compiled["forward"](batch)
        else:
            out = self(batch)
        self.log("train_loss", out["loss"].detach(), prog_bar=True)
        for name, value in summarize(step_sums(out), self.objective).items():
            self.log(f"train_{name}", value, prog_bar=name in PROGRESS)
        log_throughput(self, batch)
        return out["loss"]

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        """Global gradient-norm clipping (ELECTRA/BERT: 1.0), whatever the Trainer was given."""
        if self.clip_grad:
            self.clip_gradients(optimizer, gradient_clip_val=self.clip_grad, gradient_clip_algorithm="norm")

    def on_validation_epoch_start(self):
        self._val = None
        self._hist = None

    def on_validation_batch_start(self, batch, batch_idx, dataloader_idx=0):
        torch.manual_seed(batch_seed(self.data_seed, batch_idx, VAL_STREAM))

    def validation_step(self, batch, batch_idx):
        with torch.no_grad():
            out = self(batch)
        sums = step_sums(out)
        self._val = sums if self._val is None else self._val + sums
        if "disc_logits" in out:
            hist = histogram(out["disc_logits"], out["disc_labels"], out.get("disc_real"))
            self._hist = hist if self._hist is None else self._hist + hist

    def on_validation_epoch_end(self):
        if self._val is None:
            return
        total = self.trainer.strategy.reduce(self._val, reduce_op="sum")  # exact over ranks
        hist = self.trainer.strategy.reduce(self._hist, reduce_op="sum") if self._hist is not None else None
        metrics = summarize(total, self.objective, hist)
        if self.objective == "electra":
            loss = metrics.get("gen_loss", 0.0) + self.disc_weight * metrics.get("disc_loss", 0.0)
        else:
            loss = metrics.get("mlm_loss", 0.0)
        metrics["loss"] = loss + metrics.get("sop_loss", 0.0)  # as the training loss, over the whole split
        for name, value in metrics.items():
            self.log(f"val_{name}", float(value), prog_bar=name in PROGRESS, rank_zero_only=True)
        self._tick = None  # validation time is not training throughput
