"""LV-BERT as `transformers` models: an order of dc/sa/ff/glu layers behind ALBERT-factorized embeddings.

The body (embeddings, slots, the forward loop over them, initialisation) and the heads' blocks are the project's
own (`nni_lvbert/body.py`, `nni_lvbert/layers/`): there is one implementation of each, and `LVBertForMaskedLM` here
computes exactly what `nni_lvbert.modeling.FixedMLM` does with the same weights, under the same parameter names
behind transformers' `base_model_prefix` (`lvbert.`). A saved model directory carries this file
with those modules pasted above it (`nni_lvbert.hf.bundle`), so it also loads with `trust_remote_code=True` where
this package is not installed.

Heads (ELECTRA / BERT conventions):
- `LVBertForMaskedLM`: BERT/ELECTRA-generator head (H->E, GELU, LayerNorm, tied word embedding + bias).
- `LVBertForPreTraining`: ELECTRA discriminator head (H->H, GELU, H->1), one replaced-token logit per token.
- `LVBertForSequenceClassification`: dropout + linear on the final [CLS] state (no pooler, as ELECTRA's
  fine-tuning); regression (MSE) when num_labels == 1; `problem_type` as transformers' BERT.
- `LVBertForTokenClassification`, `LVBertForQuestionAnswering`: dropout + linear per token; start/end logits.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.utils import ModelOutput

from ..body import DiscriminatorHead, Embeddings, MLMHead, SlotStack, init_module
from .configuration_lvbert import LVBertConfig


class LVBertPreTrainedModel(PreTrainedModel):
    """Weight initialisation (BERT's: N(0, initializer_range), zero biases, unit LayerNorm) and loading glue."""

    config_class = LVBertConfig
    base_model_prefix = "lvbert"
    supports_gradient_checkpointing = True  # per slot: activation_checkpointing_enable() (5.24+)
    _no_split_modules = ["Embeddings", "SelfAttention", "DynamicConv", "FeedForward", "GLUFeedForward"]

    def _init_weights(self, module):
        """Every parameter (`body.init_module`, through transformers' initialisation functions: weights loaded
        from a file are left alone); the tied MLM decoder is initialised as the word embedding."""
        init_module(module, self.config.initializer_range, init, tied=self.get_input_embeddings().weight)


class LVBertModel(SlotStack, LVBertPreTrainedModel):
    """Embeddings, then one layer per slot of `config.layer_types`; returns the final hidden states: the project's
    body (`body.SlotStack`), its parameter names (`embeddings.*`, `layers.<i>.*` or `shared.<type>.*`). Padded
    batches run packed: no work on padding."""

    pack_padding = True

    def __init__(self, config: LVBertConfig):
        super().__init__(config)
        self.layer_types = config.check_layer_types()
        self.embeddings = Embeddings(config)
        self.build_slots(config, self.layer_types)
        self.gradient_checkpointing = False  # set by transformers' activation/gradient_checkpointing_enable()
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word

    def set_input_embeddings(self, value):
        self.embeddings.word = value

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, output_hidden_states=None,
                return_dict=None, inputs_embeds=None, output_attentions=None, **kwargs):
        """attention_mask: 1 at real tokens (padding never reaches them; the layers skip it, and their hidden states
        are 0 there); no causal mask, no cache. `inputs_embeds` (batch, seq, embedding_size) replaces the
        word-embedding lookup."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("give exactly one of input_ids and inputs_embeds")
        if output_attentions:
            raise ValueError("LV-BERT's attention runs fused (scaled_dot_product_attention) and does not return "
                             "attention weights; output_attentions is not supported")
        output_hidden_states = (output_hidden_states if output_hidden_states is not None
                                else self.config.output_hidden_states)
        x = self.embeddings(input_ids, token_type_ids, inputs_embeds=inputs_embeds)
        states = [x] if output_hidden_states else None
        checkpoint = self._gradient_checkpointing_func if self.gradient_checkpointing and self.training else None
        last = self.run_slots(x, attention_mask, states=states, checkpoint=checkpoint)
        out = BaseModelOutput(last_hidden_state=last, hidden_states=tuple(states) if states else None)
        return out if _return_dict(self.config, return_dict) else out.to_tuple()


class LVBertLMHead(MLMHead):
    """The project's MLM head with its tied matrix held by a `decoder` Linear, so that transformers can tie it to
    the word embedding (`_tied_weights_keys`) and drop the copy when saving."""

    def __init__(self, config: LVBertConfig):
        super().__init__(config, word=None)
        self.decoder = nn.Linear(config.embedding_size, config.vocab_size, bias=False)
        self.word = [self.decoder]  # MLMHead projects with self.word[0].weight


class LVBertForMaskedLM(LVBertPreTrainedModel):
    """Masked-language model (also the ELECTRA generator). Loss: cross-entropy over labels != -100."""

    _tied_weights_keys = {"head.decoder.weight": "lvbert.embeddings.word.weight"}

    def __init__(self, config: LVBertConfig):
        super().__init__(config)
        self.lvbert = LVBertModel(config)
        self.head = LVBertLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.head.decoder = new_embeddings
        self.head.word = [new_embeddings]

    def resize_token_embeddings(self, new_num_tokens=None, pad_to_multiple_of=None, mean_resizing=True):
        """transformers' resize (word embedding, tied decoder, config.vocab_size), plus the MLM output bias: kept
        for the tokens that remain, zero for new ones."""
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        n, old = embeddings.num_embeddings, self.head.bias
        if old.shape[0] != n:
            bias = old.detach().new_zeros(n)
            bias[:min(n, old.shape[0])] = old.detach()[:n]
            self.head.bias = nn.Parameter(bias)
        self.head.decoder.out_features = n
        return embeddings

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=None, return_dict=None, inputs_embeds=None, output_attentions=None, **kwargs):
        out = self.lvbert(input_ids, attention_mask, token_type_ids, output_hidden_states, return_dict=True,
                          inputs_embeds=inputs_embeds, output_attentions=output_attentions)
        logits = self.head(out.last_hidden_state)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)
        return _output(MaskedLMOutput(loss=loss, logits=logits, hidden_states=out.hidden_states),
                       self.config, return_dict)


@dataclass
class LVBertForPreTrainingOutput(ModelOutput):
    """ELECTRA discriminator output: `logits` (batch, seq), > 0 where a token is predicted to be replaced."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None


