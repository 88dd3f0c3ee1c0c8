"""The one model body (nni_lvbert/body.py): the training forward and the Hugging Face forward are the same code."""
import pytest
import torch
from conftest import tiny_config
from safetensors.torch import save_file

from nni_lvbert.body import SlotStack
from nni_lvbert.errors import UserError
from nni_lvbert.hf.convert import hf_config, hf_state_dict, to_hf_masked_lm
from nni_lvbert.hf.modeling_lvbert import LVBertForMaskedLM, LVBertModel
from nni_lvbert.modeling import FixedMLM
from nni_lvbert.safeio import load_weights
from nni_lvbert.space import LVBertSpace

ARCH = ["dc", "sa", "ff", "glu", "dc", "sa"]


def _batch(padded: bool, vocab: int = 100):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (3, 12), generator=g)
    mask = torch.ones_like(ids)
    if padded:
        mask[1, 7:] = 0
        mask[2, 4:] = 0
        ids = ids.masked_fill(mask == 0, 0)
    types = torch.zeros_like(ids)
    types[:, 6:] = 1
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[1, 5], labels[2, 1], labels[0, 9] = ids[0, 2], ids[1, 5], ids[2, 1], ids[0, 9]
    return ids, mask, types, labels


def _run(model, ids, mask, types, labels):
    """Logits (every position), loss and every parameter's gradient, named as the body names it (the HF
    forward takes no only_masked: its **kwargs)."""
    model.zero_grad()
    out = model(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels, only_masked=False)
    out.loss.backward()
    grads = {n.removeprefix("lvbert."): p.grad for n, p in model.named_parameters() if p.grad is not None}
    return out.logits.detach(), out.loss.detach(), grads


def _pair(sharing):
    torch.manual_seed(0)
    cfg = tiny_config(embedding_size=16, sharing=sharing)  # E != H: the E->H projection runs
    project = FixedMLM(cfg, ARCH).train()  # dropout 0: train mode, as trained
    return project, to_hf_masked_lm(project, cfg, ARCH).train()


@pytest.mark.parametrize("sharing", ["none", "type"])
@pytest.mark.parametrize("padded, pack", [(False, None), (True, False), (True, True)])
def test_training_and_hf_forward_are_bit_identical(sharing, padded, pack):
    """FixedMLM (what pre-training and the supernet train) and LVBertForMaskedLM (what is shipped) on the same
    weights: the same logits at every position (padding's state is 0), loss and gradient of every parameter. A
    padded batch runs packed or in place as the body's `pack_padding` says (HF: packed, the project: in place)."""
    project, hf = _pair(sharing)
    if pack is not None:
        project.pack_padding = hf.lvbert.pack_padding = pack
    batch = _batch(padded)
    ref, got = _run(project, *batch), _run(hf, *batch)
    assert torch.equal(ref[0], got[0]) and torch.equal(ref[1], got[1])
    assert ref[2].keys() == got[2].keys() and len(ref[2]) > 20
    assert [n for n in ref[2] if not torch.equal(ref[2][n], got[2][n])] == []


@pytest.mark.parametrize("sharing", ["none", "type"])
def test_packing_changes_no_output_and_gradients_only_by_rounding(sharing):
    """As shipped (HF packs a padded batch, the project's models do not): outputs bit-identical; the gradients
    are sums over other rows (the padded ones are zeros), equal to float rounding."""
    project, hf = _pair(sharing)
    assert hf.lvbert.pack_padding and not project.pack_padding
    batch = _batch(True)
    ref, got = _run(project, *batch), _run(hf, *batch)
    assert torch.equal(ref[0], got[0]) and torch.equal(ref[1], got[1])
    for name, grad in ref[2].items():
        torch.testing.assert_close(got[2][name], grad, atol=1e-7, rtol=1e-5)


def test_one_body_one_loop():
    """The fixed model, the search space and the HF model run the one forward loop of one body."""
    for cls in (FixedMLM, LVBertSpace, LVBertModel):
        assert issubclass(cls, SlotStack) and cls.run_slots is SlotStack.run_slots
    model = LVBertForMaskedLM(hf_config(tiny_config(sharing="type"), ARCH))
    fixed = FixedMLM(tiny_config(sharing="type"), ARCH)
    hf_names = {k.removeprefix("lvbert.") for k in model.state_dict() if k != "head.decoder.weight"}
    assert hf_names == set(fixed.state_dict()) and any(k.startswith("shared.dc.") for k in hf_names)


def _old_names(state: dict, types) -> dict:
    """A shared fixed model's state dict as files before the one naming held it: `layers.<i>.*` per slot."""
    out = {k: v for k, v in state.items() if not k.startswith("shared.")}
    for i, t in enumerate(types):
        out.update({f"layers.{i}.{k[len(f'shared.{t}.'):]}": v for k, v in state.items()
                    if k.startswith(f"shared.{t}.")})
    return out


def test_files_with_the_old_slot_names_still_load(tmp_path):
    cfg = tiny_config(sharing="type")
    torch.manual_seed(0)
    new = FixedMLM(cfg, ARCH).eval()
    old = _old_names(new.state_dict(), ARCH)
    assert "layers.4.value.weight" in old and not any(k.startswith("shared.") for k in old)
    torch.manual_seed(1)
    loaded = FixedMLM(cfg, ARCH).eval()
    loaded.load_state_dict(old)  # strict: every old name found its new place
    ids, mask, types, _ = _batch(True)
    with torch.no_grad():
        assert torch.equal(loaded(ids, mask, types).logits, new(ids, mask, types).logits)
        hf = to_hf_masked_lm(old, cfg, ARCH)  # the HF export of an old checkpoint
        assert torch.equal(hf(input_ids=ids, attention_mask=mask, token_type_ids=types).logits,
                           new(ids, mask, types).logits)
    first = {t: i for i, t in reversed(list(enumerate(ARCH)))}  # safetensors kept one name per shared tensor
    save_file({k: v for k, v in old.items() if not k.startswith("layers.") or int(k.split(".")[1]) in
               first.values()}, tmp_path / "old.safetensors")
    torch.manual_seed(2)
    from_file = FixedMLM(cfg, ARCH).eval()
    load_weights(from_file, tmp_path / "old.safetensors")  # how run directories load their weights
    assert all(torch.equal(v, new.state_dict()[k]) for k, v in from_file.state_dict().items())
    old["layers.4.value.bias"] = old["layers.4.value.bias"] + 1  # slot 4 is a dc: no longer the same module
    with pytest.raises(UserError, match="shared dc layer differ between slots"):
        hf_state_dict(old, ARCH, "type")
    with pytest.raises(ValueError, match="differ between slots"):
        loaded.load_state_dict(old)
