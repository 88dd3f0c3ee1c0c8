"""IOT fine-tuning on classification (issue 44 item 3): the routed loss against a hand-computed mixture, grouped
argmax routing against each instance's chosen order, the head against `LVBertForSequenceClassification`, the
oracle's bounds, and `lvbert study iot-finetune --quick` end to end on sotu-era (--iot, with --resume) and on a
GLUE-format task (--iot-study)."""
from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch

from nni_lvbert.arch import to_dict
from nni_lvbert.config import SpaceSpec
from tests.conftest import build_tiny_supernet, one_error_line, run_cli, tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")

SPEC = SpaceSpec(name="ft4", slots=4, candidates=["dc", "sa", "ff", "glu"], size="tiny")
ORDERS = [["sa", "ff", "dc", "glu"], ["dc", "sa", "ff", "ff"], ["ff", "glu", "sa", "sa"]]


def classifier(num_labels=3, seed=0, predictor=True):
    from nni_lvbert.iot.finetune import OrderClassifier
    from nni_lvbert.iot.routing import OrderPredictor
    from nni_lvbert.space import LVBertSpace
    from nni_lvbert.supernet.strategy import SeededRandomOneShot

    torch.manual_seed(seed)
    space = LVBertSpace(SPEC, tiny_config(vocab_size=100))
    SeededRandomOneShot().mutate_model(space)
    pred = OrderPredictor(32, len(ORDERS)) if predictor else None
    return OrderClassifier(space, pred, [to_dict(o) for o in ORDERS], num_labels, 0.1, seed)


def batch(b=6, n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, n + 1, (b,), generator=g)
    lengths[0] = n
    mask = (torch.arange(n)[None] < lengths[:, None]).long()
    ids = torch.randint(5, 100, (b, n), generator=g) * mask
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def test_routed_loss_is_the_hand_computed_mixture():
    from nni_lvbert.iot.finetune import classification_loss

    model = classifier().eval()
    x, labels = batch(), torch.tensor([0, 1, 2, 0, 1, 2])
    with torch.no_grad():
        route, logits = model.all_orders(x)
    noise = torch.tensor(np.random.default_rng(0).gumbel(size=(6, 3)), dtype=torch.float32)
    tau, c1, c2, clamp = 2.0, 0.1, 0.01, 0.05
    out = classification_loss(route, logits, labels, tau=tau, c1=c1, c2=c2, clamp=clamp, noise=noise)
    r, lg, nz, y = route.double().numpy(), [t.double().numpy() for t in logits], noise.double().numpy(), labels.numpy()
    total = 0.0
    probs = []
    for i in range(6):
        p = np.exp(r[i] - r[i].max())
        p /= p.sum()
        probs.append(p)
        pc = np.clip(p, clamp, 1 - 2 * clamp)
        z = (np.log(pc) + nz[i]) / tau
        g = np.exp(z - z.max())
        g /= g.sum()
        ce = [math.log(np.exp(lg[m][i]).sum()) - lg[m][i][y[i]] for m in range(3)]
        total += float(np.dot(g, ce)) / 6
    probs = np.array(probs)
    l_d = -math.log(3) - np.log(probs.mean(0)).mean()
    l_s = np.mean(math.log(3) + np.log(np.clip(probs, clamp, 1 - 2 * clamp)).mean(1))
    assert float(out.mlm) == pytest.approx(total, rel=1e-5)
    assert float(out.total) == pytest.approx(total + c1 * l_d + c2 * l_s, rel=1e-5)
    alone = classification_loss(None, [logits[1]], labels)  # one order, no predictor: the mean cross-entropy
    assert float(alone) == pytest.approx(np.mean([math.log(np.exp(lg[1][i]).sum()) - lg[1][i][y[i]]
                                                  for i in range(6)]), rel=1e-5)


