"""Text corpora as one memory-mapped token file, cached by content, packed into fixed-length blocks.

Pre-training reads the same text for many epochs and many runs, so it is tokenized once (no special tokens, no
truncation) into ``tokens.bin`` (uint32) plus the document ranges ``docs.npy``, under
``$PTMLAB_CACHE/corpora/<key>/`` where the key hashes the files' bytes and the tokenizer. Reading and tokenizing
are streamed in pieces of at most ``chunk_chars`` characters, cut just before a whitespace run, where every
tokenizer this project uses (WordPiece, byte-level BPE, Metaspace) splits a word anyway, so a corpus larger than
memory gives the same tokens as tokenizing each document whole.

``pack_blocks`` lays the documents end to end with a separator between them and cuts the stream into blocks of
exactly ``content_length`` tokens (RoBERTa's FULL-SENTENCES packing); a block is assembled from the memory map
when asked for, so no copy of the corpus is held in RAM.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmlab.core.errors import PtmlabError
from ptmlab.core.progress import progress
from ptmlab.data.encode import _tokenizer_fingerprint, cache_dir

DOC_SEPS = ("blank", "file")
TEXT_SUFFIXES = {".txt", ".tokens", ".raw", ".gz", ".jsonl", ""}
# suffix-less files in a folder that describe the data rather than hold it
_NOT_TEXT = {"readme", "license", "licence", "copying", "notice", "authors", "changelog"}
_VERSION = "corpus-v1"
DEFAULT_CHUNK_CHARS = 1 << 20


# ------------------------------------------------------------------------------------------------ reading
def expand_paths(paths: list[str] | str) -> list[Path]:
    """Files named directly, plus the text files under each folder (recursive, sorted; hidden files skipped)."""
    if isinstance(paths, str | Path):
        paths = [str(paths)]
    if not paths:
        raise PtmlabError("no corpus files given: pass --files with text files or folders")
    out: list[Path] = []
    for name in paths:
        p = Path(name).expanduser()
        if p.is_dir():
            found = [f for f in sorted(p.rglob("*")) if f.is_file() and _is_text_file(f, p)]
            if not found:
                raise PtmlabError(f"folder '{name}' holds no text files (*.txt, *.gz, *.jsonl, *.tokens, *.raw "
                                  f"or files without a suffix): pass a folder with text")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise PtmlabError(f"corpus file '{name}' does not exist: pass existing text files or folders")
    return out


def _is_text_file(f: Path, root: Path) -> bool:
    rel = f.relative_to(root)
    if any(part.startswith(".") for part in rel.parts):
        return False
    if f.suffix == "" and f.name.lower() in _NOT_TEXT:
        return False
    return f.suffix.lower() in TEXT_SUFFIXES


def _is_jsonl(p: Path) -> bool:
    name = p.name.lower()
    return name.endswith(".jsonl") or name.endswith(".jsonl.gz")


def _open(p: Path):
    if p.suffix.lower() == ".gz":
        return gzip.open(p, "rt", encoding="utf-8")
    return open(p, encoding="utf-8")


def _cut_point(text: str) -> int:
    """The last index where a whitespace run starts right after a non-space character (len(text) if none)."""
    i = len(text) - 1
    while i > 0:
        if text[i].isspace() and not text[i - 1].isspace():
            return i
        i -= 1
    return len(text)


def _split_long(text: str, max_chars: int) -> Iterator[str]:
    """Pieces of one document, each about ``max_chars`` long, cut before a whitespace run."""
    while len(text) > max_chars:
        cut = _cut_point(text[:max_chars + 1])
        yield text[:cut]
        text = text[cut:]
    if text:
        yield text


def _text_pieces(p: Path, f, doc_sep: str, max_chars: int) -> Iterator[tuple[str, bool]]:
    buf: list[str] = []
    size = 0
    new_doc = True
    for line in iter(lambda: f.readline(max_chars), ""):
        if doc_sep == "blank" and not line.strip():
            if buf:
                yield from _finish(buf, new_doc, max_chars)
            buf, size, new_doc = [], 0, True
            continue
        buf.append(line)
        size += len(line)
        if size >= max_chars:
            text = "".join(buf)
            if new_doc:
                text = text.lstrip()
            cut = _cut_point(text)
            if text[:cut].strip():
                yield text[:cut], new_doc
                new_doc = False
                text = text[cut:]
            buf, size = [text], len(text)
    if buf:
        yield from _finish(buf, new_doc, max_chars)


def _finish(buf: list[str], new_doc: bool, max_chars: int) -> Iterator[tuple[str, bool]]:
    text = "".join(buf)
    text = text.strip() if new_doc else text.rstrip()
    for piece in _split_long(text, max_chars):
        yield piece, new_doc
        new_doc = False


def _jsonl_pieces(p: Path, f, max_chars: int) -> Iterator[tuple[str, bool]]:
    for lineno, line in enumerate(f, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise PtmlabError(f"{p}:{lineno}: not valid JSON ({e.msg}): each line must be a JSON object with a "
                              f"\"text\" string") from None
        text = obj.get("text") if isinstance(obj, dict) else None
        if not isinstance(text, str):
            raise PtmlabError(f"{p}:{lineno}: no \"text\" string field: each line must be a JSON object with a "
                              f"\"text\" string")
        text = text.strip()
        new_doc = True
        for piece in _split_long(text, max_chars):
            yield piece, new_doc
            new_doc = False


def iter_pieces(paths: list[str] | str, doc_sep: str = "blank",
                max_chars: int = DEFAULT_CHUNK_CHARS) -> Iterator[tuple[str, bool]]:
    """(text, starts_a_document) pieces of at most about ``max_chars`` characters, streamed file by file."""
    if doc_sep not in DOC_SEPS:
        raise PtmlabError(f"unknown document separator '{doc_sep}': choose from {', '.join(DOC_SEPS)}")
    if max_chars < 16:
        raise PtmlabError(f"chunk size {max_chars} is too small: use at least 16 characters")
    for p in expand_paths(paths):
        try:
            with _open(p) as f:
                gen = _jsonl_pieces(p, f, max_chars) if _is_jsonl(p) else _text_pieces(p, f, doc_sep, max_chars)
                yield from gen
        except UnicodeDecodeError as e:
            raise PtmlabError(f"'{p}' is not UTF-8 text ({e.reason} at byte {e.start}): convert it to UTF-8 "
                              f"(e.g. iconv -t utf-8)") from None
        except (OSError, EOFError) as e:
            raise PtmlabError(f"cannot read '{p}' ({e}): pass a readable text, .gz or .jsonl file") from None


def iter_documents(paths: list[str] | str, doc_sep: str = "blank") -> Iterator[str]:
    """Documents of text files, folders, ``.gz`` and ``.jsonl`` files (a ``text`` field per line).

    A text file is split into documents at blank lines (``doc_sep="blank"``, right for WikiText and books)
    or is one document (``"file"``); each ``.jsonl`` line is one document. Documents are stripped; empty ones
    are skipped.
    """
    doc: list[str] = []
    for piece, start in iter_pieces(paths, doc_sep):
        if start and doc:
            yield "".join(doc)
            doc = []
        doc.append(piece)
    if doc:
        yield "".join(doc)


# ------------------------------------------------------------------------------------------------ token file
@dataclass
class TokenCorpus:
    """Token ids of a corpus (a memory map) and the [start, end) range of each document in it."""

    tokens: np.ndarray
    doc_offsets: np.ndarray  # int64 [n_docs, 2]
    path: Path | None = None
    cached: bool = False  # True when read from the cache rather than tokenized now

    @property
    def n_docs(self) -> int:
        return len(self.doc_offsets)

    @property
    def n_tokens(self) -> int:
        return int((self.doc_offsets[:, 1] - self.doc_offsets[:, 0]).sum())

    def document(self, i: int) -> np.ndarray:
        s, e = self.doc_offsets[i]
        return np.asarray(self.tokens[s:e])

    def _view(self, offsets: np.ndarray) -> TokenCorpus:
        return TokenCorpus(self.tokens, offsets.astype(np.int64).reshape(-1, 2), self.path, self.cached)

    def split(self, valid_fraction: float, seed: int = 0) -> tuple[TokenCorpus, TokenCorpus]:
        """(train, valid) by whole documents, about ``valid_fraction`` of the tokens held out.

        Documents are drawn in a seeded random order until the held-out part reaches its share (a document
        that would overshoot it is passed over). When the documents are too few or too uneven for that (one
        huge book), the last ``valid_fraction`` of the token stream is held out instead.
        """
        if not 0 < valid_fraction < 1:
            raise PtmlabError(f"--valid-fraction must be in (0, 1), got {valid_fraction}")
        lens = self.doc_offsets[:, 1] - self.doc_offsets[:, 0]
        target = valid_fraction * lens.sum()
        order = np.random.default_rng(seed).permutation(self.n_docs)
        taken = np.cumsum(lens[order]) <= target
        chosen = order[taken]
        got = lens[chosen].sum()
        if len(chosen) and len(chosen) < self.n_docs and got >= 0.5 * target:
            is_valid = np.zeros(self.n_docs, dtype=bool)
            is_valid[chosen] = True
            return self._view(self.doc_offsets[~is_valid]), self._view(self.doc_offsets[is_valid])
        return self._split_contiguous(valid_fraction)

    def _split_contiguous(self, valid_fraction: float) -> tuple[TokenCorpus, TokenCorpus]:
        lens = self.doc_offsets[:, 1] - self.doc_offsets[:, 0]
        cum = np.concatenate([[0], np.cumsum(lens)])
        cut = int(round(cum[-1] * (1 - valid_fraction)))
        if cut <= 0 or cut >= cum[-1]:
            raise PtmlabError(f"the corpus holds {int(cum[-1])} tokens, too few to hold out "
                              f"{valid_fraction:.0%}: use more text or --valid-files")
        d = int(np.searchsorted(cum, cut, side="right") - 1)  # the document holding token `cut`
        at = int(self.doc_offsets[d, 0] + (cut - cum[d]))
        train = np.concatenate([self.doc_offsets[:d], [[self.doc_offsets[d, 0], at]]])
        valid = np.concatenate([[[at, self.doc_offsets[d, 1]]], self.doc_offsets[d + 1:]])
        train = train[train[:, 1] > train[:, 0]]
        valid = valid[valid[:, 1] > valid[:, 0]]
        return self._view(train), self._view(valid)


def _corpus_key(files: list[Path], tokenizer, doc_sep: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{_VERSION}|{doc_sep}|{_tokenizer_fingerprint(tokenizer)}".encode())
    for f in files:
        h.update(f"|{f.stat().st_size}|".encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()


def corpora_dir() -> Path:
    return cache_dir().parent / "corpora"


def _load(d: Path, cached: bool) -> TokenCorpus:
    meta = json.loads((d / "meta.json").read_text())
    tokens = np.memmap(d / "tokens.bin", dtype=np.uint32, mode="r", shape=(meta["n_tokens"],))
    offsets = np.load(d / "docs.npy")
    return TokenCorpus(tokens, offsets, d, cached)


def _encode(tokenizer, texts: list[str]) -> list[list[int]]:
    return tokenizer(texts, add_special_tokens=False, return_attention_mask=False, return_token_type_ids=False,
                     verbose=False)["input_ids"]


def tokenize_corpus(paths: list[str] | str, tokenizer, *, doc_sep: str = "blank",
                    chunk_chars: int = DEFAULT_CHUNK_CHARS, cache: bool = True) -> TokenCorpus:
    """Tokenize text files once into a memory-mapped token file; a second call with the same bytes and
    tokenizer reads the cache. Streamed: at most ``chunk_chars`` characters go to the tokenizer at a time."""
    files = expand_paths(paths)
    key = _corpus_key(files, tokenizer, doc_sep)
    root = corpora_dir()
    final = root / key
    if cache and (final / "meta.json").is_file():
        try:
            return _load(final, cached=True)
        except (OSError, ValueError, KeyError, json.JSONDecodeError):
            shutil.rmtree(final, ignore_errors=True)  # a damaged entry is rebuilt, never trusted
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key[:8]}-", dir=root))
    try:
        n_tokens, n_docs = _write_tokens(files, tokenizer, doc_sep, chunk_chars, tmp)
        if n_tokens == 0:
            names = ", ".join(str(p) for p in ([paths] if isinstance(paths, str) else paths))
            raise PtmlabError(f"the corpus ({names}) holds no text (0 tokens): pass files with text")
        (tmp / "meta.json").write_text(json.dumps({"n_tokens": n_tokens, "n_docs": n_docs, "doc_sep": doc_sep,
                                                   "files": [str(f) for f in files]}))
        if not cache:
            corpus = _load(tmp, cached=False)  # the mapping outlives the deleted files
            corpus.path = None
            shutil.rmtree(tmp, ignore_errors=True)
            return corpus
        try:
            os.rename(tmp, final)
        except OSError:  # another process wrote the same corpus first: use theirs
            shutil.rmtree(tmp, ignore_errors=True)
        return _load(final, cached=False)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_tokens(files: list[Path], tokenizer, doc_sep: str, chunk_chars: int, out: Path) -> tuple[int, int]:
    offsets: list[tuple[int, int]] = []
    n_tokens = 0
    total = sum(f.stat().st_size for f in files)
    bar = progress(total=total, desc="tokenize", unit="B", unit_scale=True)
    with open(out / "tokens.bin", "wb") as fout:
        texts: list[str] = []
        starts: list[bool] = []
        size = 0

        def flush() -> None:
            nonlocal n_tokens, size
            for ids, start in zip(_encode(tokenizer, texts), starts, strict=True):
                if not ids:
                    continue
                if start or not offsets:
                    offsets.append((n_tokens, n_tokens + len(ids)))
                else:
                    offsets[-1] = (offsets[-1][0], n_tokens + len(ids))
                fout.write(np.asarray(ids, dtype=np.uint32).tobytes())
                n_tokens += len(ids)
            bar.update(size)
            texts.clear()
            starts.clear()
            size = 0

        for piece, start in iter_pieces(files, doc_sep, chunk_chars):
            texts.append(piece)
            starts.append(start)
            size += len(piece)
            if size >= chunk_chars:
                flush()
        if texts:
            flush()
        fout.flush()
        os.fsync(fout.fileno())
    bar.close()
    np.save(out / "docs.npy", np.asarray(offsets, dtype=np.int64).reshape(-1, 2))
    return n_tokens, len(offsets)


# ------------------------------------------------------------------------------------------------ blocks
class Blocks:
    """Fixed-length blocks over a corpus's documents laid end to end with ``sep_id`` between them.

    Block ``i`` covers positions ``[i * length, (i + 1) * length)`` of that virtual stream; the last partial
    block is dropped. Each block is assembled from the memory map on access.
    """

    def __init__(self, corpus: TokenCorpus, length: int, sep_id: int):
        self.corpus = corpus
        self.length = int(length)
        self.sep_id = int(sep_id)
        self._starts = corpus.doc_offsets[:, 0]
        self._lens = corpus.doc_offsets[:, 1] - corpus.doc_offsets[:, 0]
        self._vstart = np.concatenate([[0], np.cumsum(self._lens + 1)[:-1]]).astype(np.int64)
        stream = int(self._lens.sum()) + max(0, corpus.n_docs - 1)
        self._n = stream // self.length

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> np.ndarray:
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"block {i} out of range ({self._n} blocks)")
        L = self.length
        lo = i * L
        out = np.empty(L, dtype=np.int64)
        d = int(np.searchsorted(self._vstart, lo, side="right") - 1)
        pos = lo
        tokens = self.corpus.tokens
        while pos < lo + L:
            off = pos - int(self._vstart[d])
            n = int(self._lens[d])
            if off < n:
                take = min(n - off, lo + L - pos)
                s = int(self._starts[d]) + off
                out[pos - lo:pos - lo + take] = tokens[s:s + take]
                pos += take
            else:  # the separator after document d
                out[pos - lo] = self.sep_id
                pos += 1
                d += 1
        return out

    def batch(self, indices: list[int]) -> np.ndarray:
        """Blocks ``indices`` stacked: int64 [len(indices), length]."""
        return np.stack([self[i] for i in indices]) if indices else np.empty((0, self.length), np.int64)


def pack_blocks(corpus: TokenCorpus, content_length: int, sep_id: int) -> Blocks:
    """Documents joined by ``sep_id`` and cut into blocks of exactly ``content_length`` tokens."""
    if content_length < 1:
        raise PtmlabError(f"block content length {content_length} is not positive: use a larger --block-size")
    blocks = Blocks(corpus, content_length, sep_id)
    if len(blocks) == 0:
        raise PtmlabError(f"the corpus holds {corpus.n_tokens} tokens, fewer than one block of {content_length}: "
                          f"use more text or a smaller --block-size")
    return blocks


# ------------------------------------------------------------------------------------------------ unigram baseline
def token_counts(corpus: TokenCorpus, vocab_size: int, chunk_tokens: int = 1 << 22) -> np.ndarray:
    """How often each token id occurs in ``corpus``'s documents (int64 [vocab_size]), read from the memory map in
    pieces of about ``chunk_tokens`` tokens, so no copy of a large corpus is held in RAM."""
    counts = np.zeros(int(vocab_size), dtype=np.int64)
    parts: list[np.ndarray] = []
    held = 0

    def flush() -> None:
        nonlocal counts, held
        if parts:
            ids = np.concatenate(parts).astype(np.int64)
            if len(ids) and int(ids.max()) >= len(counts):
                counts = np.concatenate([counts, np.zeros(int(ids.max()) + 1 - len(counts), np.int64)])
            counts += np.bincount(ids, minlength=len(counts))
            parts.clear()
            held = 0

    for s, e in corpus.doc_offsets:
        parts.append(np.asarray(corpus.tokens[int(s):int(e)]))
        held += int(e - s)
        if held >= chunk_tokens:
            flush()
    flush()
    return counts


def unigram_cross_entropy(train_counts: np.ndarray, held_ids: np.ndarray, skip_ids=()) -> float:
    """Nats per token of ``held_ids`` under the unigram frequencies ``train_counts`` (add-one smoothed over the
    vocabulary, the ids in ``skip_ids`` left out of both): the held-out loss of a model that learnt only which
    tokens are common. A pre-training run's held-out loss that does not clearly beat it learnt nothing more."""
    counts = np.asarray(train_counts, dtype=np.float64).copy()
    held = np.asarray(held_ids, dtype=np.int64).ravel()
    skip = np.asarray(sorted({int(i) for i in skip_ids}), dtype=np.int64)
    if len(held) and int(held.max()) >= len(counts):
        counts = np.concatenate([counts, np.zeros(int(held.max()) + 1 - len(counts))])
    skip = skip[skip < len(counts)]
    counts[skip] = 0.0
    held = held[~np.isin(held, skip)]
    if not len(held):
        raise ValueError("no held-out tokens to score")
    probs = (counts + 1.0) / (counts.sum() + len(counts))
    return float(-np.log(probs[held]).mean())
