"""IOT's terms against the paper's formulas (issue 44, item 2), each on a tiny tensor whose value is written out by
hand below (not recomputed with the code under test):

    p_x  = softmax(W s_x), s_x the mean input word embedding over real tokens; argmax_m p_x at inference
    pc_x = clamp(p_x, c, 1 - (M - 1) c)
    g_x  = softmax((log pc_x + G) / tau)                           Gumbel-softmax with temperature tau
    L_D  = KL(u || mean_x p_x)  = sum_m (1/M) log((1/M) / pbar_m)   exploration (on the unclamped p, as the official
                                                                    code's `diversity_loss`)
    L_S  = -mean_x KL(u || pc_x)                                    exploitation (on the clamped p, as its `kl_loss`)
    tau(step) = max(tau0 * exp(-r * floor(step / every) * every), tau_min)
"""
import math

import pytest
import torch

from nni_lvbert.iot.routing import OrderPredictor, clamp_probs, iot_loss, tau_at

pytestmark = pytest.mark.usefixtures("one_thread")


def t(rows):
    return torch.tensor(rows, dtype=torch.float32)


def loss_of(probs, inst_loss=None, count=None, **kw):
    """iot_loss with logits log p (softmax(log p) = p), so the probabilities are the ones written in the test."""
    probs = t(probs)
    inst = t(inst_loss) if inst_loss is not None else torch.zeros_like(probs)
    cnt = t(count) if count is not None else torch.ones(probs.shape[0])
    return iot_loss(probs.log(), inst, cnt, **kw)


def test_exploration_loss_is_kl_of_uniform_to_the_batch_mean():
    # p = [0.8, 0.2], [0.4, 0.6]: pbar = [0.6, 0.4]; KL(u || pbar) = 0.5 ln(0.5/0.6) + 0.5 ln(0.5/0.4) = 0.5 ln(25/24)
    out = loss_of([[0.8, 0.2], [0.4, 0.6]], clamp=0.05, noise=None)
    assert out.diversity.item() == pytest.approx(0.0204110, abs=1e-6)
    # the other direction, KL(pbar || u) = 0.6 ln 1.2 + 0.4 ln 0.8 = 0.0201355, is not what is computed
    assert out.diversity.item() != pytest.approx(0.0201355, abs=1e-6)
    # a batch that uses both orders evenly on average has L_D = 0 however sharp each instance is
    assert loss_of([[0.9, 0.1], [0.1, 0.9]], noise=None).diversity.item() == pytest.approx(0.0, abs=1e-7)


def test_exploration_loss_is_on_the_unclamped_probabilities():
    # p = [0.99, 0.01] twice, clamp 0.05: unclamped 0.5 ln(0.25 / (0.99 * 0.01)) = 1.6144631; with the clamped
    # [0.95, 0.05] it would be 0.5 ln(0.25 / 0.0475) = 0.8303656. The official code (and this one) uses the former.
    out = loss_of([[0.99, 0.01], [0.99, 0.01]], clamp=0.05, noise=None)
    assert out.diversity.item() == pytest.approx(1.6144631, rel=1e-5)


def test_exploitation_loss_is_minus_the_mean_kl_of_each_clamped_instance_from_uniform():
    # pc = [0.8, 0.2] (inside the clamp) and [0.95, 0.05] (0.99, 0.01 clamped at c = 0.05):
    # KL(u || [0.8, 0.2]) = 0.5 ln(0.25 / 0.16) = 0.2231436; KL(u || [0.95, 0.05]) = 0.5 ln(0.25 / 0.0475) = 0.8303656
    out = loss_of([[0.8, 0.2], [0.99, 0.01]], clamp=0.05, noise=None)
    assert out.sharpness.item() == pytest.approx(-(0.2231436 + 0.8303656) / 2, rel=1e-5)  # -0.5267546
    # uniform instances: KL 0, the largest L_S
    assert loss_of([[0.5, 0.5]], noise=None).sharpness.item() == pytest.approx(0.0, abs=1e-7)
    # no clamp: KL(u || [0.99, 0.01]) = 0.5 ln(0.25 / 0.0099) = 1.6144631
    assert loss_of([[0.99, 0.01]], clamp=0.0, noise=None).sharpness.item() == pytest.approx(-1.6144631, rel=1e-5)


def test_clamp_bounds():
    # M = 3, c = 0.05: [0.05, 0.9]
    torch.testing.assert_close(clamp_probs(t([[0.97, 0.02, 0.01]]), 0.05), t([[0.9, 0.05, 0.05]]))


