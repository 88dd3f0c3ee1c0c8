"""Data pipeline: split, packing, caching, tokenizer, MLM batches. Small corpora cut from the embedded one."""
import itertools
import json
import time

import pytest
import torch

from nni_lvbert.data import PreparedData, prepare
from nni_lvbert.data.corpus import EMBEDDED_DIR, resolve_corpus
from nni_lvbert.data.packing import pack_sentences, split_sentences
from nni_lvbert.data.split import split_documents
from tests.conftest import wiki_texts

CLS, SEP, PAD, MASK = 2, 3, 0, 4  # ids of a tokenizer trained here



def write_corpus(path, texts):
    path.write_text("\n\n".join(texts) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "wiki.txt", wiki_texts(400))


@pytest.fixture(scope="module")
def prepared(corpus_file, cache_dir):
    return prepare(corpus_file, "tiny", vocab_size=2000, val_fraction=0.05, cache_dir=cache_dir)


def docs_dataset(n):
    import datasets

    return datasets.Dataset.from_dict({"id": [f"doc/{i}" for i in range(n)], "text": [f"text {i}" for i in range(n)]})


# --- split -------------------------------------------------------------------------------------------------------

def test_split_is_deterministic_disjoint_and_about_the_fraction():
    docs = docs_dataset(4000)
    train, val, words = split_documents(docs, 0.02)
    train2, val2, _ = split_documents(docs.shuffle(seed=1), 0.02)  # input order must not matter
    t, v = set(train["text"]), set(val["text"])
    assert not t & v and len(t | v) == 4000
    assert v == set(val2["text"]) and t == set(train2["text"])
    assert 0.012 < len(v) / 4000 < 0.028
    assert words == {"train": 2 * len(t), "val": 2 * len(v)}
    _, val5, _ = split_documents(docs, 0.05)
    assert v <= set(val5["text"])  # a larger fraction only adds documents to validation


def test_duplicate_documents_land_on_the_same_side():
    import datasets

    texts = [f"document number {i}" for i in range(300)] * 2
    train, val, _ = split_documents(datasets.Dataset.from_dict({"text": texts}), 0.1)
    assert not set(train["text"]) & set(val["text"])


def test_tiny_corpus_still_holds_out_one_document():
    train, val, _ = split_documents(docs_dataset(3), 0.02)
    assert len(val) == 1 and len(train) == 2


# --- sentences and packing ---------------------------------------------------------------------------------------

def test_split_sentences():
    text = 'It rained. Then "Snow fell!" (Later) it cleared?\nNew line here'
    assert split_sentences(text) == ["It rained.", 'Then "Snow fell!"', "(Later) it cleared?", "New line here"]


def test_pack_sentences_fills_sequences_and_cuts_at_sentence_boundaries():
    sents = [[10, 11, 12], [13, 14], [15, 16, 17, 18], [19]]
    seqs = list(pack_sentences(sents, max_length=10, cls_id=CLS, sep_id=SEP))  # 7 content tokens per sequence
    assert seqs[0][0] == [CLS, 10, 11, 12, SEP, 13, 14, 15, 16, SEP]  # boundary 3 is nearest the middle 3.5
    assert seqs[0][1] == [0] * 5 + [1] * 5
    assert seqs[1][0] == [CLS, 17, 18, SEP, 19, SEP]  # the sentence end after 18 is inside the second chunk
    long = list(pack_sentences([list(range(100, 120))], max_length=8, cls_id=CLS, sep_id=SEP))
    assert [len(ids) for ids, _ in long] == [8, 8, 8, 8]  # 20 tokens: 5 + 5 + 5 + 5, no boundary: cut mid-chunk
    assert list(pack_sentences([[7]], max_length=8, cls_id=CLS, sep_id=SEP)) == []  # a 1-token tail cannot be a pair


def test_text_file_documents(tmp_path):
    para = write_corpus(tmp_path / "para.txt", ["one two.\nthree four.", "five six.", "seven."])
    lines = tmp_path / "lines.txt"
    lines.write_text("first doc.\nsecond doc.\n\t\nthird doc.\n")
    docs, _ = resolve_corpus(str(para)).load(tmp_path / "w1")
    assert docs["text"] == ["one two. three four.", "five six.", "seven."]
    docs, _ = resolve_corpus(str(lines), doc_by="line").load(tmp_path / "w2")
    assert docs["text"] == ["first doc.", "second doc.", "third doc."]
    nolines = tmp_path / "noblank.txt"
    nolines.write_text("a b c.\nd e f.\n")
    docs, _ = resolve_corpus(str(nolines)).load(tmp_path / "w3")  # auto: no blank line -> one document per line
    assert docs["text"] == ["a b c.", "d e f."]


