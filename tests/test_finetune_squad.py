"""Extractive QA (SQuAD v1.1 / v2.0): the JSON as distributed, the official EM/F1 normalisation, sliding windows and
their labels, n-best post-processing with the no-answer decision, and `lvbert finetune --task squad|squad_v2` end
to end on a tiny model."""
import json
from pathlib import Path

import numpy as np
import pytest

from nni_lvbert.errors import UserError
from nni_lvbert.finetune import squad as S
from nni_lvbert.finetune.tasks import load_task
from tests.conftest import one_error_line, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")

PARAS = [
    ("Super Bowl 50 was an American football game. The Denver Broncos defeated the Carolina Panthers to earn "
     "their third Super Bowl title. The game was played in Santa Clara, California.",
     [("Which team won Super Bowl 50?", "Denver Broncos"), ("Where was the game played?", "Santa Clara, California"),
      ("Who lost the game?", "Carolina Panthers"), ("What kind of game was it?", "American football")]),
    ("The Normans were the people who gave their name to Normandy, a region in France. They descended from Norse "
     "raiders and pirates from Denmark, Iceland and Norway.",
     [("In what country is Normandy?", "France"), ("Where did the raiders come from?", "Denmark, Iceland and Norway"),
      ("Who gave their name to Normandy?", "The Normans"), ("What were the raiders called?", "Norse raiders")]),
]


def squad_json(version: str, impossible: bool = False, prefix: str = "q") -> dict:
    """Articles in the exact distributed format; v2.0 adds unanswerable questions with plausible_answers."""
    data = []
    for a, (ctx, qas) in enumerate(PARAS):
        entries = []
        for k, (q, ans) in enumerate(qas):
            entry = {"id": f"{prefix}{a}{k}", "question": q, "answers": [{"text": ans, "answer_start": ctx.index(ans)}]}
            if version == "v2.0":
                entry["is_impossible"] = False
            entries.append(entry)
        if impossible:
            entries.append({"id": f"{prefix}{a}x", "question": "What did the moon eat?", "answers": [],
                            "is_impossible": True,
                            "plausible_answers": [{"text": ctx.split()[0], "answer_start": 0}]})
        data.append({"title": f"Article {a}", "paragraphs": [{"context": ctx, "qas": entries}]})
    return {"version": version, "data": data}


def make_squad(root: Path, version: str = "v1.1") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    v2 = version == "v2.0"
    (root / f"train-{version}.json").write_text(json.dumps(squad_json(version, v2, "t")))
    dev = squad_json(version, v2, "d")
    dev["data"][0]["paragraphs"][0]["qas"][0]["answers"].append({"text": "the Broncos", "answer_start": 50})
    (root / f"dev-{version}.json").write_text(json.dumps(dev))
    return root


# --- official EM / F1 -----------------------------------------------------------------------------------------

