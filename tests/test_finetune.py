"""Fine-tuning: GLUE files in their own layouts and quirks, labelled CSV/JSONL, metrics, LV-BERT's layer-wise lr
decay, and `lvbert finetune` / `lvbert glue` end to end on a tiny model (embedded task, resume, bad input)."""
import hashlib
import json
import math
from pathlib import Path

import pytest
import torch

from nni_lvbert.errors import UserError
from nni_lvbert.finetune import metrics as M
from nni_lvbert.finetune.recipe import optimizer_and_schedule, param_groups
from nni_lvbert.finetune.tasks import find_glue_tasks, load_task
from tests.conftest import one_error_line, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")

PAIRS = [("The cat sat.", "A cat was sitting."), ("It rains.", "The sun shines."), ("He left.", "He went away."),
         ("Stocks fell.", "Markets rose."), ("She sings.", "She is singing."), ("No way.", "Yes indeed.")]


def write(path: Path, lines, bom: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + ("\n".join(lines) + "\n").encode("utf-8"))


def make_glue(root: Path) -> Path:
    """Every GLUE task in the layout and quirks of GLUE's download script (6 train, 4 dev examples each)."""
    t = "\t"
    for split, n in (("train", 6), ("dev", 4)):
        rows = PAIRS[:n]
        write(root / "CoLA" / f"{split}.tsv", [f"gj04{t}{i % 2}{t}{'' if i % 2 else '*'}{t}{a}" for i, (a, _) in
                                                enumerate(rows)])  # no header
        write(root / "SST-2" / f"{split}.tsv", [f"sentence{t}label"] + [f"{a}{t}{i % 2}" for i, (a, _) in enumerate(rows)])
        write(root / "MRPC" / f"{split}.tsv", [f"Quality{t}#1 ID{t}#2 ID{t}#1 String{t}#2 String"]
              + [f"{i % 2}{t}{100 + i}{t}{200 + i}{t}{a}{t}{b}" for i, (a, b) in enumerate(rows)], bom=True)
        write(root / "STS-B" / f"{split}.tsv",
              [t.join(["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
                       "sentence2", "score"])]
              + [t.join([str(i), "main-captions", "MSRvid", "2012test", f"{i:04d}", "none", "none", a, b,
                         f"{i * 0.8:.3f}"]) for i, (a, b) in enumerate(rows)])
        write(root / "QQP" / f"{split}.tsv", [f"id{t}qid1{t}qid2{t}question1{t}question2{t}is_duplicate"]
              + [f"{i}{t}{i}{t}{i + 50}{t}{a}{t}{b}{t}{i % 2}" for i, (a, b) in enumerate(rows)]
              + ([f"99{t}1{t}2{t}a question cut short"] if split == "train" else []))  # malformed
        for name, labels in (("QNLI", ("entailment", "not_entailment")), ("RTE", ("entailment", "not_entailment")),
                             ("WNLI", ("0", "1"))):
            cols = ("question", "sentence") if name == "QNLI" else ("sentence1", "sentence2")
            write(root / name / f"{split}.tsv", [f"index{t}{cols[0]}{t}{cols[1]}{t}label"]
                  + [f"{i}{t}{a}{t}{b}{t}{labels[i % 2]}" for i, (a, b) in enumerate(rows)])
    nli = ("contradiction", "entailment", "neutral")
    head = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
            "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]
    write(root / "MNLI" / "train.tsv", [t.join(head + ["label1", "gold_label"])]
          + [t.join([str(i), "1", "2", "fiction", "( a )", "( b )", "(S a)", "(S b)", a, b, nli[i % 3], nli[i % 3]])
             for i, (a, b) in enumerate(PAIRS)] + [f"7{t}1{t}broken line"])  # malformed (as in the release)
    for dev in ("dev_matched", "dev_mismatched"):
        write(root / "MNLI" / f"{dev}.tsv", [t.join(head + [f"label{k}" for k in range(1, 6)] + ["gold_label"])]
              + [t.join([str(i), "1", "2", "fiction", "( a )", "( b )", "(S a)", "(S b)", a, b, *[nli[i % 3]] * 5,
                         nli[i % 3]]) for i, (a, b) in enumerate(PAIRS[:3])])
    return root