def test_gumbel_softmax_with_temperature():
    # no noise, tau 1: the probabilities themselves
    torch.testing.assert_close(loss_of([[0.8, 0.2]], tau=1.0, noise=None).weights, t([[0.8, 0.2]]))
    # tau 2: softmax(log p / 2) = sqrt(p) / sum sqrt(p) = [2/3, 1/3]
    torch.testing.assert_close(loss_of([[0.8, 0.2]], tau=2.0, noise=None).weights, t([[2 / 3, 1 / 3]]))
    # Gumbel noise G = [0, ln 4], tau 1: [0.8, 0.2 * 4] normalised = [0.5, 0.5]
    torch.testing.assert_close(loss_of([[0.8, 0.2]], tau=1.0, noise=t([[0.0, math.log(4.0)]])).weights,
                               t([[0.5, 0.5]]))
    # tau 0.1: (0.8 / 0.2)^10 = 4^10 = 1048576: [1048576 / 1048577, 1 / 1048577] (nearly one-hot)
    torch.testing.assert_close(loss_of([[0.8, 0.2]], tau=0.1, noise=None).weights,
                               t([[0.9999990, 0.0000010]]), atol=1e-6, rtol=0)
    # the clamp applies before the Gumbel-softmax: p = [0.99, 0.01], c = 0.05, tau 1 -> [0.95, 0.05]
    torch.testing.assert_close(loss_of([[0.99, 0.01]], tau=1.0, clamp=0.05, noise=None).weights,
                               t([[0.95, 0.05]]))


def test_weighted_loss_and_total():
    # weights [2/3, 1/3] (tau 2), order losses [3, 6]: 2 + 2 = 4; an instance without masked tokens is left out
    out = loss_of([[0.8, 0.2], [0.8, 0.2]], inst_loss=[[3.0, 6.0], [100.0, 100.0]], count=[5, 0], tau=2.0,
                  c1=0.1, c2=0.01, clamp=0.05, noise=None)
    assert out.mlm.item() == pytest.approx(4.0, rel=1e-6)
    # L_D = 0.5 ln(0.25 / 0.16) = 0.2231436 (pbar = [0.8, 0.2]); L_S = -0.2231436
    assert out.total.item() == pytest.approx(4.0 + 0.1 * 0.2231436 - 0.01 * 0.2231436, rel=1e-6)


def test_predictor_reads_the_mean_real_token_embedding_and_inference_takes_the_argmax():
    pred = OrderPredictor(2, 3)
    with torch.no_grad():
        pred.proj.weight.copy_(t([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]]))
    emb = t([[[2.0, 0.0], [0.0, 4.0], [30.0, -30.0]]])  # the third token is padding
    logits = pred(emb, torch.tensor([[1, 1, 0]]))
    torch.testing.assert_close(logits, t([[1.0, 2.0, -3.0]]))  # mean of the real tokens (1, 2)
    assert int(logits.argmax(-1)) == 1
    # with the padding counted the mean would be (32/3, -26/3): logits (10.67, -8.67, -2), another order
    assert int(pred(emb).argmax(-1)) == 0
    # argmax of the logits = argmax of p = of the clamped p = of the noise-free Gumbel-softmax at any tau
    out = iot_loss(logits, torch.zeros(1, 3), torch.ones(1), tau=5.0, noise=None)
    assert int(out.probs.argmax(-1)) == int(out.weights.argmax(-1)) == 1


def test_routed_inference_takes_the_predictor_argmax():
    from nni_lvbert.iot.routing import IOTModel
    from tests.test_iot import ORDERS, random_batch, supernet_space

    space = supernet_space().eval()
    pred = OrderPredictor(32, len(ORDERS))
    model = IOTModel(space, pred, ORDERS).eval()
    batch = random_batch()
    out = model(batch["input_ids"], batch["attention_mask"], labels=batch["labels"])
    s = (space.embeddings.word(batch["input_ids"]) * batch["attention_mask"][..., None]).sum(1)
    s = s / batch["attention_mask"].sum(1, keepdim=True)
    torch.testing.assert_close(out.choice, (s @ pred.proj.weight.T).argmax(-1))


def test_temperature_schedule():
    # tau0 10, r 1e-4, every 5000, floor 1 (the official base_gs defaults)
    assert tau_at(0) == 10.0 and tau_at(4999) == 10.0
    assert tau_at(7499) == pytest.approx(6.0653066, rel=1e-7)  # floor(7499/5000)*5000 = 5000: 10 e^-0.5
    assert tau_at(10000) == pytest.approx(3.6787944, rel=1e-7)  # 10 e^-1
    assert tau_at(30000) == 1.0  # 10 e^-3 = 0.498 < tau_min
    # tau0 20, r 1e-4, every 1000, floor 2: step 2500 -> 2000 -> 20 e^-0.2
    assert tau_at(2500, tau=20.0, tau_min=2.0, decay=1e-4, every=1000) == pytest.approx(16.3746151, rel=1e-7)
    assert tau_at(10 ** 6, tau=20.0, tau_min=2.0, decay=0.0) == 20.0  # no decay: constant