class LVBertForPreTraining(LVBertPreTrainedModel):
    """ELECTRA discriminator (replaced-token detection). labels: 1 = replaced, 0 = original; the loss is the binary
    cross-entropy averaged over real (attention_mask == 1) tokens, as transformers' ElectraForPreTraining."""

    def __init__(self, config: LVBertConfig):
        super().__init__(config)
        self.lvbert = LVBertModel(config)
        self.discriminator_predictions = DiscriminatorHead(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=None, return_dict=None, inputs_embeds=None, output_attentions=None, **kwargs):
        out = self.lvbert(input_ids, attention_mask, token_type_ids, output_hidden_states, return_dict=True,
                          inputs_embeds=inputs_embeds, output_attentions=output_attentions)
        logits = self.discriminator_predictions(out.last_hidden_state)
        loss = None
        if labels is not None:
            real = attention_mask.bool() if attention_mask is not None else torch.ones_like(labels, dtype=torch.bool)
            loss = F.binary_cross_entropy_with_logits(logits[real], labels[real].float())
        return _output(LVBertForPreTrainingOutput(loss=loss, logits=logits, hidden_states=out.hidden_states),
                       self.config, return_dict)


class LVBertForSequenceClassification(LVBertPreTrainedModel):
    """Dropout + linear on the final [CLS] state (ELECTRA fine-tuning; no pooler)."""

    def __init__(self, config: LVBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.lvbert = LVBertModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=None, return_dict=None, inputs_embeds=None, output_attentions=None, **kwargs):
        out = self.lvbert(input_ids, attention_mask, token_type_ids, output_hidden_states, return_dict=True,
                          inputs_embeds=inputs_embeds, output_attentions=output_attentions)
        logits = self.classifier(self.dropout(out.last_hidden_state[:, 0]))
        loss = None if labels is None else self._loss(logits, labels)
        return _output(SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states),
                       self.config, return_dict)

    def _loss(self, logits, labels):
        """transformers' convention: regression for one label, else single- or multi-label by the labels' dtype."""
        if self.config.problem_type is None:
            if self.num_labels == 1:
                self.config.problem_type = "regression"
            elif labels.dtype in (torch.long, torch.int):
                self.config.problem_type = "single_label_classification"
            else:
                self.config.problem_type = "multi_label_classification"
        if self.config.problem_type == "regression":
            if self.num_labels == 1:
                return F.mse_loss(logits.squeeze(), labels.squeeze().to(logits.dtype))
            return F.mse_loss(logits, labels.to(logits.dtype))
        if self.config.problem_type == "single_label_classification":
            return F.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