# --- readers ------------------------------------------------------------------------------------------------------

def test_every_glue_task_reads_its_own_layout(tmp_path, capsys):
    root = make_glue(tmp_path / "glue")
    assert find_glue_tasks(root) == ["cola", "sst-2", "mrpc", "sts-b", "qqp", "mnli", "qnli", "rte", "wnli"]
    cola = load_task("cola", root / "CoLA")  # a task folder, no header
    assert cola.train.text_a[0] == "The cat sat." and cola.train.labels[:2] == ["0", "1"] and len(cola.train) == 6
    assert cola.metrics == ("mcc",) and cola.epochs == 3
    mrpc = load_task("MRPC", root)  # the GLUE root; the byte-order mark does not hide the "Quality" column
    assert mrpc.train.text_b[0] == "A cat was sitting." and mrpc.swap_double and mrpc.metrics == ("acc", "f1")
    sts = load_task("sts-b", root)
    assert sts.kind == "regression" and sts.label_scale == 5.0 and sts.train.labels[-1] == pytest.approx(4.0)
    assert sts.epochs == 10 and sts.metrics == ("spearman", "pearson")
    qqp = load_task("qqp", root)
    assert len(qqp.train) == 6 and qqp.skipped["train.tsv"] == 1
    mnli = load_task("mnli", root)
    assert list(mnli.dev) == ["dev_matched", "dev_mismatched"] and mnli.skipped["train.tsv"] == 1
    assert mnli.label_names == ["contradiction", "entailment", "neutral"] and mnli.train.labels[1] == "entailment"
    assert "skipped 1 malformed line(s)" in capsys.readouterr().err
    assert load_task("rte", root).epochs == 10 and load_task("qnli", root).train.text_a[0] == "The cat sat."
    assert load_task("sst2", root).label_names == ["0", "1"]



# The hub's GLUE (nyu-mll/glue) as `datasets` gives it: its column names, ClassLabel names and split names.
HUB_GLUE = {
    "cola": (("sentence", None), ["unacceptable", "acceptable"]),
    "stsb": (("sentence1", "sentence2"), None),
    "mnli": (("premise", "hypothesis"), ["entailment", "neutral", "contradiction"]),
    "wnli": (("sentence1", "sentence2"), ["not_entailment", "entailment"]),
}


def hub_glue(config: str):
    import datasets

    (a, b), names = HUB_GLUE[config]
    feats = {a: datasets.Value("string"), **({b: datasets.Value("string")} if b else {}),
             "label": datasets.Value("float32") if names is None else datasets.ClassLabel(names=names),
             "idx": datasets.Value("int32")}

    def split(labels):
        rows = {a: [f"first {i}" for i in range(len(labels))], "label": labels, "idx": list(range(len(labels)))}
        if b:
            rows[b] = [f"second {i}" for i in range(len(labels))]
        return datasets.Dataset.from_dict(rows, features=datasets.Features(feats))

    labels = [4.5, 0.0, 2.2] if names is None else [0, 1, len(names) - 1]
    splits = ("validation_matched", "validation_mismatched") if config == "mnli" else ("validation",)
    return datasets.DatasetDict({"train": split(labels), "test": split([-1.0] * 3 if names is None else [-1] * 3),
                                 **{k: split(labels[::-1]) for k in splits}})


