"""IOT: hand-computed losses, predictor gradients, grouped routing = per-instance runs, collapse vs defaults,
the NNI one-shot training pipeline (run directory, eval, resume, from scratch) and CLI refusals."""
import json
import math

import pytest
import torch

from nni_lvbert.arch import to_dict
from nni_lvbert.cli import main
from nni_lvbert.config import SpaceSpec
from nni_lvbert.errors import UserError
from nni_lvbert.iot.orders import block_orders, explicit_orders, history_orders, parse_block, resolve_orders
from nni_lvbert.iot.routing import IOTModel, OrderPredictor, iot_loss, tau_at, usage_entropy
from tests.conftest import build_tiny_supernet, kill9_mid_training, tiny_config

SLOTS = 4
SPEC = SpaceSpec(name="iot4", slots=SLOTS, candidates=["dc", "sa", "ff", "glu"], size="tiny")
ORDERS = [["sa", "ff", "dc", "glu"], ["dc", "sa", "ff", "ff"], ["ff", "glu", "sa", "sa"]]


pytestmark = pytest.mark.usefixtures("one_thread")


def supernet_space(vocab=100, seed=0):
    from nni_lvbert.space import LVBertSpace
    from nni_lvbert.supernet.strategy import SeededRandomOneShot

    torch.manual_seed(seed)
    space = LVBertSpace(SPEC, tiny_config(vocab_size=vocab))
    SeededRandomOneShot().mutate_model(space)
    return space


def random_batch(b=8, n=20, vocab=100, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(5, n + 1, (b,), generator=g)
    lengths[0] = n
    mask = (torch.arange(n)[None] < lengths[:, None]).long()
    ids = torch.randint(5, vocab, (b, n), generator=g) * mask
    labels = torch.full((b, n), -100)
    where = (torch.rand(b, n, generator=g) < 0.3) & mask.bool()
    where[:, 1] = True  # every instance has a masked token...
    where[-1] = False  # ...except the last one
    labels[where] = ids[where]
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids), "labels": labels}


# --------------------------------------------------------------------------------------------------- losses


def test_tau_schedule_follows_official_base_gs():
    assert tau_at(0) == 10.0 and tau_at(4999) == 10.0
    assert tau_at(5000) == pytest.approx(10 * math.exp(-0.5))
    assert tau_at(10 ** 6) == 1.0
    assert tau_at(123456, tau=20, tau_min=2, decay=0) == 20  # README IWSLT recipe: constant 20


def test_iot_loss_matches_hand_computation():
    logits = [[2.0, 0.0, -1.0], [0.0, 0.0, 0.0], [5.0, 0.0, 0.0]]  # row 0 hits the lower clamp, row 2 the upper
    inst_loss = [[1.0, 2.0, 3.0], [0.5, 0.2, 0.9], [4.0, 4.0, 4.0]]
    count = [5, 3, 0]  # the last instance has no masked token
    noise = [[0.3, -0.1, 1.2], [0.0, 0.5, -0.4], [2.0, 0.1, 0.0]]
    tau, c1, c2, clamp, m = 2.0, 0.1, 0.01, 0.05, 3

    def softmax(v):
        e = [math.exp(x - max(v)) for x in v]
        return [x / sum(e) for x in e]

    p = [softmax(r) for r in logits]
    pc = [[min(max(x, clamp), 1 - (m - 1) * clamp) for x in r] for r in p]
    assert pc[0][2] == clamp and pc[2][0] == 0.9
    gamma = [softmax([(math.log(pc[i][j]) + noise[i][j]) / tau for j in range(m)]) for i in range(3)]
    mlm = sum(sum(gamma[i][j] * inst_loss[i][j] for j in range(m)) for i in (0, 1)) / 2
    pbar = [sum(p[i][j] for i in range(3)) / 3 for j in range(m)]
    l_d = sum((1 / m) * math.log((1 / m) / pbar[j]) for j in range(m))  # KL(u || mean p)
    l_s = -sum(sum((1 / m) * math.log((1 / m) / pc[i][j]) for j in range(m)) for i in range(3)) / 3  # -KL(u||pc)
    t = lambda v: torch.tensor(v, dtype=torch.float32)
    out = iot_loss(t(logits), t(inst_loss), t(count), tau=tau, c1=c1, c2=c2, clamp=clamp, noise=t(noise))
    assert out.mlm.item() == pytest.approx(mlm, rel=1e-5)
    assert out.diversity.item() == pytest.approx(l_d, rel=1e-5)
    assert out.sharpness.item() == pytest.approx(l_s, rel=1e-5)
    assert out.total.item() == pytest.approx(mlm + c1 * l_d + c2 * l_s, rel=1e-5)
    torch.testing.assert_close(out.weights, t(gamma))
    # no noise: deterministic weights softmax(log pc / tau)
    plain = iot_loss(t(logits), t(inst_loss), t(count), tau=tau, noise=None)
    torch.testing.assert_close(plain.weights[1], t([1 / 3] * 3))


