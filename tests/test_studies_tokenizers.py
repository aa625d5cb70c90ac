"""The tokenizers study: the majority-of-languages rule, its validity conditions on constructed rows, the shared news
test split it measures on, and ``--budget small`` on the shared data."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from conftest import SHARED

from ptmlab.studies.tokenizers import REAL, RIVAL, STAND_IN, decide_majority, deciders, validity

NEWSTEST = SHARED / "parallel" / "newstest"


def _counts(words, pieces, continued):
    return {"words": np.asarray(words, float), "pieces": np.asarray(pieces, float),
            "continued": np.asarray(continued, float)}


@pytest.fixture(scope="module")
def systems():
    rng = np.random.default_rng(0)
    words = rng.integers(5, 15, size=400)
    good = _counts(words, words * 1.2, words * 0.15)
    worse = _counts(words, words * 1.6, words * 0.40)  # more pieces, more continued words
    e1, e2 = rng.normal(0, 3, size=400), rng.normal(0, 3, size=400)
    tied = _counts(words, words * 1.2 + e1 - e1.mean(), words * 0.15 + e2 - e2.mean())
    return good, worse, tied


def test_majority_of_languages_decides(systems):
    good, worse, tied = systems
    favour, against, undecided = {"x": (good, worse)}, {"x": (worse, good)}, {"x": (good, tied)}
    two_of_three = decide_majority({"en": favour, "de": favour, "fr": against})
    assert two_of_three.outcome == "supported"  # one language against does not sink "most languages"
    assert "2 of 3 languages favour" in two_of_three.reason and "(en, de)" in two_of_three.reason
    assert decide_majority({"en": favour, "de": against, "fr": against}).outcome == "not supported"
    # one for, one against, one undecided: the undecided one could still make a majority either way
    assert decide_majority({"en": favour, "de": against, "fr": undecided}).outcome == "inconclusive"
    assert decide_majority({"en": against, "de": undecided, "fr": undecided}).outcome == "inconclusive"
    # half is not most: one of two languages in favour, the other undecided, cannot be supported
    assert decide_majority({"en": favour, "de": undecided}).outcome == "inconclusive"
    assert decide_majority({"en": favour, "de": against}).outcome == "not supported"
    assert decide_majority({}).outcome == "inconclusive"


def test_the_deciding_tokenizer_is_the_real_one_where_it_exists():
    assert deciders(["en", "de"], {"en": ["minilm", "mpnet"]}, ["wordpiece", "bpe"]) == \
        {"en": "minilm", "de": "wordpiece-de"}


def _row(lang, tokenizer, kind, vocab, fertility, decides=False):
    return {"lang": lang, "tokenizer": tokenizer, "name": tokenizer, "kind": kind, "decides": decides,
            "vocab_size": vocab, "fertility": fertility, "continued_words": 0.2}


def _rows(stand_vocab=30522, stand_en=1.30, real_en=1.287):
    return [_row("en", "minilm", REAL, 30522, real_en, True),
            _row("en", "wordpiece (stand-in)", STAND_IN, stand_vocab, stand_en),
            _row("en", "xlmr", RIVAL, 250002, 1.369),
            _row("de", "wordpiece (stand-in)", STAND_IN, stand_vocab, 1.5, True),
            _row("de", "xlmr", RIVAL, 250002, 1.6)]


def test_validity_conditions_on_constructed_rows():
    met = validity({"rows": _rows()})
    assert [c.met for c in met] == [True, True]
    assert met[1].value == pytest.approx(abs(1.30 / 1.287 - 1))
    small = validity({"rows": _rows(stand_vocab=8000)})  # an 8k stand-in against 30k real tokenizers
    assert not small[0].met and small[0].value == pytest.approx(8000 / 30522)
    far = validity({"rows": _rows(stand_en=1.60)})  # the stand-in segments English 24% worse than the real one
    assert small[1].met and not far[1].met and far[1].value == pytest.approx(1.60 / 1.287 - 1)
    # stand-ins that nothing calibrates: the condition has no value, so it is unmet
    uncalibrated = [r for r in _rows() if r["kind"] != REAL]
    assert validity({"rows": uncalibrated})[1].value is None and not validity({"rows": uncalibrated})[1].met
    # only real tokenizers decide: nothing to calibrate, both hold
    only_real = [r for r in _rows() if r["lang"] == "en"]
    assert [c.met for c in validity({"rows": only_real})] == [True, True]


@pytest.mark.skipif(not NEWSTEST.is_dir(), reason=f"no news test sets at {NEWSTEST}")
def test_news_test_split_keeps_the_test_part_out_of_training():
    from ptmlab.data.parallel import newstest_pairs, newstest_side

    for lang in ("de", "fr"):
        train, test = newstest_pairs(lang, "train"), newstest_pairs(lang, "test")
        assert len(test) > 1900 and len(train) > 20000
        held = {s for pair in newstest_pairs("de", "test") + newstest_pairs("fr", "test") for s in pair}
        assert not any(a in held or b in held for a, b in train)
        assert newstest_side(f"newstest:{lang}:test:en") == [a for a, _ in test]
    # the 2008 set is multi-parallel: the same English sentences are tested in both languages
    assert [a for a, _ in newstest_pairs("de", "test")][:100] == [a for a, _ in newstest_pairs("fr", "test")][:100]


@pytest.mark.skipif(not NEWSTEST.is_dir(), reason=f"no news test sets at {NEWSTEST}")
def test_small_budget_runs_the_design(tmp_path):
    from ptmlab.studies.tokenizers import run

    assert run(["--budget", "small", "--types", "wordpiece,bpe", "--output", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    decides = {r["lang"]: r["tokenizer"] for r in result["rows"] if r["decides"]}
    assert decides == {"en": "minilm", "de": "wordpiece (stand-in)", "fr": "wordpiece (stand-in)"}
    assert {r["kind"] for r in result["rows"]} == {REAL, STAND_IN, RIVAL}
    # 400-piece stand-ins: cannot test, and the rule's own reading is kept beside it
    assert result["outcome"] == "cannot test"
    # the rule's own reading follows the majority of languages it counted (three: en, de, fr)
    m = re.match(r"(\d) of (\d) languages favour .*?, (\d) go against it .*?, (\d) undecided",
                 result["rule"]["reason"])
    favour, n, against, undecided = map(int, m.groups())
    assert n == 3 and favour + against + undecided == n
    expected = ("supported" if favour > n / 2 else "not supported" if favour + undecided <= n / 2
                else "inconclusive")
    assert result["rule"]["outcome"] == expected