# --- prepare, cache ----------------------------------------------------------------------------------------------

def test_prepared_sequences_are_well_formed(prepared):
    tok = prepared.tokenizer()
    assert (tok.pad_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id) == (PAD, CLS, SEP, MASK)
    assert tok("Hello World")["input_ids"] == tok("hello world")["input_ids"]  # lower-casing BERT normalizer
    train, val = prepared.train_dataset(), prepared.val_dataset()
    assert set(train.column_names) == {"input_ids", "token_type_ids"}
    assert set(val.column_names) == {"input_ids", "token_type_ids", "labels"}
    full = 0
    for row in train:
        ids, types = row["input_ids"], row["token_type_ids"]
        assert len(ids) == len(types) <= prepared.max_length == 64
        assert ids[0] == CLS and ids[-1] == SEP and ids.count(SEP) == 2 and CLS not in ids[1:]
        first_sep = ids.index(SEP)
        assert 1 < first_sep < len(ids) - 2  # both segments non-empty
        assert types == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
        full += len(ids) == 64
    assert full > len(train) / 2  # sequences are filled, not cut at every sentence
    s = prepared.stats
    assert s["train"]["sequences"] == len(train) and s["val"]["sequences"] == len(val)
    assert s["train"]["documents"] + s["val"]["documents"] == 400
    assert s["train"]["tokens"] == sum(len(r) for r in train["input_ids"])
    assert s["vocab_size"] == len(tok) <= 2000
    assert PreparedData.load(prepared.path).stats == s


def test_second_prepare_reuses_cache_and_other_settings_do_not(prepared, corpus_file, cache_dir):
    t0 = time.perf_counter()
    again = prepare(corpus_file, "tiny", vocab_size=2000, val_fraction=0.05, cache_dir=cache_dir)
    assert again.reused and again.path == prepared.path and time.perf_counter() - t0 < 2.0
    shorter = prepare(corpus_file, "tiny", vocab_size=2000, val_fraction=0.05, max_length=32, cache_dir=cache_dir)
    assert not shorter.reused and shorter.path != prepared.path
    assert max(len(r) for r in shorter.train_dataset()["input_ids"]) <= 32
    # the tokenizer depends on corpus + vocab + split only, so changing max_length reused it
    assert len(list((cache_dir / "tokenizers").iterdir())) == 1
    other_seed = prepare(corpus_file, "tiny", vocab_size=2000, val_fraction=0.05, seed=1, cache_dir=cache_dir)
    assert other_seed.path not in (prepared.path, shorter.path)


def test_changed_corpus_file_is_not_served_from_cache(tmp_path):
    f = write_corpus(tmp_path / "c.txt", wiki_texts(60))
    first = prepare(f, "tiny", vocab_size=500, cache_dir=tmp_path / "cache")
    write_corpus(f, wiki_texts(61))
    second = prepare(f, "tiny", vocab_size=500, cache_dir=tmp_path / "cache")
    assert not second.reused and second.path != first.path
    assert second.stats["train"]["documents"] + second.stats["val"]["documents"] == 61


def test_cache_dir_from_environment(tmp_path, monkeypatch, corpus_file):
    monkeypatch.setenv("LVBERT_CACHE", str(tmp_path / "envcache"))
    p = prepare(corpus_file, "tiny", vocab_size=500, max_docs=50)
    assert p.path.parent == tmp_path / "envcache" / "data"
    assert not [d for d in p.path.parent.iterdir() if d.name.startswith(".")]  # no temp dir left over


def test_existing_tokenizer_directory_and_vocab_txt(prepared, corpus_file, tmp_path):
    from_dir = prepare(corpus_file, "tiny", tokenizer=prepared.tokenizer_dir, max_docs=80, cache_dir=tmp_path)
    assert from_dir.vocab_size == prepared.vocab_size
    vocab = tmp_path / "vocab.txt"
    tok = prepared.tokenizer()
    vocab.write_text("\n".join(tok.convert_ids_to_tokens(list(range(len(tok))))) + "\n")
    from_vocab = prepare(corpus_file, "tiny", tokenizer=vocab, max_docs=80, cache_dir=tmp_path)
    assert from_vocab.vocab_size == len(tok)
    assert from_vocab.train_dataset()["input_ids"] == from_dir.train_dataset()["input_ids"]


