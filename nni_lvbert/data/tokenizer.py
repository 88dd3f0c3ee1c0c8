"""BERT-style WordPiece tokenizer: train one with `tokenizers`, or accept an existing directory / vocab.txt.

Whatever the source, the result is saved as a `transformers` PreTrainedTokenizerFast directory (tokenizer.json +
tokenizer_config.json) so that packing, collators and later checkpoints all read the same file.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import UserError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0..4 when trained here; [PAD] = 0 as in ModelConfig
TOKENIZER_VERSION = 1  # bump when training settings change so cached tokenizers are not reused
MIN_VOCAB = 128  # specials + an alphabet; real runs use 8192 (tiny) or 30522
MODEL_INPUT_NAMES = ["input_ids", "token_type_ids", "attention_mask"]


def train_tokenizer(texts, vocab_size: int, lowercase: bool = True, length: int | None = None,
                    max_position: int = 512):
    """Train WordPiece on an iterable of strings (BERT normalizer + pre-tokenizer, `##` continuation)."""
    from tokenizers import Tokenizer, models, trainers

    if vocab_size < MIN_VOCAB:
        raise UserError(f"vocab_size must be at least {MIN_VOCAB} for a WordPiece vocabulary, got {vocab_size}")
    tok = _bert_pipeline(Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100)), lowercase)
    # min_frequency 2 drops hapaxes; limit_alphabet 1000 as in BertWordPieceTokenizer, so rare scripts map to [UNK].
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=2, limit_alphabet=1000,
                                        special_tokens=list(SPECIAL_TOKENS), continuing_subword_prefix="##",
                                        show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer, length=length)
    # The trainer numbers tokens in an order that depends on Rust hash-map iteration (random per process), so two
    # trainings on the same text give the same vocabulary with different ids. Renumber canonically: specials first,
    # then the rest sorted. WordPiece's longest-match encoding does not depend on ids, only on the set of tokens.
    # (Frequency ties at the very end of the vocabulary can still swap a few rare tokens between trainings; the
    # cache keeps one tokenizer, so every candidate and every run of a prepared cache use the same one.)
    vocab = tok.get_vocab()
    ordered = list(SPECIAL_TOKENS) + sorted(set(vocab) - set(SPECIAL_TOKENS))
    tok.model = models.WordPiece(vocab={t: i for i, t in enumerate(ordered)}, unk_token="[UNK]",
                                 continuing_subword_prefix="##", max_input_chars_per_word=100)
    return wrap(tok, max_position)


def wrap(tok, max_position: int = 512):
    """A raw `tokenizers.Tokenizer` with BERT specials as a PreTrainedTokenizerFast with the BERT pair template."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    missing = [t for t in SPECIAL_TOKENS if tok.token_to_id(t) is None]
    if missing:
        raise UserError(f"tokenizer lacks the special token(s) {', '.join(missing)}")
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=max_position, model_input_names=MODEL_INPUT_NAMES,
    )


def load_tokenizer(path, lowercase: bool = True, max_position: int = 512):
    """A tokenizer from a saved directory (tokenizer.json or any fast-loadable one) or a BERT vocab.txt."""
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"tokenizer not found: {path} (give a tokenizer directory or a vocab.txt)")
    if p.is_file():
        return _from_vocab_file(p, lowercase, max_position)
    if (p / "tokenizer.json").exists():
        # A damaged tokenizer.json is named as such (and never replaced by a vocab.txt lying next to it).
        from ..safeio import check_tokenizer_dir

        check_tokenizer_dir(p, fix="give an intact tokenizer directory (or a vocab.txt)")
    from transformers import AutoTokenizer

    try:
        hf = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    except Exception as exc:  # noqa: BLE001  (any failure: fall back to vocab.txt, else one error line)
        if (p / "vocab.txt").is_file():
            return _from_vocab_file(p / "vocab.txt", lowercase, max_position)
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"cannot load a tokenizer from {p}: {reason}") from None
    if not getattr(hf, "is_fast", False):
        raise UserError(f"tokenizer in {p} has no fast (Rust) version; give its vocab.txt instead")
    return wrap(hf.backend_tokenizer, max_position)


def _from_vocab_file(path: Path, lowercase: bool, max_position: int):
    from tokenizers import Tokenizer, models

    try:
        vocab = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            token = line.rstrip("\n")
            if token and token not in vocab:
                vocab[token] = len(vocab)
    except UnicodeDecodeError:
        raise UserError(f"{path} is not a UTF-8 vocab.txt") from None
    if len(vocab) < len(SPECIAL_TOKENS):
        raise UserError(f"{path} holds {len(vocab)} tokens; not a BERT vocab.txt")
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    return wrap(_bert_pipeline(tok, lowercase), max_position)


def _bert_pipeline(tok, lowercase: bool):
    """BERT normalizer (cleanup, CJK spacing; lower-casing and accent stripping when uncased) + pre-tokenizer."""
    from tokenizers import decoders, normalizers, pre_tokenizers

    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def vocab_size_of(tokenizer) -> int:
    """len() of a tokenizer, a tokenizer directory / vocab.txt, or an int."""
    if isinstance(tokenizer, int):
        return tokenizer
    if isinstance(tokenizer, (str, Path)):
        tokenizer = load_tokenizer(tokenizer)
    return len(tokenizer)


def check_vocab(tokenizer, expected_vocab_size: int, what: str = "the checkpoint") -> None:
    """UserError unless the tokenizer has exactly the vocabulary size `what` was built with."""
    n = vocab_size_of(tokenizer)
    if n != expected_vocab_size:
        raise UserError(f"tokenizer has {n} tokens but {what} has a vocabulary of {expected_vocab_size}: "
                        "use the tokenizer it was trained with")


def check_max_length(max_length: int, max_position: int) -> None:
    """UserError unless sequences of `max_length` fit the model's position table."""
    if not isinstance(max_length, int) or max_length < 8:
        raise UserError(f"max_length must be an integer of at least 8, got {max_length!r}")
    if max_length > max_position:
        raise UserError(f"max_length {max_length} is larger than the model's position table ({max_position} positions)")
