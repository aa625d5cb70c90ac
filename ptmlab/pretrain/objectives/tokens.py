"""What the objectives need to know about a tokenizer, computed once per tokenizer.

Special ids (pad, mask, start/end of a sequence, separator), the ids a random replacement may draw from, and
which vocabulary entries continue a word rather than start one: a WordPiece continuation starts with ``##``;
byte-level BPE (GPT-2, RoBERTa) and Metaspace (SentencePiece, Unigram) pieces *start* a word with ``Ġ`` / ``▁``,
so a piece without the marker continues the word before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_MARKERS = {"wordpiece": "##", "bytelevel": "Ġ", "metaspace": "▁"}
_SENTENCE_END = (".", "!", "?")


@dataclass
class TokenInfo:
    vocab_size: int  # len(tokenizer): every id the tokenizer can produce is below it
    pad_id: int
    mask_id: int | None
    cls_id: int | None
    sep_id: int | None
    bos_id: int | None
    eos_id: int | None
    prefix: list[int]  # what the tokenizer puts before one sequence ([CLS], <s>, or nothing)
    suffix: list[int]  # ... and after it ([SEP], </s>, or nothing)
    special: np.ndarray  # bool [vocab_size]: never masked, never drawn as a random replacement
    random_pool: np.ndarray  # ids a random replacement is drawn from
    word_marker: str  # "wordpiece" | "bytelevel" | "metaspace"
    continuation: np.ndarray = field(repr=False)  # bool [vocab_size]: the piece continues the previous word
    sentence_end: np.ndarray = field(repr=False)  # bool [vocab_size]: ".", "!", "?" (with or without a marker)
    extra_ids: list[int] = field(default_factory=list)  # T5 sentinels <extra_id_0>, <extra_id_1>, ... if present

    @property
    def start_id(self) -> int | None:
        return self.prefix[0] if self.prefix else (self.cls_id if self.cls_id is not None else self.bos_id)

    @property
    def end_id(self) -> int | None:
        return self.suffix[-1] if self.suffix else (self.sep_id if self.sep_id is not None else self.eos_id)

    @property
    def doc_sep_id(self) -> int:
        """The token put between documents when they are packed into blocks: EOS, else SEP, else pad."""
        for i in (self.eos_id, self.sep_id, self.pad_id):
            if i is not None:
                return int(i)
        return 0


_CACHE: dict[int, tuple[object, TokenInfo]] = {}


def token_info(tokenizer) -> TokenInfo:
    """The ``TokenInfo`` of a transformers tokenizer (cached per tokenizer object)."""
    hit = _CACHE.get(id(tokenizer))
    if hit is not None and hit[0] is tokenizer:
        return hit[1]
    info = _build(tokenizer)
    _CACHE[id(tokenizer)] = (tokenizer, info)
    return info


def _opt_id(tokenizer, name: str) -> int | None:
    try:
        v = getattr(tokenizer, name)
    except AttributeError:
        return None
    return None if v is None else int(v)


def _build(tokenizer) -> TokenInfo:
    n = len(tokenizer)
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    prefix, suffix = [], []
    for i in range(len(full) - len(plain) + 1):
        if full[i:i + len(plain)] == plain:
            prefix, suffix = list(full[:i]), list(full[i + len(plain):])
            break
    special = np.zeros(n, dtype=bool)
    special[[i for i in tokenizer.all_special_ids if 0 <= i < n]] = True
    pieces = tokenizer.convert_ids_to_tokens(list(range(n)))
    pieces = [p if isinstance(p, str) else "" for p in pieces]
    counts = {k: sum(p.startswith(m) for p in pieces) for k, m in _MARKERS.items()}
    marker = max(counts, key=counts.get) if max(counts.values()) > 0 else "wordpiece"
    m = _MARKERS[marker]
    starts_with = np.array([p.startswith(m) for p in pieces], dtype=bool)
    continuation = starts_with if marker == "wordpiece" else ~starts_with
    continuation &= ~special
    ends = {s for s in _SENTENCE_END} | {"Ġ" + s for s in _SENTENCE_END} | {"▁" + s for s in _SENTENCE_END}
    sentence_end = np.array([p in ends for p in pieces], dtype=bool)
    extra = []
    for k in range(1000):
        tid = tokenizer.convert_tokens_to_ids(f"<extra_id_{k}>")
        if tid is None or tid == tokenizer.unk_token_id:
            break
        extra.append(int(tid))
    return TokenInfo(
        vocab_size=n, pad_id=_opt_id(tokenizer, "pad_token_id") or 0, mask_id=_opt_id(tokenizer, "mask_token_id"),
        cls_id=_opt_id(tokenizer, "cls_token_id"), sep_id=_opt_id(tokenizer, "sep_token_id"),
        bos_id=_opt_id(tokenizer, "bos_token_id"), eos_id=_opt_id(tokenizer, "eos_token_id"),
        prefix=prefix, suffix=suffix, special=special, random_pool=np.flatnonzero(~special).astype(np.int64),
        word_marker=marker, continuation=continuation, sentence_end=sentence_end, extra_ids=extra)