def test_embedded_corpus_has_two_million_words_and_prepares(tmp_path):
    manifest = json.loads((EMBEDDED_DIR / "manifest.json").read_text())
    assert sum(f["words"] for f in manifest["files"].values()) >= 2_000_000
    assert (EMBEDDED_DIR / "ATTRIBUTION.md").is_file()
    assert sum((EMBEDDED_DIR / name).stat().st_size for name in manifest["files"]) < 10e6
    p = prepare(None, "tiny", vocab_size=1000, max_docs=300, cache_dir=tmp_path)
    assert p.stats["train"]["documents"] + p.stats["val"]["documents"] == 300
    assert p.path.name.startswith("embedded-")


@pytest.mark.slow
def test_full_embedded_corpus_at_tiny(tmp_path):
    # End-to-end run of the whole shipped corpus, `lvbert data prepare --size tiny` (~20-30 s on 2 cores).
    p = prepare(None, "tiny", cache_dir=tmp_path)
    s = p.stats
    assert p.vocab_size == 8192 and s["train"]["documents"] + s["val"]["documents"] == 10282
    assert s["train"]["words"] + s["val"]["words"] >= 2_000_000 and s["train"]["tokens"] > 3_000_000
    assert 0.01 < s["val"]["documents"] / (s["train"]["documents"] + s["val"]["documents"]) < 0.03


# --- batches -----------------------------------------------------------------------------------------------------

def mask_counts(batches):
    masked = eligible = as_mask = unchanged = 0
    for b in batches:
        special = (b["input_ids"] < 5) & (b["labels"] == -100)  # specials/padding are never masked
        m = b["labels"] != -100
        masked += int(m.sum())
        eligible += int((b["attention_mask"].bool() & ~special).sum())
        as_mask += int((b["input_ids"][m] == MASK).sum())
        unchanged += int((b["input_ids"][m] == b["labels"][m]).sum())
    return masked, eligible, as_mask, unchanged


def test_train_batches_mask_15_percent_80_10_10(prepared):
    from nni_lvbert.data import MLMDataModule

    dm = MLMDataModule(prepared, batch_size=64, seed=0)
    batches = list(itertools.islice(dm.train_dataloader(), 12))
    b = batches[0]
    per_token = {"input_ids", "token_type_ids", "attention_mask", "labels"}
    assert set(b) == per_token | {"mlm_positions", "real_tokens"}  # + the host counts (data.masking.host_counts)
    assert all(b[k].dtype == torch.long and b[k].shape == b["input_ids"].shape for k in per_token)
    assert b["real_tokens"] == int(b["attention_mask"].sum())
    assert torch.equal(b["labels"].reshape(-1)[b["mlm_positions"]], b["labels"][b["labels"] != -100])
    assert not (b["labels"][b["attention_mask"] == 0] != -100).any()
    masked, eligible, as_mask, unchanged = mask_counts(batches)
    assert eligible > 20000
    assert abs(masked / eligible - 0.15) < 0.01
    assert abs(as_mask / masked - 0.8) < 0.03
    assert abs(unchanged / masked - 0.1) < 0.03  # (a random replacement can also hit the same token, rarely)
    # same seed -> same first batch; another seed -> other order and masks
    again = next(iter(MLMDataModule(prepared, batch_size=64, seed=0).train_dataloader()))
    other = next(iter(MLMDataModule(prepared, batch_size=64, seed=1).train_dataloader()))
    assert torch.equal(again["input_ids"], b["input_ids"]) and torch.equal(again["labels"], b["labels"])
    assert not torch.equal(other["labels"], b["labels"])


def test_validation_masking_is_fixed_across_loads_and_rebuilds(prepared, corpus_file, tmp_path):
    from nni_lvbert.data import MLMDataModule

    def val_batches(p):
        return list(MLMDataModule(p, batch_size=16).val_dataloader())

    first, second = val_batches(prepared), val_batches(PreparedData.load(prepared.path))
    # Rebuilt from scratch in another cache, with the same tokenizer (WordPiece training may break frequency ties
    # differently from one process to the next; a cache entry keeps its tokenizer for good).
    rebuilt = prepare(corpus_file, "tiny", tokenizer=prepared.tokenizer_dir, val_fraction=0.05, cache_dir=tmp_path)
    assert not rebuilt.reused
    third = val_batches(rebuilt)
    for a, b, c in zip(first, second, third, strict=True):
        for k in a:  # tensors, and the collator's host counts (ints)
            if torch.is_tensor(a[k]):
                assert torch.equal(a[k], b[k]) and torch.equal(a[k], c[k])
            else:
                assert a[k] == b[k] == c[k]
    masked, eligible, _, _ = mask_counts(first)
    assert masked == prepared.stats["val"]["masked"] and abs(masked / eligible - 0.15) < 0.03