def test_module_loss_equals_separate_per_instance_runs():
    """The strategy's training loss = sum over orders of Gumbel weight x (each instance run alone through it)."""
    from nni_lvbert.iot.routing import activate, path_layers
    from nni_lvbert.iot.strategy import IOTLightningModule
    from nni_lvbert.supernet.lightning_module import MLMModule

    space = supernet_space().eval()
    module = IOTLightningModule(MLMModule(), [to_dict(o) for o in ORDERS], 32, gumbel=False)
    module.set_model(space)
    module.predictor.eval()
    batch = random_batch()
    logits, results = module.order_results(batch)
    inst = torch.stack([r.loss for r in results], -1)
    count = results[0].count
    for j in range(len(ORDERS)):
        activate(path_layers(space), to_dict(ORDERS[j]))
        for i in range(7):  # the last instance has nothing masked
            n = int(batch["attention_mask"][i].sum())
            alone = space(batch["input_ids"][i:i + 1, :n], batch["attention_mask"][i:i + 1, :n],
                          batch["token_type_ids"][i:i + 1, :n], labels=batch["labels"][i:i + 1, :n])
            assert inst[i, j].item() == pytest.approx(alone.loss.item(), abs=1e-5)
            assert results[j].correct[i].item() == alone.correct.item()
    assert count[-1] == 0 and inst[-1].abs().sum() == 0
    out = iot_loss(logits, inst, count, tau=10.0, noise=None)
    gamma = torch.softmax(torch.log(torch.softmax(logits, -1).clamp(0.05, 0.9)) / 10.0, -1)
    assert out.mlm.item() == pytest.approx((gamma * inst).sum(-1)[:7].mean().item(), rel=1e-5)


def test_predictor_gradients_are_nonzero():
    from nni_lvbert.iot.routing import gumbel_noise
    from nni_lvbert.iot.strategy import IOTLightningModule
    from nni_lvbert.supernet.lightning_module import MLMModule

    module = IOTLightningModule(MLMModule(), [to_dict(o) for o in ORDERS], 32)
    module.set_model(supernet_space())
    batch = random_batch()
    for term in ("mlm", "diversity", "sharpness", "total"):
        module.zero_grad()
        logits, results = module.order_results(batch)
        noise = gumbel_noise(tuple(logits.shape), torch.Generator().manual_seed(1))
        out = iot_loss(logits, torch.stack([r.loss for r in results], -1), results[0].count, tau=1.0, noise=noise)
        getattr(out, term).backward()
        grad = module.predictor.proj.weight.grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, term
    # the MLM term also trains the shared slot weights
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in module.model.layers.parameters())


# ---------------------------------------------------------------------------------------------------- routing


