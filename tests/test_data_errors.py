"""Bad input to the data pipeline: one clear UserError line, exit 2 from the CLI, and nothing left in the cache."""
import json
import os
import subprocess
import sys

import pytest

from nni_lvbert import cli
from nni_lvbert.data import check_max_length, check_vocab, prepare
from nni_lvbert.errors import UserError

PROSE = ("The river rises in the northern hills. It flows south through farmland and three towns. "
         "Mills were built along its banks in the eighteenth century. Most of them closed long ago.")


def prose_docs(n):
    return [f"Document {i}. {PROSE} Its number is {i}." for i in range(n)]


def cache_entries(cache):
    """Everything under data/ and tokenizers/, temp dirs included."""
    return [p.name for sub in ("data", "tokenizers") if (cache / sub).is_dir() for p in (cache / sub).iterdir()]


def expect_error(cache, match, corpus, **kw):
    with pytest.raises(UserError, match=match) as info:
        prepare(corpus, "tiny", vocab_size=300, cache_dir=cache, **kw)
    assert "\n" not in str(info.value)
    assert cache_entries(cache) == []
    return str(info.value)


def test_missing_path(tmp_path):
    expect_error(tmp_path / "cache", "corpus file not found", str(tmp_path / "nope.txt"))
    expect_error(tmp_path / "cache", "no corpus files match", str(tmp_path / "*.txt"))


def test_empty_file(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    expect_error(tmp_path / "cache", "corpus file is empty", tmp_path / "empty.txt")


def test_whitespace_only_file(tmp_path):
    (tmp_path / "blank.txt").write_text("  \n\n\t \n   \n")
    expect_error(tmp_path / "cache", "contains only whitespace", tmp_path / "blank.txt")


def test_non_utf8_is_refused_by_default_and_replaced_on_request(tmp_path):
    f = tmp_path / "latin1.txt"
    lines = [d.encode() for d in prose_docs(40)]
    lines[3] = "Caf\u00e9 cr\u00e8me is served here.".encode("latin-1")
    lines[7] = b"\xff\xfe broken bytes"
    f.write_bytes(b"\n\n".join(lines) + b"\n")
    msg = expect_error(tmp_path / "cache", "2 line", f)
    assert "not valid UTF-8" in msg and "first: line 7" in msg and "--encoding-errors replace" in msg
    p = prepare(f, "tiny", vocab_size=300, cache_dir=tmp_path / "cache", encoding_errors="replace")
    assert p.stats["invalid_utf8_lines"] == 2


def test_single_document_cannot_be_split(tmp_path):
    (tmp_path / "one.txt").write_text(PROSE + "\n")
    expect_error(tmp_path / "cache", "at least 2", tmp_path / "one.txt")


def test_vocab_mismatch_with_checkpoint(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(prose_docs(40)))
    p = prepare(corpus, "tiny", vocab_size=300, cache_dir=tmp_path / "cache")
    check_vocab(p.tokenizer_dir, p.vocab_size)  # matching: fine
    with pytest.raises(UserError, match=rf"tokenizer has {p.vocab_size} tokens but the checkpoint has a vocabulary of 30522"):
        check_vocab(p.tokenizer_dir, 30522)
    with pytest.raises(UserError, match="requested vocab_size"):
        prepare(corpus, "tiny", tokenizer=p.tokenizer_dir, vocab_size=8192, cache_dir=tmp_path / "other")
    assert cache_entries(tmp_path / "other") == []


def test_max_length_beyond_position_table(tmp_path):
    with pytest.raises(UserError, match=r"max_length 1024 is larger than the model's position table \(512"):
        check_max_length(1024, 512)
    expect_error(tmp_path / "cache", "position table", None, max_length=1024)


def test_missing_text_column_jsonl_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"body": d, "id": i} for i, d in enumerate(prose_docs(30))]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    msg = expect_error(tmp_path / "cache", "no 'text' column", jsonl)
    assert "body" in msg and "--text-column" in msg
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    expect_error(tmp_path / "cache", "no 'text' column", tmp_path / "c.parquet")
    ok = prepare(jsonl, "tiny", vocab_size=300, cache_dir=tmp_path / "cache", text_column="body")
    assert ok.stats["train"]["documents"] + ok.stats["val"]["documents"] == 30


def test_offline_hub_name(tmp_path):
    # A fresh process, because huggingface_hub reads HF_HUB_OFFLINE at import; offline, tests never touch the network.
    code = "import sys; from nni_lvbert import cli; cli.COMMANDS = [('data', 'nni_lvbert.data.cli')]; sys.exit(cli.main())"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    cache = tmp_path / "cache"
    run = subprocess.run([sys.executable, "-c", code, "data", "prepare", "--corpus", "openwebtext", "--cache-dir", str(cache)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip() == ("error: cannot reach the Hugging Face hub for 'openwebtext' (offline?): "
                                  "pass local files instead, e.g. --corpus path/to/*.txt")
    assert cache_entries(cache) == []


def test_cli_bad_input_prints_one_error_line_and_exits_2(tmp_path, monkeypatch, capsys):
    # Only the data stage: keeps these tests independent of the other stages' imports.
    monkeypatch.setattr(cli, "COMMANDS", [("data", "nni_lvbert.data.cli")])
    cache = tmp_path / "cache"
    (tmp_path / "empty.txt").write_text("")
    for corpus in (str(tmp_path / "missing.txt"), str(tmp_path / "empty.txt")):
        code = cli.main(["data", "prepare", "--corpus", corpus, "--size", "tiny", "--cache-dir", str(cache)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and err[0].startswith("error: ")
    assert cache_entries(cache) == []
    corpus = tmp_path / "ok.txt"
    corpus.write_text("\n\n".join(prose_docs(40)))
    args = ["data", "prepare", "--corpus", str(corpus), "--size", "tiny", "--vocab-size", "300", "--cache-dir", str(cache)]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "train" in out and "val" in out and "tokens" in out
    assert cli.main(args + ["--json"]) == 0
    meta = json.loads(capsys.readouterr().out)
    assert meta["reused"] and meta["stats"]["train"]["sequences"] > 0