def test_hub_glue_maps_its_columns_and_labels_to_the_tsv_ones(monkeypatch):
    import datasets

    asked = []

    def load_dataset(path, config):
        asked.append((path, config))
        return hub_glue(config)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    cola = load_task("glue:cola")
    assert asked == [("nyu-mll/glue", "cola")]
    assert cola.train.text_a == ["first 0", "first 1", "first 2"] and cola.train.text_b is None
    assert cola.train.labels == ["0", "1", "1"] and cola.label_names == ["0", "1"]  # 1 = acceptable, as CoLA's TSV
    sts = load_task("glue:stsb")
    assert sts.kind == "regression" and sts.train.labels == pytest.approx([4.5, 0.0, 2.2])
    assert sts.train.text_b[0] == "second 0" and sts.label_scale == 5.0
    mnli = load_task("glue:mnli")
    assert list(mnli.dev) == ["dev_matched", "dev_mismatched"] and mnli.train.text_a[0] == "first 0"
    assert mnli.train.labels == ["entailment", "neutral", "contradiction"]  # by name, not by index
    assert mnli.dev["dev_mismatched"].labels == ["contradiction", "neutral", "entailment"]
    assert load_task("glue:wnli").train.labels == ["0", "1", "1"]  # 1 = entailment, as WNLI's TSV
    with pytest.raises(UserError, match="unknown hub task 'glue:nope'"):
        load_task("glue:nope")

    def offline(*a, **k):
        raise ConnectionError("Couldn't reach 'nyu-mll/glue' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(UserError, match=r"cannot load glue:rte from the Hugging Face hub \(offline\?.*--task rte "
                                        r"--data DIR"):
        load_task("glue:rte")

def test_labelled_files_csv_jsonl_and_their_errors(tmp_path):
    d = tmp_path / "csv"
    d.mkdir()
    (d / "train.csv").write_text('text,other,y\n"Hello, world",x,pos\nbad day,x,neg\nok,x,pos\n', encoding="utf-8")
    (d / "dev.jsonl").write_text("\n".join(json.dumps({"text": t, "other": "x", "y": y})
                                           for t, y in (("fine", "pos"), ("awful", "neg"))) + "\n")
    task = load_task("mine", d, text_column="text", label_column="y")
    assert task.label_names == ["neg", "pos"] and task.train.text_a[0] == "Hello, world" and task.metrics == ("acc", "f1")
    pair = load_task("mine", d, text_column="text", pair_column="other", label_column="y")
    assert pair.train.text_b == ["x", "x", "x"]
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "pq"
    p.mkdir()
    pq.write_table(pa.Table.from_pylist([{"text": "good", "y": 1.5}, {"text": "bad", "y": -0.5}]), p / "train.parquet")
    pq.write_table(pa.Table.from_pylist([{"text": "fine", "y": 0.25}]), p / "dev.parquet")
    reg = load_task("mine", p, text_column="text", label_column="y", task_type="regression")
    assert reg.kind == "regression" and reg.train.labels == [1.5, -0.5] and reg.dev["dev"].text_a == ["fine"]
    (d / "dev.jsonl").write_text(json.dumps({"text": "t", "other": "x", "y": "meh"}) + "\n")
    with pytest.raises(UserError, match="'meh' never occur"):
        load_task("mine", d, text_column="text", label_column="y")
    with pytest.raises(UserError, match="no column 'sentence'"):
        load_task("mine", d, text_column="sentence", label_column="y")
    with pytest.raises(UserError, match="not numeric"):
        load_task("mine", d, text_column="text", label_column="y", task_type="regression")
    (d / "dev.jsonl").unlink()
    with pytest.raises(UserError, match="missing split"):
        load_task("mine", d, text_column="text", label_column="y")
    (d / "dev.csv").write_text("")
    with pytest.raises(UserError, match="is empty"):
        load_task("mine", d, text_column="text", label_column="y")


def test_task_errors_are_one_line(tmp_path):
    root = make_glue(tmp_path / "glue")
    with pytest.raises(UserError, match="unknown task 'colaa'"):
        load_task("colaa", root)
    (root / "RTE" / "dev.tsv").unlink()
    with pytest.raises(UserError, match="missing split.*RTE/dev.tsv"):
        load_task("rte", root)
    (root / "SST-2" / "train.tsv").write_text("")
    with pytest.raises(UserError, match="is empty"):
        load_task("sst-2", root)
    (root / "QNLI" / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n")
    with pytest.raises(UserError, match="no column 'question'"):
        load_task("qnli", root)
    with pytest.raises(UserError, match="needs --data"):
        load_task("cola")


def test_embedded_task_is_shipped_and_rebuilds_byte_identically():
    from nni_lvbert.finetune.embedded.build_sotu_era import OUT, build

    task = load_task("sotu-era")
    assert len(task.train) == 2000 and len(task.dev["dev"]) == 500 and len(task.label_names) == 4
    assert hashlib.sha256(build()).hexdigest() == hashlib.sha256(OUT.read_bytes()).hexdigest()


# --- metrics ------------------------------------------------------------------------------------------------------

def test_metrics_against_hand_computed_values():
    y, p = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]  # TP 2, FN 1, FP 1, TN 1
    m = M.compute(("acc", "f1", "mcc"), p, y)
    assert m["acc"] == pytest.approx(60.0) and m["f1"] == pytest.approx(100 * 2 * 2 / (2 * 2 + 1 + 1))
    assert m["mcc"] == pytest.approx(100 * (2 * 1 - 1 * 1) / math.sqrt(3 * 3 * 2 * 2))
    r = M.compute(("spearman", "pearson"), [1.0, 2.0, 3.0, 5.0], [1.0, 3.0, 2.0, 4.0])
    assert r["spearman"] == pytest.approx(80.0)  # ranks 1234 vs 1324: 1 - 6*2/(4*15)
    assert r["pearson"] == pytest.approx(100 * 0.8315218, abs=1e-4)
    assert M.task_score({"dev_matched": {"acc": 80.0}, "dev_mismatched": {"acc": 70.0}}) == 75.0
    s = M.summarize({0: {"score": 50.0, "dev": {"dev": {"acc": 50.0}}}, 1: {"score": 70.0, "dev": {"dev": {"acc": 70.0}}},
                     2: {"score": 60.0, "dev": {"dev": {"acc": 60.0}}}})
    assert s["score_median"] == 60.0 and s["per_seed"]["dev/acc"] == {"0": 50.0, "1": 70.0, "2": 60.0}
    scores = {t: float(i) for i, t in enumerate(["cola", "sst-2", "mrpc", "sts-b", "qqp", "mnli", "qnli", "rte"])}
    assert M.glue_score({**scores, "wnli": 100.0}) == 3.5 and M.glue_score({"cola": 1.0}) is None


# --- layer-wise learning-rate decay ------------------------------------------------------------------------------

def test_llrd_groups_follow_the_official_depths():
    from nni_lvbert.hf import LVBertConfig, LVBertForSequenceClassification

    config = LVBertConfig(layer_types=["dc", "sa", "ff", "glu"] * 6, vocab_size=50, hidden_size=16, embedding_size=8,
                          ff_size=32, num_heads=2, conv_head_size=8, max_position=32, num_labels=3)
    model = LVBertForSequenceClassification(config)
    groups = param_groups(model, lr=1.0, weight_decay=0.01, decay=0.8)
    depth_of = {n: g["depth"] for g in groups for n in g["names"]}
    lr_of = {g["depth"]: g["lr"] for g in groups}
    assert {depth_of[n] for n in depth_of if ".embeddings." in n} == {0}
    for slot in range(24):  # block i = slots (2i, 2i+1) at depth i + 1
        assert {depth_of[n] for n in depth_of if f".layers.{slot}." in n} == {slot // 2 + 1}
    assert depth_of["classifier.weight"] == 14 and 13 not in lr_of  # the official gap: no depth 13
    assert lr_of[14] == 1.0 and lr_of[12] == pytest.approx(0.8 ** 2) and lr_of[0] == pytest.approx(0.8 ** 14)
    assert sorted(lr_of) == list(range(13)) + [14]
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
    no_wd = {n for g in groups if g["weight_decay"] == 0.0 for n in g["names"]}
    assert "classifier.bias" in no_wd and "classifier.weight" not in no_wd
    opt, sched = optimizer_and_schedule(model, 1e-3, total_steps=100)
    assert opt.defaults["eps"] == 1e-6
    lrs = []
    for _ in range(100):
        lrs.append(opt.param_groups[-1]["lr"])
        opt.step()
        sched.step()
    assert lrs[9] == pytest.approx(1e-3) and lrs[0] == pytest.approx(1e-4) and lrs[-1] == pytest.approx(1e-3 / 90)


def test_llrd_groups_for_bert():
    from transformers import BertConfig, BertForSequenceClassification

    model = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=3,
                                                     num_attention_heads=2, intermediate_size=32))
    depth_of = {n: g["depth"] for g in param_groups(model, 1.0) for n in g["names"]}
    assert depth_of["bert.encoder.layer.2.output.dense.weight"] == 3 and depth_of["classifier.weight"] == 5
    assert depth_of["bert.embeddings.word_embeddings.weight"] == 0