def test_grouped_routing_equals_each_instance_alone():
    space = supernet_space().eval()
    predictor = OrderPredictor(32, len(ORDERS))
    torch.nn.init.normal_(predictor.proj.weight, std=30.0)  # spread the batch over the orders
    model = IOTModel(space, predictor, ORDERS).eval()
    batch = random_batch(b=12, seed=3)
    args = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], batch["labels"])
    out = model(*args)
    assert len(set(out.choice.tolist())) >= 2
    for i in range(12):
        n = int(batch["attention_mask"][i].sum())
        k = int(out.choice[i])
        h, r = model.forward_order(k, *(a[i:i + 1, :n] for a in args))
        torch.testing.assert_close(out.hidden[i, :n], h[0], rtol=0, atol=1e-5)
        assert abs(out.mlm.loss[i].item() - r.loss.item()) <= 1e-5
        assert out.mlm.correct[i].item() == r.correct.item()
    # untrimmed groups give the same answer; and the routed result equals gathering from full-batch order runs
    untrimmed = model(*args, trim=False)
    torch.testing.assert_close(untrimmed.mlm.loss, out.mlm.loss, rtol=0, atol=1e-5)
    full = torch.stack([model.forward_order(k, *args)[1].loss for k in range(len(ORDERS))], -1)
    torch.testing.assert_close(full.gather(1, out.choice[:, None])[:, 0], out.mlm.loss, rtol=0, atol=1e-5)


def test_usage_entropy():
    assert usage_entropy([5, 5, 5, 5]) == pytest.approx(1.0)
    assert usage_entropy([10, 0, 0]) == 0.0


# ----------------------------------------------------------------------------------------------------- orders


def test_block_orders_are_distinct_permutations():
    block = parse_block("sa,ff,dc", SPEC)
    assert parse_block("sfc", SPEC) == block == ["sa", "ff", "dc"]
    orders = block_orders(block, 4, SPEC)
    assert orders[0] == ["sa", "ff", "dc", "sa"] and len({tuple(o) for o in orders}) == 4
    with pytest.raises(UserError, match="only 6 distinct"):
        block_orders(block, 7, SPEC)
    with pytest.raises(UserError, match="unknown layer letter"):
        parse_block("sfx", SPEC)


def test_history_reader_is_tolerant(tmp_path):
    lines = [json.dumps({"arch": "sfcs", "score": 0.30}),
             json.dumps({"arch": to_dict(["dc", "dc", "sa", "ff"]), "score": 0.50}),
             json.dumps({"arch": "sfcs", "score": 0.35}),
             json.dumps({"arch": "ssss"}),  # no score: skipped
             json.dumps({"strategy": "x", "arch_dict": to_dict(["ff"] * 4), "score": 0.1}),
             '{"arch": "cc']  # torn tail
    (tmp_path / "history.jsonl").write_text("\n".join(lines))
    orders, scores = history_orders(tmp_path, 3, SPEC)
    assert orders == [["dc", "dc", "sa", "ff"], ["sa", "ff", "dc", "sa"], ["ff"] * 4]
    assert scores == [0.5, 0.35, 0.1]
    with pytest.raises(UserError, match="3 distinct scored"):
        history_orders(tmp_path, 4, SPEC)
    assert explicit_orders(["sfcs", "cccc"], SPEC) == [["sa", "ff", "dc", "sa"], ["dc"] * 4]
    with pytest.raises(UserError, match="same architecture"):
        explicit_orders(["sfcs", "sfcs"], SPEC)


def test_default_orders_source_is_the_quickstart_search(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="no candidate orders: runs/quickstart/search not found"):
        resolve_orders(SPEC)
    with pytest.raises(UserError, match="one source"):
        resolve_orders(SPEC, orders=["sfcs", "cccc"], block="sa,ff")


# -------------------------------------------------------------------------------------- training pipeline



@pytest.fixture(scope="module")
def data(tiny):
    return tiny["data"]


@pytest.fixture(scope="module")
def supernet(tmp_path_factory, data):
    """A supernet run directory (4 slots, hidden 32) after 30 SPOS steps with a plain loop (conftest's builder)."""
    return build_tiny_supernet(tmp_path_factory.mktemp("sn") / "supernet", data, spec=SPEC, steps=30, size="tiny")