def test_normalisation_and_em_f1_against_hand_computed_values():
    assert S.normalize_answer("The  Cat, sat!") == "cat sat"
    assert S.normalize_answer("An apple a day") == "apple day"
    assert S.normalize_answer("Theater anthem") == "theater anthem"  # articles only as whole words
    assert S.exact("the Eiffel Tower", "Eiffel tower.") == 1 and S.exact("Eiffel", "Eiffel Tower") == 0
    # gold {cat, sat, on, mat}, prediction {cat, on, mat, quickly}: 3 in common, P = R = 3/4
    assert S.f1("a cat sat on the mat", "cat on mat, quickly") == pytest.approx(0.75)
    assert S.f1("Denver Broncos", "Broncos") == pytest.approx(2 / 3)  # P 1, R 1/2
    assert S.f1("", "") == 1.0 and S.f1("", "x") == 0.0 and S.f1("x", "") == 0.0
    ex = [S.QAExample("1", "q", "c", [("Denver Broncos", 0), ("the Broncos", 0)]),  # max over gold answers
          S.QAExample("2", "q", "c", [("Santa Clara", 0)]),
          S.QAExample("3", "q", "c", [], impossible=True)]
    m = S.evaluate(ex[:2], {"1": "Broncos", "2": "Clara"}, v2=False)
    assert m == {"em": pytest.approx(50.0), "f1": pytest.approx(100 * (1 + 2 / 3) / 2)}
    m = S.evaluate(ex, {"1": "Broncos", "2": "Clara", "3": ""}, v2=True)
    assert m["em"] == pytest.approx(200 / 3) and m["NoAns_em"] == 100.0 and m["NoAns_f1"] == 100.0
    assert m["HasAns_em"] == pytest.approx(50.0) and m["HasAns_f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    assert S.evaluate(ex, {"1": "", "2": "", "3": "Santa"}, v2=True)["f1"] == 0.0


# --- reading ------------------------------------------------------------------------------------------------------

def test_reads_squad_v1_and_v2_json_and_rejects_bad_input(tmp_path):
    v1 = load_task("squad", make_squad(tmp_path / "v1"))
    assert v1.kind == "qa" and not v1.v2 and len(v1.train) == 8 and len(v1.dev["dev"]) == 8 and v1.epochs == 2
    assert v1.metrics == ("em", "f1") and v1.dev["dev"][0].answers[1] == ("the Broncos", 50)
    assert load_task("squad", tmp_path / "v1" / "train-v1.1.json").dev["dev"][0].id == "d00"  # dev file beside it
    v2 = load_task("squad_v2", make_squad(tmp_path / "v2", "v2.0"))
    assert v2.v2 and len(v2.train) == 10 and "NoAns_f1" in v2.metrics
    assert [e.impossible for e in v2.train].count(True) == 2 and v2.train[4].answers == []

    d = tmp_path / "v1"
    with pytest.raises(UserError, match="missing split: no train-v2.0.json"):
        load_task("squad_v2", d)
    (d / "dev-v1.1.json").unlink()
    with pytest.raises(UserError, match="missing split.*dev-v1.1.json"):
        load_task("squad", d)
    (d / "dev-v1.1.json").write_text("")
    with pytest.raises(UserError, match="is empty"):
        load_task("squad", d)
    (d / "dev-v1.1.json").write_text(json.dumps({"version": "v1.1", "data": []}))
    with pytest.raises(UserError, match="is empty"):
        load_task("squad", d)
    (d / "dev-v1.1.json").write_text("id,text\n1,hello\n")
    with pytest.raises(UserError, match="not SQuAD JSON"):
        load_task("squad", d)
    (d / "dev-v1.1.json").write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"qas": []}]}]}))
    with pytest.raises(UserError, match="not SQuAD JSON"):
        load_task("squad", d)


# --- windows and labels -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tok(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