def test_argmax_routing_equals_each_instances_chosen_order():
    model = classifier().eval()
    with torch.no_grad():
        model.predictor.proj.weight.mul_(30.0)  # spread the choices over the orders
        for seed in range(3):
            x = batch(8, 12, seed)
            route, logits = model.all_orders(x)
            choice, routed = model.routed(x)
            assert torch.equal(choice, route.argmax(-1))
            want = torch.stack([logits[int(c)][i] for i, c in enumerate(choice)])
            torch.testing.assert_close(routed, want, rtol=1e-5, atol=1e-5)
    assert len(set(choice.tolist())) > 1


def test_statistics_oracle_bounds_every_order_and_routing():
    from nni_lvbert.iot.finetune import iot_statistics

    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 200)
    preds = np.where(rng.random((200, 3)) < 0.6, y[:, None], rng.integers(0, 3, (200, 3)))
    choice = rng.integers(0, 3, 200)
    st = iot_statistics({"labels": y.tolist(), "preds": preds.tolist(), "choice": choice.tolist(),
                         "routed": preds[np.arange(200), choice].tolist()})
    assert all(st["oracle"]["mean"] >= o["mean"] for o in st["orders_iot"])
    assert st["oracle"]["mean"] >= st["routed"]["mean"]
    right = preds == y[:, None]
    mixed = right.any(1) & ~right.all(1)
    assert st["mixed_instances"] == mixed.sum() and st["routed_equals_chosen_order"]
    assert st["agreement"] == pytest.approx(right[np.arange(200), choice][mixed].mean())
    assert sum(st["usage"]) == pytest.approx(1.0)


# --- tiny IOT runs (written directly: a supernet plus predictor and orders) ---------------------------------------
@pytest.fixture(scope="module")
def iot_run(tiny, tmp_path_factory):
    from nni_lvbert.iot.routing import OrderPredictor
    from nni_lvbert.iot.rundir import PREDICTOR, save_orders
    from nni_lvbert.rundir import RunDir

    run = build_tiny_supernet(tmp_path_factory.mktemp("iotft") / "iot", tiny["data"], spec=SPEC, steps=20,
                              size="tiny")
    torch.manual_seed(1)
    r = RunDir(run, "IOT")
    save_orders(r, ORDERS[:2], {"source": "explicit"})
    r.save_weights(OrderPredictor(32, 2), PREDICTOR)
    return run


def test_single_order_head_is_lvbert_for_sequence_classification(iot_run, tmp_path):
    """One order of the IOT weights with this head computes what `lvbert finetune`'s model does (the exported
    order in `LVBertForSequenceClassification`, the same classifier weights)."""
    from nni_lvbert.export import export_subnet
    from nni_lvbert.hf import LVBertForSequenceClassification
    from nni_lvbert.iot.finetune import OrderClassifier
    from nni_lvbert.iot.rundir import load_iot

    iot = load_iot(iot_run)
    model = OrderClassifier(iot.space, None, [iot.order_dicts[1]], 3, 0.1, 0).eval()
    export_subnet(iot_run, iot.orders[1].compact, tmp_path / "hf")
    hf = LVBertForSequenceClassification.from_pretrained(str(tmp_path / "hf"), num_labels=3).eval()
    hf.classifier.load_state_dict(model.classifier.state_dict())
    x = batch(5, 16, 3)
    x["input_ids"] = x["input_ids"] % 400 + 5 * x["attention_mask"]
    with torch.no_grad():
        torch.testing.assert_close(model.all_orders(x)[1][0], hf(**x).logits, rtol=1e-4, atol=1e-5)


