"""Corpus reading, the cached memory-mapped token file, document splits, block packing and the loop adapter."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest

from ptmlab.core.errors import PtmlabError
from ptmlab.pretrain.corpus import TokenCorpus, corpora_dir, iter_documents, pack_blocks, tokenize_corpus
from ptmlab.pretrain.data import PretrainData
from ptmlab.pretrain.objectives import build_objective

WORDS = ("the of and to in a is was for on as by with he it at from his an were are which this be or has had "
         "unbelievable tokenization pretraining transformers photosynthesis").split()


def _paragraph(rng: np.random.Generator, n_words: int) -> str:
    words = rng.choice(WORDS, size=n_words)
    lines, line = [], []
    for i, w in enumerate(words):
        line.append(str(w) + ("." if i % 11 == 10 else ""))
        if len(line) == 9:
            lines.append(" ".join(line))
            line = []
    lines.append(" ".join(line))
    return "\n".join(x for x in lines if x)


@pytest.fixture(scope="module")
def tok():
    from ptmlab.models.zoo import load_tokenizer

    return load_tokenizer("minilm")


@pytest.fixture(scope="module")
def bytelevel_tok():
    """A small byte-level BPE (GPT-2's pre-tokenizer) trained here, with no mask token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = np.random.default_rng(0)
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator([_paragraph(rng, 50) for _ in range(200)],
                          trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                              show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=t, eos_token="<|endoftext|>", pad_token="<|endoftext|>")


def _write_corpus(path, rng, n_docs=30, huge=3000):
    """Paragraphs separated by blank lines (some with extra blank lines and spaces), one huge paragraph."""
    docs = [_paragraph(rng, int(rng.integers(5, 120))) for _ in range(n_docs)]
    docs.insert(n_docs // 2, _paragraph(rng, huge))
    path.write_text("\n\n\n".join(docs[:5]) + "\n\n" + "\n  \n".join(docs[5:]) + "\n", encoding="utf-8")
    return docs


# --------------------------------------------------------------------------------------------- reading
def test_iter_documents_formats(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "b.txt").write_text("second file first doc\n\nsecond doc\nline two\n")
    (tmp_path / "d" / "a.txt").write_text("  first doc  \n\n\n")
    with gzip.open(tmp_path / "d" / "sub" / "c.gz", "wt", encoding="utf-8") as f:
        f.write("gzipped doc\n")
    (tmp_path / "d" / "sub" / "e.jsonl").write_text(json.dumps({"text": "json doc\n\nstill one"}) + "\n\n"
                                                    + json.dumps({"text": "json two", "id": 3}) + "\n")
    (tmp_path / "d" / "README").write_text("about this data\n")
    (tmp_path / "d" / "wiki").write_text("no suffix\n")
    (tmp_path / "d" / ".hidden.txt").write_text("hidden\n")
    (tmp_path / "d" / "table.csv").write_text("x,y\n")
    docs = list(iter_documents([str(tmp_path / "d")]))
    assert docs == ["first doc", "second file first doc", "second doc\nline two", "gzipped doc",
                    "json doc\n\nstill one", "json two", "no suffix"]
    assert list(iter_documents([str(tmp_path / "d" / "b.txt")], doc_sep="file")) == [
        "second file first doc\n\nsecond doc\nline two"]


def test_iter_documents_bad_input(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "ok"}) + "\n" + json.dumps({"body": "no text"}) + "\n")
    with pytest.raises(PtmlabError, match=r"bad.jsonl:2: no \"text\""):
        list(iter_documents([str(bad)]))
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(PtmlabError, match="latin.txt' is not UTF-8"):
        list(iter_documents([str(latin)]))
    with pytest.raises(PtmlabError, match="does not exist"):
        list(iter_documents([str(tmp_path / "missing.txt")]))
    (tmp_path / "empty").mkdir()
    with pytest.raises(PtmlabError, match="holds no text files"):
        list(iter_documents([str(tmp_path / "empty")]))


# --------------------------------------------------------------------------------------------- token file
@pytest.mark.parametrize("which", ["tok", "bytelevel_tok"])
def test_streamed_tokenization_equals_whole_documents(tmp_path, which, request):
    tokenizer = request.getfixturevalue(which)
    f = tmp_path / "corpus.txt"
    _write_corpus(f, np.random.default_rng(1))
    chunk = 500
    assert f.stat().st_size > 20 * chunk  # the file and its huge paragraph exceed the chunk many times
    corpus = tokenize_corpus([str(f)], tokenizer, chunk_chars=chunk, cache=False)
    docs = list(iter_documents([str(f)]))
    assert max(len(d) for d in docs) > 10 * chunk
    ref = [tokenizer(d, add_special_tokens=False)["input_ids"] for d in docs]
    assert corpus.n_docs == len(docs)
    assert np.array_equal(np.asarray(corpus.tokens), np.concatenate(ref))
    assert [len(corpus.document(i)) for i in range(corpus.n_docs)] == [len(r) for r in ref]
    assert isinstance(corpus.tokens, np.memmap) and corpus.tokens.dtype == np.uint32


