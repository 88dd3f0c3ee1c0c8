"""Split documents into sentences, tokenize, and pack them into BERT segment pairs.

Each sequence is `[CLS] A [SEP] B [SEP]` with token_type_ids 0 for `[CLS] A [SEP]` and 1 for `B [SEP]`, at most
`max_length` tokens. A document's tokens are cut into consecutive chunks of `max_length - 3` (only its last chunk
is shorter: filling sequences rather than stopping at the last whole sentence wastes ~25 % less compute on padding),
and each chunk is cut into A and B at the sentence boundary nearest its middle, or mid-chunk when it holds no
boundary. Both segments are non-empty and in their original order, so a sentence-order-prediction collator can later
swap them, finding the boundary from token_type_ids. Sequences never cross documents. Unlike BERT there is no random
short-sequence sampling: packing is a pure function of the text, so the same corpus and settings give the same data.
"""
from __future__ import annotations

import re

# Sentence end: . ! or ? (plus closing quotes/brackets), whitespace, then something that can start a sentence.
SENTENCE_END = re.compile(r"(?<=[.!?])[\"'\u201d\u2019)\]]*\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])")
MIN_TOKENS = 2  # a sequence needs one token in each segment; shorter document tails are dropped

_TOKENIZERS: dict = {}  # tokenizer.json path -> Tokenizer, one per (worker) process


def split_sentences(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        starts = [0] + [m.end() for m in SENTENCE_END.finditer(line)]
        out += [line[a:b].strip() for a, b in zip(starts, starts[1:] + [len(line)]) if line[a:b].strip()]
    return out


def _tokenizer(path: str):
    if path not in _TOKENIZERS:
        from tokenizers import Tokenizer

        _TOKENIZERS[path] = Tokenizer.from_file(path)
    return _TOKENIZERS[path]


def pack_sentences(sentences: list[list[int]], max_length: int, cls_id: int, sep_id: int):
    """Yield (input_ids, token_type_ids) for one document's tokenized sentences."""
    budget = max_length - 3
    tokens = [t for s in sentences for t in s]
    ends, pos = set(), 0
    for s in sentences:
        pos += len(s)
        ends.add(pos)
    for start in range(0, len(tokens), budget):
        stop = min(start + budget, len(tokens))
        if stop - start < MIN_TOKENS:
            continue
        middle = (start + stop) / 2
        inside = [e for e in ends if start < e < stop]
        cut = min(inside, key=lambda e: (abs(e - middle), e)) if inside else (start + stop) // 2
        a, b = tokens[start:cut], tokens[cut:stop]
        yield [cls_id, *a, sep_id, *b, sep_id], [0] * (len(a) + 2) + [1] * (len(b) + 1)


def pack_batch(batch: dict, tokenizer_file: str, max_length: int, cls_id: int, sep_id: int) -> dict:
    """datasets.map(batched=True) function: a batch of documents in, a (usually different-sized) batch of sequences out."""
    tok = _tokenizer(tokenizer_file)
    doc_sentences = [split_sentences(t) for t in batch["text"]]
    flat = [s for sents in doc_sentences for s in sents]
    encoded = tok.encode_batch(flat, add_special_tokens=False) if flat else []
    ids, types = [], []
    pos = 0
    for sents in doc_sentences:
        tokenized = [encoded[pos + i].ids for i in range(len(sents))]
        pos += len(sents)
        for input_ids, token_type_ids in pack_sentences(tokenized, max_length, cls_id, sep_id):
            ids.append(input_ids)
            types.append(token_type_ids)
    return {"input_ids": ids, "token_type_ids": types}


def packed_features(vocab_size: int):
    import datasets

    # uint16 halves the cache for any BERT-sized vocabulary; token ids are converted to int64 when batched.
    id_type = "uint16" if vocab_size <= 1 << 16 else "int32"
    return datasets.Features({"input_ids": datasets.List(datasets.Value(id_type)),
                              "token_type_ids": datasets.List(datasets.Value("int8"))})