def test_quick_on_sotu_era_then_resume_trains_nothing(iot_run, tmp_path, capsys):
    out = tmp_path / "ft"
    code, stdout, err = run_cli(["study", "iot-finetune", "--iot", str(iot_run), "--task", "sotu-era", "--quick",
                                 "--out", str(out), "--no-progress", "--json"], capsys)
    assert code == 0, err
    res = json.loads((out / "iot-finetune.json").read_text())
    assert res["seeds"] == [0] and res["m"] == 2 and res["task"] == "sotu-era" and res["dev_examples"] == 64
    assert res["recipe"]["steps"] == 8 and res["recipe"]["batch_size"] == 8
    p = res["per_seed"][0]
    assert p["routed_equals_chosen_order"]
    assert p["oracle"]["mean"] >= p["routed"]["mean"] and all(p["oracle"]["mean"] >= o["mean"]
                                                              for o in p["orders_iot"])
    assert set(p["standalone"]) == set(res["orders"]) and sum(p["usage"]) == pytest.approx(1.0)
    for s in p["standalone"].values():
        assert s["routed_minus_this"]["mean"] == pytest.approx(p["routed"]["mean"] - s["mean"])
    goal = res["goal"]
    assert goal["baseline"] in res["orders"] and goal["met"] == bool(
        goal["routed_minus_standalone"]["se"] and goal["routed_minus_standalone"]["mean"]
        > 2 * goal["routed_minus_standalone"]["se"])
    assert p["core_minutes"]["iot"] > 0 and "goal" in (out / "iot-finetune.md").read_text()
    assert (out / "iot-finetune.png").stat().st_size > 5000 and "IOT fine-tuning: training" in err
    assert json.loads(stdout.strip().splitlines()[-1])["goal"] == goal
    parts = sorted((out / "runs").rglob("*.json")) + [out / "scores" / "seed0.json"]
    assert len(parts) == 4
    stamps = {f: f.stat().st_mtime_ns for f in parts}
    (out / "scores" / "seed0.json").unlink()  # the seed's scores again, from its finished fine-tunings
    code, _, err = run_cli(["study", "iot-finetune", "--out", str(out), "--resume", "--no-progress"], capsys)
    assert code == 0, err
    assert ": training" not in err and err.count("finished earlier, skipped") == 3
    assert all(f.stat().st_mtime_ns == stamps[f] for f in parts[:3])
    assert json.loads((out / "iot-finetune.json").read_text())["per_seed"] == res["per_seed"]
    code, _, err = run_cli(["study", "iot-finetune", "--out", str(out), "--resume", "--no-progress"], capsys)
    assert code == 0 and "[seed 0 1/1] finished earlier: skipped" in err, err


def test_quick_on_a_glue_format_task_from_an_iot_study(iot_run, tmp_path, capsys):
    from tests.test_finetune import make_glue

    study = tmp_path / "iot-study"
    shutil.copytree(iot_run, study / "iot" / "seed0")
    (study / "options.json").write_text(json.dumps({"seed": 0, "num_seeds": None, "quick": True}))
    glue = make_glue(tmp_path / "glue")
    out = tmp_path / "ft"
    code, _, err = run_cli(["study", "iot-finetune", "--iot-study", str(study), "--task", "rte", "--task-data",
                            str(glue), "--quick", "--batch-size", "4", "--out", str(out), "--no-progress"], capsys)
    assert code == 0, err
    res = json.loads((out / "iot-finetune.json").read_text())
    assert res["task"] == "rte" and res["dev_examples"] == 4 and res["train_examples"] == 6
    assert res["iot_runs"][0].endswith("iot-study/iot/seed0") and res["seeds"] == [0]


def test_bad_input_is_one_line(iot_run, tmp_path, capsys):
    from tests.test_finetune import make_glue

    glue = make_glue(tmp_path / "glue")
    base = ["study", "iot-finetune", "--quick", "--no-progress"]
    for extra, message in (([], "--iot-study DIR"), (["--iot", str(iot_run)], "no task given"),
                           (["--iot", str(iot_run), "--task", "sts-b", "--task-data", str(glue)], "regression"),
                           (["--iot", str(tmp_path / "nope"), "--task", "sotu-era"], "not found"),
                           (["--iot-study", str(tmp_path), "--task", "sotu-era"], "not an `lvbert study iot`")):
        out = tmp_path / "out"
        code, _, err = run_cli([*base, *extra, "--out", str(out)], capsys)
        assert code == 2, err
        one_error_line(err, message, alone=False)
        assert not out.exists()