def iot_args(run_dir, supernet, steps=12, *extra):
    return ["iot", "train", "--supernet", str(supernet), "--out", str(run_dir), "--max-steps", str(steps),
            "--batch-size", "8", "--val-every", "6", "--val-batches", "2", "--ckpt-every", "3",
            "--warmup-steps", "2", "--lr", "3e-3", "--no-progress", *extra]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, supernet):
    run = tmp_path_factory.mktemp("iotruns") / "a"
    assert main(iot_args(run, supernet, 12, "--block", "sa,ff,dc", "--m", "3")) == 0
    return run


def test_run_dir_is_a_loadable_model(trained, data):
    from nni_lvbert.iot.rundir import load_iot

    for f in ["supernet.safetensors", "predictor.safetensors", "orders.json", "space.yaml", "model_config.json",
              "meta.json", "checkpoints/last.ckpt", "tokenizer/tokenizer.json", "logs/csv/metrics.csv"]:
        assert (trained / f).exists(), f
    meta = json.loads((trained / "meta.json").read_text())
    assert meta["steps"] == 12 and len(meta["validation"]) == 2
    assert meta["orders"] == ["sfcs", "scfs", "fscf"] and meta["orders_source"]["source"] == "block"
    final = meta["final"]
    assert sum(o["usage"] for o in final["orders"]) == pytest.approx(1.0)
    assert final["routed"]["val_mlm_acc"] == pytest.approx(final["routed_grouped"]["val_mlm_acc"], abs=1e-9)
    assert final["oracle"]["val_mlm_acc"] >= max(o["val_mlm_acc"] for o in final["orders"]) - 1e-12
    model = load_iot(trained)
    ckpt = torch.load(trained / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    torch.testing.assert_close(model.predictor.proj.weight, ckpt["state_dict"]["predictor.proj.weight"])
    for name, t in model.space.state_dict().items():
        torch.testing.assert_close(t, ckpt["state_dict"][f"training_module._model.{name}"], rtol=0, atol=0)


def test_eval_cli_reports_usage_and_accuracies(trained, capsys):
    assert main(["iot", "eval", "--out", str(trained), "--val-batches", "2", "--batch-size", "8",
                 "--no-progress", "--json"]) == 0
    captured = capsys.readouterr()
    stats = json.loads(captured.out)
    assert [o["arch"] for o in stats["orders"]] == ["sfcs", "scfs", "fscf"]
    assert stats["sequences"] == 16 and 0 <= stats["routed"]["val_mlm_acc"] <= 1
    assert stats["batches"] == 2 < stats["of_batches"]  # says how much of the validation split it scored
    assert json.loads((trained / "eval.json").read_text())["routed"] == stats["routed"]


@pytest.mark.slow
def test_collapse_without_diversity_and_noise_but_not_with_defaults(tmp_path, supernet):
    common = ["--block", "sa,ff,dc", "--m", "3", "--val-every", "1000"]
    assert main(iot_args(tmp_path / "collapse", supernet, 60, *common, "--c1", "0", "--no-gumbel")) == 0
    assert main(iot_args(tmp_path / "default", supernet, 60, *common)) == 0
    collapsed = json.loads((tmp_path / "collapse" / "meta.json").read_text())["final"]
    default = json.loads((tmp_path / "default" / "meta.json").read_text())["final"]
    assert collapsed["max_usage"] >= 0.9, collapsed["orders"]
    assert default["usage_entropy"] >= 0.6, default["orders"]


def test_resume_continues_and_checks_orders(tmp_path, supernet, capsys):
    run = tmp_path / "r"
    assert main(iot_args(run, supernet, 6, "--block", "sa,ff,dc", "--m", "3")) == 0
    assert main(iot_args(run, supernet, 6, "--block", "sa,ff,dc", "--m", "3")) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(iot_args(run, supernet, 6, "--orders", "ssss", "ffff", "--resume")) == 2
    assert "other orders" in capsys.readouterr().err
    assert main(iot_args(run, supernet, 10, "--resume")) == 2  # the schedule was made for 6 steps
    assert "--max-steps 10 contradicts" in capsys.readouterr().err
    # the same orders in another spelling are fine; everything else comes from the run directory
    assert main(["iot", "train", "--out", str(run), "--resume", "--block", "sfc", "--m", "3", "--no-progress"]) == 0
    meta = json.loads((run / "meta.json").read_text())
    assert meta["steps"] == 6 and meta["orders"] == json.loads((run / "orders.json").read_text())["orders"]


@pytest.mark.slow
def test_resume_after_kill9_ends_with_the_uninterrupted_weights(tmp_path, supernet):
    """Kill -9 mid-run, --resume: the very weights and predictor of an uninterrupted run (batches, masks and Gumbel
    noise are functions of (seed, step), and checkpoints are written atomically)."""
    from safetensors.torch import load_file

    steps, common = 8, ["--block", "sa,ff,dc", "--m", "3", "--ckpt-every", "1"]
    reference, run = tmp_path / "reference", tmp_path / "killed"
    assert main(iot_args(reference, supernet, steps, *common)) == 0
    killed_at = kill9_mid_training(iot_args(run, supernet, steps, *common), run / "checkpoints" / "last.ckpt", 3, steps)
    assert killed_at is not None, "training finished before it could be killed"
    assert not (run / "predictor.safetensors").exists()
    assert main(["iot", "train", "--out", str(run), "--resume"]) == 0  # the options come from the run directory
    for name in ("supernet.safetensors", "predictor.safetensors"):
        a, b = load_file(reference / name), load_file(run / name)
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6)
    assert json.loads((run / "meta.json").read_text())["steps"] == steps