def test_training_sets_of_mrpc_and_stsb_are_doubled_swapped(tmp_path, model_dir):
    from transformers import PreTrainedTokenizerFast

    from nni_lvbert.finetune.module import collate, encode

    tok = PreTrainedTokenizerFast.from_pretrained(str(model_dir))
    task = load_task("sts-b", make_glue(tmp_path / "glue"))
    rows = encode(tok, task.train, task, 32, train=True)
    assert len(rows) == 12 and rows[5]["labels"] == pytest.approx(0.8) and rows[11]["labels"] == rows[5]["labels"]
    assert rows[6]["input_ids"] == tok("A cat was sitting.", "The cat sat.")["input_ids"]
    assert len(encode(tok, task.dev["dev"], task, 32, train=False)) == 4
    batch = collate(rows[:3], tok.pad_token_id, True)
    assert batch["input_ids"].shape[1] == max(len(r["input_ids"]) for r in rows[:3])  # dynamic padding
    assert batch["labels"].dtype == torch.float


# --- end to end ---------------------------------------------------------------------------------------------------

QUICK = ["--max-length", "32", "--batch-size", "8", "--no-progress", "--accelerator", "cpu"]


def test_finetune_embedded_task_end_to_end_and_resume(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["finetune", "--model", str(model_dir), "--task", "sotu-era", "--out", str(out), *QUICK,
            "--max-train-examples", "32", "--epochs", "2", "--seeds", "0", "1"]
    code, stdout, err = run_cli(args, capsys)
    assert code == 0, err
    assert "sotu-era" in stdout and "glue_score" not in stdout  # no `glue_score None` for a task outside GLUE
    res = json.loads((out / "results.json").read_text())
    r = res["tasks"]["sotu-era"]
    assert r["seeds"] == [0, 1] and set(r["score_per_seed"]) == {"0", "1"} and len(r["curves"]["0"]) == 2
    assert 0 <= r["score_median"] <= 100 and (out / "dev_curve.png").stat().st_size > 1000
    assert "| sotu-era | acc" in (out / "results.md").read_text()
    meta = json.loads((out / "sotu-era" / "seed0" / "meta.json").read_text())
    assert meta["steps"] == 8 and meta["steps_per_epoch"] == 4 and not (out / "sotu-era/seed0/checkpoints/last.ckpt").exists()
    code, _, err = run_cli(["finetune", "--out", str(out), "--resume", "--no-progress"], capsys)
    assert code == 0 and err.count("finished earlier: skipped") == 2
    assert json.loads((out / "results.json").read_text())["tasks"]["sotu-era"]["score_per_seed"] == r["score_per_seed"]
    code, _, err = run_cli(["finetune", "--out", str(out), "--resume", "--seeds", "3"], capsys)
    assert code == 2 and "contradicts" in one_error_line(err)
    code, _, err = run_cli(args, capsys)
    assert code == 2 and "not empty" in one_error_line(err)


def test_compiled_finetuning_scores_as_eager(model_dir, tmp_path, capsys):
    """--compile on padded batches of varying length (packed real tokens, attention masks): no graph break, and the
    same dev predictions as eager (aot_eager: graph capture without a C++ build)."""
    from torch._dynamo.utils import counters

    args = ["finetune", "--model", str(model_dir), "--task", "sotu-era", *QUICK, "--max-train-examples", "32",
            "--epochs", "1", "--seeds", "0"]
    code, _, err = run_cli([*args, "--out", str(tmp_path / "eager")], capsys)
    assert code == 0, err
    torch._dynamo.reset()  # compiled code of an earlier test would be reused: no new graphs to count
    counters.clear()
    code, _, err = run_cli([*args, "--out", str(tmp_path / "compiled"), "--compile", "aot_eager"], capsys)
    assert code == 0, err
    assert counters["stats"]["unique_graphs"] >= 4 and not counters["graph_break"], dict(counters["graph_break"])
    score = [json.loads((tmp_path / d / "results.json").read_text())["tasks"]["sotu-era"]["score_per_seed"]
             for d in ("eager", "compiled")]
    assert score[0] == score[1]


def test_save_model_writes_a_directory_that_reproduces_the_dev_score(model_dir, tmp_path, capsys):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from nni_lvbert.finetune.module import collate, encode
    from nni_lvbert.finetune.tasks import load_task

    out = tmp_path / "run"
    code, _, err = run_cli(["finetune", "--model", str(model_dir), "--task", "sotu-era", "--out", str(out), *QUICK,
                            "--max-train-examples", "16", "--epochs", "1", "--save-model"], capsys)
    assert code == 0, err
    meta = json.loads((out / "sotu-era" / "seed0" / "meta.json").read_text())
    saved = out / "sotu-era" / "seed0" / "model"
    assert meta["model"] == str(saved) and not list(saved.parent.glob(".model.*"))
    model = AutoModelForSequenceClassification.from_pretrained(str(saved)).eval()
    tok = AutoTokenizer.from_pretrained(str(saved))
    task = load_task("sotu-era")
    assert [model.config.id2label[i] for i in range(4)] == list(task.label_names)
    rows = encode(tok, task.dev["dev"], task, 32, train=False)
    correct = 0
    with torch.no_grad():
        for i in range(0, len(rows), 64):
            batch = collate(rows[i:i + 64], tok.pad_token_id, False)
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           token_type_ids=batch.get("token_type_ids")).logits
            correct += int((logits.argmax(-1) == batch["labels"]).sum())
    assert 100 * correct / len(rows) == pytest.approx(meta["dev"]["dev"]["acc"], abs=1e-6)