def test_cache_hit_and_key(tmp_path, tok, bytelevel_tok, monkeypatch):
    monkeypatch.setenv("PTMLAB_CACHE", str(tmp_path / "cache"))  # a cache no other test touches
    f = tmp_path / "c.txt"
    _write_corpus(f, np.random.default_rng(2), huge=50)
    first = tokenize_corpus([str(f)], tok)
    assert not first.cached and first.path.parent == corpora_dir()
    mtime = os.stat(first.path / "tokens.bin").st_mtime_ns
    second = tokenize_corpus([str(f)], tok)
    assert second.cached and second.path == first.path
    assert os.stat(second.path / "tokens.bin").st_mtime_ns == mtime
    assert np.array_equal(np.asarray(first.tokens), np.asarray(second.tokens))
    other = tokenize_corpus([str(f)], bytelevel_tok)  # another tokenizer: another entry
    assert other.path != first.path and not other.cached
    f.write_text(f.read_text() + "\n\none more document\n")  # changed bytes: another entry
    changed = tokenize_corpus([str(f)], tok)
    assert changed.path != first.path and changed.n_docs == first.n_docs + 1


def test_empty_corpus_is_an_error_and_writes_nothing(tmp_path, tok):
    f = tmp_path / "blank.txt"
    f.write_text("\n\n   \n\n")
    before = set(corpora_dir().iterdir()) if corpora_dir().exists() else set()
    with pytest.raises(PtmlabError, match="holds no text"):
        tokenize_corpus([str(f)], tok)
    after = set(corpora_dir().iterdir()) if corpora_dir().exists() else set()
    assert after == before


# --------------------------------------------------------------------------------------------- splits
def _toy_corpus(lengths: list[int]) -> TokenCorpus:
    tokens = np.arange(sum(lengths), dtype=np.uint32) + 1000
    ends = np.cumsum(lengths)
    return TokenCorpus(tokens, np.stack([ends - np.asarray(lengths), ends], axis=1).astype(np.int64))


def test_split_by_documents():
    rng = np.random.default_rng(3)
    corpus = _toy_corpus(rng.integers(5, 60, size=400).tolist())
    train, valid = corpus.split(0.1, seed=7)
    again = corpus.split(0.1, seed=7)
    assert np.array_equal(valid.doc_offsets, again[1].doc_offsets)  # deterministic
    assert not np.array_equal(valid.doc_offsets, corpus.split(0.1, seed=8)[1].doc_offsets)
    both = np.concatenate([train.doc_offsets, valid.doc_offsets])
    assert sorted(map(tuple, both)) == sorted(map(tuple, corpus.doc_offsets))  # whole documents, disjoint
    assert 0.05 < valid.n_tokens / corpus.n_tokens <= 0.1 + 1e-9


def test_split_one_huge_document_by_token_range():
    corpus = _toy_corpus([1000])
    train, valid = corpus.split(0.2, seed=0)
    assert train.n_tokens == 800 and valid.n_tokens == 200
    assert np.array_equal(np.concatenate([train.document(0), valid.document(0)]), corpus.document(0))
    for bad in (0, 1, -0.1, 1.5):
        with pytest.raises(PtmlabError, match="valid-fraction must be in"):
            corpus.split(bad)


# --------------------------------------------------------------------------------------------- blocks
def test_pack_blocks_matches_concatenation():
    corpus = _toy_corpus([7, 3, 12, 1, 9, 30])
    for view in (corpus, corpus.split(0.3, seed=1)[0]):
        stream = []
        for i in range(view.n_docs):
            stream.extend(view.document(i).tolist() + [-5])
        stream = stream[:-1]  # separators between documents only
        blocks = pack_blocks(view, 8, sep_id=-5)
        assert len(blocks) == len(stream) // 8
        for i in range(len(blocks)):
            assert blocks[i].dtype == np.int64 and blocks[i].tolist() == stream[8 * i:8 * i + 8]
        assert blocks[-1].tolist() == blocks[len(blocks) - 1].tolist()
        with pytest.raises(IndexError):
            blocks[len(blocks)]
    with pytest.raises(PtmlabError, match="fewer than one block"):
        pack_blocks(_toy_corpus([3, 2]), 10, sep_id=0)


# --------------------------------------------------------------------------------------------- loop adapter
def test_pretrain_data_seeding(tok):
    corpus = _toy_corpus([400] * 5)
    corpus.tokens = (corpus.tokens - 1000 + 2000).astype(np.uint32)  # ordinary word ids
    blocks = pack_blocks(corpus, 62, sep_id=tok.sep_token_id)
    dyn = PretrainData(blocks, build_objective("mlm", tok), seed=3)
    static = PretrainData(blocks, build_objective("mlm", tok, masking="static"), seed=3)
    assert static.static and not dyn.static and len(dyn) == len(blocks) and set(dyn.lengths) == {62}
    idx = [5, 0, 9, 2]
    a, b = dyn.make_batch(idx, 1), dyn.make_batch(idx, 1)
    assert all(np.array_equal(a[k], b[k]) for k in a) and a["index"].tolist() == idx
    assert not np.array_equal(dyn.make_batch(idx, 2)["labels"], a["labels"])  # new masks every epoch
    assert np.array_equal(static.make_batch(idx, 2)["labels"], static.make_batch(idx, 0)["labels"])
    halves = [dyn.make_batch(idx[:2], 1), dyn.make_batch(idx[2:], 1)]
    for k in ("input_ids", "labels", "index"):
        assert np.array_equal(np.concatenate([h[k] for h in halves]), a[k])
    nsp = PretrainData(blocks, build_objective("nsp", tok), seed=3)  # draws other blocks: still split-invariant
    whole = nsp.make_batch(idx, 0)
    parts = [nsp.make_batch([i], 0) for i in idx]
    for k in ("input_ids", "labels", "token_type_ids", "next_sentence_label"):
        assert np.array_equal(np.concatenate([p[k] for p in parts]), whole[k])