def test_from_scratch_on_a_space(tmp_path, data):
    space = tmp_path / "s4.yaml"
    space.write_text("name: s4\nslots: 4\ncandidates: [dc, sa, ff, glu]\nsize: tiny\n")
    run = tmp_path / "scratch"
    assert main(["iot", "train", "--space", str(space), "--data", str(data.path), "--orders", "sfcs", "cccc",
                 "--out", str(run), "--max-steps", "4", "--batch-size", "8", "--val-every", "4",
                 "--val-batches", "1", "--no-progress"]) == 0
    meta = json.loads((run / "meta.json").read_text())
    assert meta["start"] == {"scratch": True} and meta["orders"] == ["sfcs", "cccc"]


# ------------------------------------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("extra, message", [
    (["--orders", "sfxq", "sfcs"], "unknown layer letter"),
    (["--orders", "sfcsfc", "ssssss"], "arch has 6 slots but space 'iot4' has 4"),
    (["--orders", "sfcs"], "at least 2 candidate orders"),
    (["--block", "sa,ff", "--m", "1"], "at least 2 candidate orders"),
    (["--block", "sa,ff,dc", "--clamp", "0.5"], "--clamp must be in"),
    (["--orders-from", "/nonexistent/search"], "search directory not found"),
])
def test_cli_bad_orders_exit_2_with_one_line(tmp_path, supernet, capsys, extra, message):
    assert main(iot_args(tmp_path / "x", supernet, 2, *extra)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "x").exists()


def test_cli_orders_from_a_search_of_another_space(tmp_path, supernet, capsys):
    (tmp_path / "search").mkdir()
    (tmp_path / "search" / "history.jsonl").write_text(json.dumps({"arch": "sfsfsf", "score": 0.2}) + "\n")
    assert main(iot_args(tmp_path / "x", supernet, 2, "--orders-from", str(tmp_path / "search"))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "record 1: arch has 6 slots" in err


def test_cli_missing_supernet_and_start(tmp_path, capsys):
    assert main(["iot", "train", "--supernet", str(tmp_path / "none"), "--orders", "sfcs", "cccc"]) == 2
    assert "supernet directory not found" in capsys.readouterr().err
    assert main(["iot", "train", "--orders", "sfcs", "cccc"]) == 2
    assert "--supernet RUN_DIR" in capsys.readouterr().err
    assert main(["iot", "eval", "--out", str(tmp_path)]) == 2
    assert "not a finished IOT run" in capsys.readouterr().err