@pytest.mark.slow
def test_kill9_then_resume_finishes_the_run(model_dir, tmp_path, capsys):
    from tests.conftest import kill9_mid_training

    out = tmp_path / "run"
    args = ["finetune", "--model", str(model_dir), "--task", "sotu-era", "--out", str(out), *QUICK,
            "--max-train-examples", "32", "--epochs", "3", "--ckpt-every", "1", "--save-model"]
    killed = kill9_mid_training(args, out / "sotu-era/seed0/checkpoints/last.ckpt", 3, 9)
    assert killed is not None and not (out / "results.json").exists()
    code, _, err = run_cli(["finetune", "--out", str(out), "--resume", "--no-progress"], capsys)
    assert code == 0 and "(resumed)" in err, err
    meta = json.loads((out / "sotu-era/seed0/meta.json").read_text())
    assert meta["steps"] == 12 and [h["epoch"] for h in meta["history"]] == [1.0, 2.0, 3.0]
    assert (out / "results.json").exists()
    # the resumed run is the uninterrupted run: same dev curve, same weights (dropout is seeded per step)
    from safetensors.torch import load_file

    whole = tmp_path / "whole"
    code, _, err = run_cli([a if a != str(out) else str(whole) for a in args], capsys)
    assert code == 0, err
    assert json.loads((whole / "sotu-era/seed0/meta.json").read_text())["history"] == meta["history"]
    a, b = (load_file(d / "sotu-era/seed0/model/model.safetensors") for d in (out, whole))
    assert a.keys() == b.keys()
    for k in a:  # equal up to float rounding: the killed session ran in a subprocess with its own thread count
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-6, msg=k)


