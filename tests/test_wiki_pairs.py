"""The offline GLUE-format pair task (`lvbert data wiki-pairs`): MRPC's file format read by
the GLUE loader, balanced, articles held out between train and dev, deterministic, a used folder refused."""
from __future__ import annotations

import pytest

from nni_lvbert import atomic
from nni_lvbert.cli import main
from nni_lvbert.data import wiki_pairs
from nni_lvbert.finetune.tasks import load_glue


def test_wiki_pairs_reads_as_mrpc_balanced_and_held_out(tmp_path, capsys):
    out = tmp_path / "wp"
    assert main(["data", "wiki-pairs", "--out", str(out), "--train", "40", "--dev", "20"]) == 0
    task = load_glue("mrpc", out)
    train, dev = task.train, task.dev["dev"]
    assert (len(train.labels), len(dev.labels)) == (40, 20) and task.skipped == {"train.tsv": 0, "dev.tsv": 0}
    assert sorted(train.labels) == ["0"] * 20 + ["1"] * 20 and dev.labels.count("1") == 10
    assert not set(train.text_a + train.text_b) & set(dev.text_a + dev.text_b)  # no article in both splits
    # a negative's second sentence is the next positive's: the second sentence alone does not give the label
    assert train.text_b[1] == train.text_b[2] and (train.labels[1], train.labels[2]) == ("0", "1")
    assert all(wiki_pairs.MIN_WORDS <= len(s.split()) <= wiki_pairs.MAX_WORDS for s in train.text_a + dev.text_b)
    again = tmp_path / "again"
    assert main(["data", "wiki-pairs", "--out", str(again), "--train", "40", "--dev", "20"]) == 0
    assert all((out / f).read_bytes() == (again / f).read_bytes() for f in ("train.tsv", "dev.tsv", "README.txt"))
    assert "CC BY-SA" in (out / "README.txt").read_text() or "ShareAlike" in (out / "README.txt").read_text()
    capsys.readouterr()
    before = (out / "train.tsv").read_bytes()
    assert main(["data", "wiki-pairs", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "not an empty directory" in err[0]
    assert (out / "train.tsv").read_bytes() == before  # nothing overwritten


def test_sentences_split_at_sentence_ends_only():
    assert wiki_pairs.first_two_sentences("One two three four five six. Seven eight nine ten eleven twelve. Tail.") \
        == ("One two three four five six.", "Seven eight nine ten eleven twelve.")
    assert wiki_pairs.first_two_sentences("Too short. Seven eight nine ten eleven twelve.") is None
    assert wiki_pairs.first_two_sentences("Only one sentence of six words here") is None


def test_an_interrupted_build_leaves_no_folder(tmp_path, monkeypatch):
    real, calls = atomic.write_text, []

    def write_then_fail(path, text):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(path, text)

    monkeypatch.setattr(atomic, "write_text", write_then_fail)
    out = tmp_path / "wp"
    with pytest.raises(KeyboardInterrupt):
        wiki_pairs.build(out, train=4, dev=4)
    assert len(calls) == 2 and calls[0].name == "train.tsv"
    assert not out.exists() and list(tmp_path.iterdir()) == []  # neither the folder nor its temp folder
