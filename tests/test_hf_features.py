"""transformers features of the LV-BERT classes beyond the forward pass: inputs_embeds, gradient checkpointing,
resize_token_embeddings (tied decoder and MLM bias), and a clear refusal of output_attentions."""
import pytest
import torch

from nni_lvbert.hf import LVBertForMaskedLM, LVBertForSequenceClassification, LVBertModel
from nni_lvbert.hf.convert import hf_config
from tests.conftest import tiny_config
from tests.test_hf import ARCH, batch

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("cls", [LVBertModel, LVBertForMaskedLM, LVBertForSequenceClassification])
def test_inputs_embeds_equals_input_ids(cls):
    torch.manual_seed(0)
    model = cls(hf_config(tiny_config(embedding_size=16), ARCH)).eval()
    ids, mask, types = batch()
    a = model(input_ids=ids, attention_mask=mask, token_type_ids=types)[0]
    embeds = model.get_input_embeddings()(ids)
    b = model(inputs_embeds=embeds, attention_mask=mask, token_type_ids=types)[0]
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    with pytest.raises(ValueError, match="exactly one"):
        model(input_ids=ids, inputs_embeds=embeds)


def test_gradient_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    config = hf_config(tiny_config(), ARCH)
    ids, mask, types = batch()
    labels = torch.where(mask.bool(), ids, torch.full_like(ids, -100))
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = LVBertForMaskedLM(config).train()
        if checkpointing:
            if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.24: the new name
                model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
                assert model.is_activation_checkpointing
            else:  # earlier 5.x: the old name, deprecated since
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
                assert model.is_gradient_checkpointing
            assert model.lvbert.gradient_checkpointing
        model(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 10
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-5, atol=1e-7)


def test_resize_token_embeddings_keeps_the_tie_and_the_bias(tmp_path):
    torch.manual_seed(0)
    model = LVBertForMaskedLM(hf_config(tiny_config(), ARCH)).eval()
    with torch.no_grad():
        model.head.bias.uniform_(-1, 1)
    ids, mask, types = batch()
    before = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    old = model.config.vocab_size
    model.resize_token_embeddings(old + 7)
    assert model.config.vocab_size == old + 7 and model.head.bias.shape == (old + 7,)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    after = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    assert after.shape[-1] == old + 7
    torch.testing.assert_close(after[..., :old], before, rtol=1e-6, atol=1e-6)
    model.save_pretrained(tmp_path)
    again = LVBertForMaskedLM.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(again(input_ids=ids, attention_mask=mask, token_type_ids=types).logits, after)
    model.resize_token_embeddings(old - 3)
    assert model(input_ids=ids.clamp(max=old - 4), attention_mask=mask).logits.shape[-1] == old - 3


def test_output_attentions_is_refused_clearly():
    model = LVBertModel(hf_config(tiny_config(), ARCH)).eval()
    ids, mask, _ = batch()
    with pytest.raises(ValueError, match="attention weights"):
        model(input_ids=ids, attention_mask=mask, output_attentions=True)
    assert model(input_ids=ids, attention_mask=mask, output_attentions=False).last_hidden_state.shape[0] == 3