def test_ddp_ranks_split_each_global_batch():
    """Under DDP each rank gets its own half of the very global batch one device would get, from any resume step."""
    from types import SimpleNamespace

    from nni_lvbert.finetune.module import FinetuneData

    rows = [{"input_ids": [2, 5 + i, 3], "labels": i % 4} for i in range(40)]
    data = FinetuneData(rows, {"dev": rows[:4]}, batch_size=8, seed=3, pad_id=0, regression=False)

    def batches(rank, world, step=2):
        data.trainer = SimpleNamespace(global_step=step, global_rank=rank, world_size=world)
        return [sorted(b["input_ids"][:, 1].tolist()) for b, _ in zip(data.train_dataloader(), range(5))]

    whole, r0, r1 = batches(0, 1), batches(0, 2), batches(1, 2)
    assert all(len(a) == len(b) == 4 and not set(a) & set(b) and sorted(a + b) == w for a, b, w in zip(r0, r1, whole))
    assert batches(0, 1, step=0)[2:] == whole[:3]  # batch b is a function of (seed, b): resume-exact


@pytest.mark.slow
def test_ddp_two_cpu_ranks_equal_one_device(tmp_path, capsys, tiny_data):
    """--devices 2: each rank takes half of every global batch, rank 0 writes everything; with dropout 0 (the
    classifier's too) the run equals the one-device run: same dev curve, same fine-tuned weights."""
    import os
    import subprocess
    import sys

    from safetensors.torch import load_file

    from nni_lvbert.hf import LVBertForMaskedLM
    from nni_lvbert.hf.convert import hf_config
    from nni_lvbert.hf.save import save_hf_model
    from tests.conftest import tiny_config

    data = tiny_data
    torch.manual_seed(0)
    config = hf_config(tiny_config(vocab_size=data.vocab_size), ["dc", "sa", "ff", "glu"])
    config.classifier_dropout = 0.0
    model = save_hf_model(LVBertForMaskedLM(config), tokenizer_dir=data.tokenizer_dir, out_dir=tmp_path / "model")
    args = ["finetune", "--model", str(model), "--task", "sotu-era", *QUICK, "--max-train-examples", "32",
            "--epochs", "2", "--save-model"]
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    env.pop("PYTEST_CURRENT_TEST", None)
    res = subprocess.run([sys.executable, "-m", "nni_lvbert.cli", *args, "--out", str(tmp_path / "ddp"), "--devices",
                          "2"], cwd=Path(__file__).resolve().parent.parent, env=env, capture_output=True, text=True,
                         timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    code, _, err = run_cli([*args, "--out", str(tmp_path / "one")], capsys)
    assert code == 0, err
    ddp, one = (json.loads((tmp_path / d / "sotu-era/seed0/meta.json").read_text()) for d in ("ddp", "one"))
    assert (ddp["world_size"], one["world_size"]) == (2, 1) and ddp["steps"] == one["steps"] == 8
    assert [h["step"] for h in ddp["history"]] == [4, 8] and (tmp_path / "ddp" / "results.json").is_file()
    for a, b in zip(ddp["history"], one["history"]):
        assert a["score"] == pytest.approx(b["score"], abs=1e-9)
    wa, wb = (load_file(tmp_path / d / "sotu-era/seed0/model/model.safetensors") for d in ("ddp", "one"))
    for k in wa:  # the gradient of two half-batch means averaged = the whole batch's mean, up to rounding
        torch.testing.assert_close(wa[k], wb[k], rtol=1e-4, atol=1e-5, msg=k)


def test_bad_inputs_are_one_line_and_write_nothing(model_dir, tmp_path, capsys):
    glue = make_glue(tmp_path / "glue")
    out = tmp_path / "out"
    base = ["--model", str(model_dir), "--out", str(out), *QUICK]
    for argv, msg in (
        (["finetune", "--task", "colaa", *base], "unknown task"),
        (["finetune", "--task", "rte", "--data", str(tmp_path / "nope"), *base], "not a directory"),
        (["finetune", "--task", "sotu-era", *base, "--max-length", "999"], "position table"),
        (["finetune", "--task", "sotu-era", "--model", str(tmp_path)], "not a model directory"),
        (["glue", "--data", str(tmp_path / "nope"), *base], "GLUE directory not found"),
        (["glue", "--data", str(glue), "--task", "cola", "xx", *base], "not found in"),
    ):
        code, _, err = run_cli(argv, capsys)
        assert code == 2 and msg in one_error_line(err), (argv, err)
        assert not out.exists()
    other = tmp_path / "other"  # a model directory whose tokenizer is another one's
    import shutil

    shutil.copytree(model_dir, other)
    tok = json.loads((other / "tokenizer.json").read_text())
    tok["model"]["vocab"] = {**tok["model"]["vocab"], "[EXTRA1]": 10**6, "[EXTRA2]": 10**6 + 1}
    (other / "tokenizer.json").write_text(json.dumps(tok))
    code, _, err = run_cli(["finetune", "--task", "sotu-era", "--model", str(other), "--out", str(out)], capsys)
    assert code == 2 and not out.exists(), err
    one_error_line(err)
    damaged = tmp_path / "damaged"  # a new user's test: the weights file cut short
    shutil.copytree(model_dir, damaged)
    weights = damaged / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    for argv in (["finetune", "--task", "sotu-era"], ["glue", "--data", str(glue), "--task", "rte"]):
        code, _, err = run_cli([*argv, "--model", str(damaged), "--out", str(out), *QUICK], capsys)
        assert code == 2 and not out.exists(), err
        assert f"{weights} is damaged or truncated" in one_error_line(err) and "Traceback" not in err
    code, _, err = run_cli(["glue", "--data", str(glue), "--task", "cola", "xx", *base], capsys)
    assert code == 2 and "not found in" in one_error_line(err)


def test_model_pointing_at_a_pretrain_run_names_its_model_directory(tmp_path, capsys):
    """`--model RUN` of a pretrain run (or of `lvbert run`'s directory) points to RUN/hf, for every command taking
    --model (finetune, glue: finetune.run; export --onnx: hf.exporting); an ELECTRA run names its generator too."""
    from nni_lvbert.hf.exporting import load_model_dir

    run = tmp_path / "pretrain"
    for name in ("hf", "hf-generator"):
        (run / name).mkdir(parents=True)
        (run / name / "config.json").write_text("{}")
    out = tmp_path / "out"
    code, _, err = run_cli(["finetune", "--task", "sotu-era", "--model", str(run), "--out", str(out)], capsys)
    assert code == 2 and not out.exists()
    one_error_line(err, f"--model {run} is a pretrain run; its model is {run / 'hf'} (pass --model {run / 'hf'})",
                   f"ELECTRA generator (fill-mask) is {run / 'hf-generator'}")
    with pytest.raises(UserError, match="is a pretrain run; its model is"):
        load_model_dir(run)
    (run / "hf-generator" / "config.json").unlink()  # MLM: hf/ only
    code, _, err = run_cli(["finetune", "--task", "sotu-era", "--model", str(tmp_path), "--out", str(out)], capsys)
    assert code == 2 and "generator" not in err
    one_error_line(err, f"--model {tmp_path} is a `lvbert run` directory; its model is {run / 'hf'}")


@pytest.mark.slow
def test_glue_command_runs_every_task_found(model_dir, tmp_path, capsys):
    glue = make_glue(tmp_path / "glue")
    out = tmp_path / "glue-run"
    code, stdout, err = run_cli(["glue", "--model", str(model_dir), "--data", str(glue), "--out", str(out), *QUICK,
                                 "--batch-size", "4", "--epochs", "1"], capsys)
    assert code == 0, err
    res = json.loads((out / "results.json").read_text())
    assert list(res["tasks"]) == ["cola", "sst-2", "mrpc", "sts-b", "qqp", "mnli", "qnli", "rte", "wnli"]
    assert res["glue_score"] is not None and "GLUE score" in (out / "results.md").read_text()
    assert "glue_score" in stdout  # all eight tasks: the summary has it
    assert set(res["tasks"]["mnli"]["median"]) == {"dev_matched/acc", "dev_mismatched/acc"}
    assert set(res["tasks"]["sts-b"]["median"]) == {"dev/spearman", "dev/pearson"}


def test_a_two_class_task_of_your_own_names_its_positive_label(tmp_path):
    """Issue 55.4: F1 counts label index 1 as positive; by default the second label in sorted order, else the
    --positive-label given (moved to index 1), and the task's score says which."""
    import numpy as np

    from nni_lvbert.finetune import metrics as M

    d = tmp_path / "csv"
    d.mkdir()
    (d / "train.csv").write_text("text,y\na,spam\nb,ham\nc,spam\n")
    (d / "dev.csv").write_text("text,y\nd,spam\ne,ham\n")
    default = load_task("mine", d, text_column="text", label_column="y")
    assert default.label_names == ["ham", "spam"] and "positive class: label 'spam'" in default.score_text()
    chosen = load_task("mine", d, text_column="text", label_column="y", positive_label="ham")
    assert chosen.label_names == ["spam", "ham"] and chosen.positive_label == "ham"
    assert chosen.score_text() == "mean of accuracy and F1 (F1's positive class: label 'ham')"
    # F1 of "ham" as positive: predictions of the dev labels [spam, ham] as indices into label_names
    preds, labels = [1, 1], [chosen.label_names.index(y) for y in ("spam", "ham")]
    assert M.compute(("f1",), np.array(preds), np.array(labels))["f1"] == pytest.approx(100 * 2 / 3)
    with pytest.raises(UserError, match="'eggs' is not a label of"):
        load_task("mine", d, text_column="text", label_column="y", positive_label="eggs")
    with pytest.raises(UserError, match="applies to a task of your own files"):
        load_task("sotu-era", positive_label="x")