def test_windows_and_labels(tok):
    ctx = " ".join(PARAS[0][0] for _ in range(2))
    offs = tok(ctx, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    q = "Who won?"
    nq = len(tok(q, add_special_tokens=False)["input_ids"])
    W = 12  # context tokens per window
    kw = {"max_length": nq + 3 + W, "max_query_length": 64}
    assert len(offs) > 2 * W + 2

    def answer(first: int, last: int) -> S.QAExample:
        s, e = offs[first][0], offs[last][1]
        return S.QAExample("a", q, ctx, [(ctx[s:e], s)])

    # the answer (tokens W+2..W+4) lies in the second window (stride = window: no overlap)
    rows = S.featurize(tok, [answer(W + 2, W + 4)], doc_stride=W, **kw)
    assert len(rows) == -(-len(offs) // W) and all(len(r["input_ids"]) <= kw["max_length"] for r in rows)
    assert rows[0]["input_ids"][0] == tok.cls_token_id and rows[0]["input_ids"][nq + 1] == tok.sep_token_id
    assert rows[0]["token_type_ids"] == [0] * (nq + 2) + [1] * (W + 1)
    assert (rows[0]["start_positions"], rows[0]["end_positions"]) == (0, 0)
    assert (rows[1]["start_positions"], rows[1]["end_positions"]) == (nq + 2 + 2, nq + 2 + 4)
    assert rows[1]["input_ids"][nq + 2 + 2] == tok(ctx, add_special_tokens=False)["input_ids"][W + 2]
    # an answer across the boundary of two windows is in no window: [CLS] everywhere ...
    rows = S.featurize(tok, [answer(W - 1, W)], doc_stride=W, **kw)
    assert all((r["start_positions"], r["end_positions"]) == (0, 0) for r in rows)
    # ... but with overlapping windows (start every W/2 tokens) the second window holds it
    rows = S.featurize(tok, [answer(W - 1, W)], doc_stride=W // 2, **kw)
    assert (rows[1]["start_positions"], rows[1]["end_positions"]) == (nq + 2 + W // 2 - 1, nq + 2 + W // 2)
    # an impossible question is labelled [CLS]; dev windows carry offsets back to the context
    assert all(r["start_positions"] == 0 for r in S.featurize(tok, [S.QAExample("b", q, ctx, [], True)],
                                                                doc_stride=W, **kw))
    dev = S.featurize(tok, [answer(W + 2, W + 4)], doc_stride=W, train=False, **kw)
    assert dev[1]["context_offset"] == nq + 2 and dev[1]["offsets"][0] == tuple(offs[W]) and dev[1]["example"] == 0
    with pytest.raises(UserError, match="no room for the context"):
        S.featurize(tok, [answer(0, 1)], max_length=nq + 3, max_query_length=64)


# --- post-processing ------------------------------------------------------------------------------------------------

CTX = "Denver Broncos won the game"
TOKENS = [(0, 6), (7, 14), (15, 18), (19, 22), (23, 27)]  # Denver Broncos won the game


def hand_features():
    """Two windows of [CLS] q [SEP] ctx [SEP] (one question token: context from position 3): tokens 0-2, 2-4."""
    return [{"example": 0, "context_offset": 3, "offsets": TOKENS[0:3]},
            {"example": 0, "context_offset": 3, "offsets": TOKENS[2:5]}]


def logits(peaks: dict[int, float], n: int = 7) -> np.ndarray:
    a = np.zeros(n)
    for k, v in peaks.items():
        a[k] = v
    return a


def test_postprocess_picks_the_best_span_across_windows():
    ex = [S.QAExample("x", "who?", CTX, [("Denver Broncos", 0)])]
    feats = hand_features()
    # window 1: "Denver Broncos" scores 5 + 5; a question token scores higher but is not context. Window 2: "game"
    # scores 6 + 3; "game" → "the" would score 13 but ends before it starts
    s = [logits({3: 5.0, 1: 9.0}), logits({5: 6.0})]
    e = [logits({4: 5.0, 2: 9.0}), logits({4: 7.0, 5: 3.0})]
    assert S.postprocess(ex, feats, s, e, v2=False) == {"x": "Denver Broncos"}
    s[1][4], e[1][4] = 8.0, 0.0  # window 2: "the game" now scores 8 + 3 = 11 > 10
    assert S.postprocess(ex, feats, s, e, v2=False) == {"x": "the game"}
    assert S.postprocess(ex, feats, s, e, v2=False, max_answer_length=1) == {"x": "game"}  # 6 + 3 beats 8 + 0
    # n_best 1: window 1's best start is a question token (no candidate there), window 2's best pair is "the game"
    s[1][4] = 2.0
    assert S.postprocess(ex, feats, s, e, v2=False) == {"x": "Denver Broncos"}
    assert S.postprocess(ex, feats, s, e, v2=False, n_best=1) == {"x": "game"}


def test_no_answer_decision():
    ex = [S.QAExample("x", "who?", CTX, [], impossible=True)]
    feats = hand_features()
    s = [logits({0: 6.0, 3: 5.0}), logits({0: 8.0, 4: 1.0})]
    e = [logits({0: 6.0, 4: 5.0}), logits({0: 8.0, 5: 1.0})]
    # null score = min over windows = 12 > best span 10: no answer (threshold 0)
    assert S.postprocess(ex, feats, s, e, v2=True) == {"x": ""}
    assert S.postprocess(ex, feats, s, e, v2=True, null_threshold=2.5) == {"x": "Denver Broncos"}
    assert S.postprocess(ex, feats, s, e, v2=False) == {"x": "Denver Broncos"}  # v1.1 always answers
    s[0][0] = e[0][0] = 4.0  # null 8 < 10: answer
    assert S.postprocess(ex, feats, s, e, v2=True) == {"x": "Denver Broncos"}


# --- end to end ---------------------------------------------------------------------------------------------------

QUICK = ["--max-length", "48", "--max-query-length", "12", "--doc-stride", "16", "--batch-size", "4",
         "--no-progress", "--accelerator", "cpu"]


def test_finetune_squad_v1_end_to_end_and_resume(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["finetune", "--model", str(model_dir), "--task", "squad", "--data", str(make_squad(tmp_path / "d")),
            "--out", str(out), *QUICK, "--epochs", "1", "--json"]
    code, stdout, err = run_cli(args, capsys)
    assert code == 0, err
    r = json.loads((out / "results.json").read_text())["tasks"]["squad"]
    assert set(r["median"]) == {"dev/em", "dev/f1"} and 0 <= r["score_median"] <= 100
    assert r["score_median"] == pytest.approx((r["median"]["dev/em"] + r["median"]["dev/f1"]) / 2)
    meta = json.loads((out / "squad" / "seed0" / "meta.json").read_text())
    assert meta["train_examples"] == 8 and meta["train_windows"] >= 8 and meta["steps"] == meta["train_windows"] // 4
    assert "| squad | EM" in (out / "results.md").read_text()
    assert json.loads(stdout.strip().splitlines()[-1])["squad"] == round(r["score_median"], 2), stdout
    code, _, err = run_cli(["finetune", "--out", str(out), "--resume", "--no-progress"], capsys)
    assert code == 0 and "finished earlier: skipped" in err


def test_finetune_squad_v2_end_to_end(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = run_cli(["finetune", "--model", str(model_dir), "--task", "squad_v2", "--data",
                            str(make_squad(tmp_path / "d", "v2.0")), "--out", str(out), *QUICK, "--max-steps", "2"],
                           capsys)
    assert code == 0, err
    r = json.loads((out / "results.json").read_text())["tasks"]["squad_v2"]
    assert {"dev/HasAns_f1", "dev/NoAns_em", "dev/em", "dev/f1"} <= set(r["median"])
    assert "NoAns F1" in (out / "results.md").read_text()



def test_squad_from_the_hub_reads_its_schema(monkeypatch):
    """rajpurkar/squad(_v2) as `datasets` gives it: answers as {text: [...], answer_start: [...]}, empty when
    unanswerable."""
    import datasets

    feats = datasets.Features({"id": datasets.Value("string"), "title": datasets.Value("string"),
                               "context": datasets.Value("string"), "question": datasets.Value("string"),
                               "answers": datasets.Sequence({"text": datasets.Value("string"),
                                                             "answer_start": datasets.Value("int32")})})
    ctx = "The cat sat on the mat. It was red."

    def split(answers):
        return datasets.Dataset.from_dict({"id": [f"q{i}" for i in range(len(answers))], "title": ["t"] * len(answers),
                                           "context": [ctx] * len(answers), "question": ["Where?"] * len(answers),
                                           "answers": answers}, features=feats)

    asked = []

    def load_dataset(path):
        asked.append(path)
        two = [{"text": ["the mat", "mat"], "answer_start": [15, 19]}, {"text": [], "answer_start": []}]
        return datasets.DatasetDict({"train": split(two), "validation": split(two)})

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    task = load_task("squad_v2")
    assert asked == ["rajpurkar/squad_v2"] and task.v2 and task.kind == "qa"
    first, empty = task.train
    assert first.answers == [("the mat", 15)] and not first.impossible  # training keeps the first answer
    assert ctx[15:22] == "the mat" and empty.impossible and empty.answers == []
    assert task.dev["dev"][0].answers == [("the mat", 15), ("mat", 19)]  # dev keeps every gold answer
    assert load_task("squad").name == "squad" and asked[-1] == "rajpurkar/squad"

def test_squad_bad_input_is_one_line_and_writes_nothing(model_dir, tmp_path, capsys, monkeypatch):
    d = make_squad(tmp_path / "d")
    out = tmp_path / "out"
    base = ["finetune", "--model", str(model_dir), "--task", "squad", "--out", str(out), *QUICK]
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "train-v1.1.json").write_text("")
    (tmp_path / "e" / "dev-v1.1.json").write_text("{}")
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "train-v1.1.json").write_text("not json")
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "train-v1.1.json").write_text((d / "train-v1.1.json").read_text())
    for data, msg in ((tmp_path / "e", "is empty"), (tmp_path / "f", "not SQuAD JSON"),
                      (tmp_path / "g", "missing split"), (tmp_path / "nope", "no such file")):
        code, _, err = run_cli([*base, "--data", str(data)], capsys)
        assert code == 2 and msg in one_error_line(err), (data, err)
        assert not out.exists()
    code, _, err = run_cli([*base, "--data", str(d), "--max-length", "15"], capsys)
    assert code == 2 and "no room for the context" in one_error_line(err) and not out.exists()
    import datasets

    def offline(*a, **k):
        raise ConnectionError("Couldn't reach 'squad' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    code, _, err = run_cli(base, capsys)  # no --data: the hub, which is unreachable
    assert code == 2 and "cannot load squad from the Hugging Face hub" in one_error_line(err) and not out.exists()


@pytest.mark.slow
def test_squad_kill9_then_resume_finishes_the_run(model_dir, tmp_path, capsys):
    from tests.conftest import kill9_mid_training

    out = tmp_path / "run"
    args = ["finetune", "--model", str(model_dir), "--task", "squad", "--data", str(make_squad(tmp_path / "d")),
            "--out", str(out), *QUICK, "--epochs", "2", "--ckpt-every", "1"]
    killed = kill9_mid_training(args, out / "squad/seed0/checkpoints/last.ckpt", 3, 9)
    assert killed is not None and not (out / "results.json").exists()
    code, _, err = run_cli(["finetune", "--out", str(out), "--resume", "--no-progress"], capsys)
    assert code == 0 and "(resumed)" in err, err
    meta = json.loads((out / "squad/seed0/meta.json").read_text())
    assert [h["epoch"] for h in meta["history"]] == [1.0, 2.0] and meta["steps"] == 2 * meta["steps_per_epoch"]
    assert (out / "results.json").exists()