class LVBertForTokenClassification(LVBertPreTrainedModel):
    """Dropout + linear per token; cross-entropy over labels != -100."""

    def __init__(self, config: LVBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.lvbert = LVBertModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=None, return_dict=None, inputs_embeds=None, output_attentions=None, **kwargs):
        out = self.lvbert(input_ids, attention_mask, token_type_ids, output_hidden_states, return_dict=True,
                          inputs_embeds=inputs_embeds, output_attentions=output_attentions)
        logits = self.classifier(self.dropout(out.last_hidden_state))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1), ignore_index=-100)
        return _output(TokenClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states),
                       self.config, return_dict)


class LVBertForQuestionAnswering(LVBertPreTrainedModel):
    """Extractive QA: start/end logits per token. Loss as transformers: positions outside the sequence are
    clamped to its length and ignored; the mean of the start and end cross-entropies."""

    def __init__(self, config: LVBertConfig):
        super().__init__(config)
        self.lvbert = LVBertModel(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, start_positions=None,
                end_positions=None, output_hidden_states=None, return_dict=None, inputs_embeds=None,
                output_attentions=None, **kwargs):
        out = self.lvbert(input_ids, attention_mask, token_type_ids, output_hidden_states, return_dict=True,
                          inputs_embeds=inputs_embeds, output_attentions=output_attentions)
        start_logits, end_logits = (t.squeeze(-1).contiguous() for t in self.qa_outputs(out.last_hidden_state)
                                    .split(1, dim=-1))
        loss = None
        if start_positions is not None and end_positions is not None:
            ignored = start_logits.size(1)
            start = start_positions.view(-1).clamp(0, ignored)
            end = end_positions.view(-1).clamp(0, ignored)
            loss = (F.cross_entropy(start_logits, start, ignore_index=ignored)
                    + F.cross_entropy(end_logits, end, ignore_index=ignored)) / 2
        result = QuestionAnsweringModelOutput(loss=loss, start_logits=start_logits, end_logits=end_logits,
                                              hidden_states=out.hidden_states)
        return _output(result, self.config, return_dict)


def _return_dict(config, return_dict) -> bool:
    return return_dict if return_dict is not None else getattr(config, "return_dict", True)


def _output(result, config, return_dict):
    """A ModelOutput, or its tuple when return_dict is False (None fields dropped, as transformers does)."""
    return result if _return_dict(config, return_dict) else result.to_tuple()


__all__ = [
    "LVBertForMaskedLM",
    "LVBertForPreTraining",
    "LVBertForQuestionAnswering",
    "LVBertForSequenceClassification",
    "LVBertForTokenClassification",
    "LVBertModel",
    "LVBertPreTrainedModel",
]
