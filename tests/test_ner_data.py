"""Token classification data: CoNLL and table readers, tag schemes, sub-token alignment, entity metrics."""

from __future__ import annotations

import gzip
import json
import warnings

import numpy as np
import pytest

from ptmlab.core.errors import PtmlabError
from ptmlab.data.metrics import entity_scores
from ptmlab.data.tokens import (
    IGNORE,
    align_labels,
    encode_tokens,
    normalise_tags,
    read_conll,
    read_token_source,
    tag_set,
    to_iob2,
    to_split,
    word_predictions,
)

CONLL = """-DOCSTART- -X- O O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
German\tJJ\tI-NP\tI-MISC
call NN I-NP O

Peter NNP I-NP I-PER
Blackburn NNP I-NP I-PER
"""


def test_conll_reader_columns_docstart_tabs_and_gzip(tmp_path):
    path = tmp_path / "eng.train"
    path.write_text(CONLL)
    gz = tmp_path / "eng.train.gz"
    gz.write_bytes(gzip.compress(CONLL.encode()))
    for p in (path, gz):
        sents = read_conll(p)
        assert [s.tokens for s in sents] == [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]]
        assert sents[0].tags == ["I-ORG", "O", "I-MISC", "O"]
    pos = read_conll(path, token_col=0, tag_col=1)  # another column as the tag
    assert pos[1].tags == ["NNP", "NNP"]
    assert read_conll(path, tag_col=None)[0].tags is None
    assert sents[1].where.endswith(":8")  # the line of the sentence's first token


def test_tag_schemes_convert_to_iob2():
    assert to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"], "iob1", "x") == \
        ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG"]
    assert to_iob2(["S-PER", "B-ORG", "I-ORG", "E-ORG", "O", "B-LOC", "E-LOC"], "bioes", "x") == \
        ["B-PER", "B-ORG", "I-ORG", "I-ORG", "O", "B-LOC", "I-LOC"]
    iob2 = ["B-PER", "I-PER", "B-PER", "O", "B-LOC"]
    assert to_iob2(iob2, "iob1", "x") == iob2  # the IOB1 rule leaves valid IOB2 as it is (auto relies on it)
    assert to_iob2(["I-PER", "I-PER"], "iob2", "x") == ["I-PER", "I-PER"]  # declared IOB2 is taken as written


def test_auto_scheme_and_tag_set(tmp_path):
    path = tmp_path / "bioes.conll"
    path.write_text("a S-X\nb O\n\nc B-Y\nd E-Y\n")
    sents = normalise_tags(read_conll(path))
    assert [s.tags for s in sents] == [["B-X", "O"], ["B-Y", "I-Y"]]
    assert tag_set(sents) == ("O", "B-X", "I-X", "B-Y", "I-Y")
    split = to_split(sents, tag_set(sents), "train")
    assert split.tags == [[1, 0], [3, 4]]


@pytest.mark.parametrize("text, needle", [
    ("a PERSON\n", "unknown tag 'PERSON'"),
    ("a B-X\nb\n", "1 column"),
])
def test_bad_conll_lines_name_the_line(tmp_path, text, needle):
    path = tmp_path / "bad.conll"
    path.write_text(text)
    with pytest.raises(PtmlabError, match=needle) as e:
        normalise_tags(read_conll(path))
    assert str(path) in str(e.value)


def test_scheme_mismatch_and_unseen_tag_are_errors(tmp_path):
    with pytest.raises(PtmlabError, match="not valid IOB1"):
        to_iob2(["S-PER"], "iob1", "f:1")
    dev = normalise_tags(read_conll(_write(tmp_path / "dev.conll", "a B-DATE\n")))
    with pytest.raises(PtmlabError, match="'B-DATE' is not in the train tag set"):
        to_split(dev, ("O", "B-PER", "I-PER"), "train")


def _write(path, text):
    path.write_text(text)
    return path


def test_table_readers_jsonl_csv_parquet_and_datasets(tmp_path):
    rows = [{"tokens": ["Paris", "is", "big"], "tags": ["B-LOC", "O", "O"]},
            {"tokens": ["Ann", "Lee"], "tags": ["B-PER", "I-PER"]}]
    jl = tmp_path / "d.jsonl"
    jl.write_text("\n".join(json.dumps(r) for r in rows))
    csvp = tmp_path / "d.csv"
    csvp.write_text('tokens,tags\n"[""Paris"", ""is"", ""big""]",B-LOC O O\nAnn Lee,B-PER I-PER\n')
    import datasets
    import pandas as pd

    pq = tmp_path / "d.parquet"
    pd.DataFrame(rows).to_parquet(pq)
    want = [["B-LOC", "O", "O"], ["B-PER", "I-PER"]]
    for src in (jl, csvp, pq, pd.DataFrame(rows)):
        sents = read_token_source(src, None, None)
        assert [s.tokens for s in sents] == [r["tokens"] for r in rows], src
        assert [s.tags for s in sents] == want, src
    # the hub layout: integer tags in a Sequence(ClassLabel) column named ner_tags
    names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    feats = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                               "ner_tags": datasets.Sequence(datasets.ClassLabel(names=names))})
    ds = datasets.Dataset.from_dict({"tokens": [r["tokens"] for r in rows], "ner_tags": [[3, 0, 0], [1, 2]]},
                                    features=feats)
    assert [s.tags for s in read_token_source(ds, None, None)] == want


def test_mismatched_token_and_tag_lengths(tmp_path):
    jl = _write(tmp_path / "d.jsonl", json.dumps({"tokens": ["a", "b"], "tags": ["O"]}) + "\n")
    with pytest.raises(PtmlabError, match=r"d.jsonl:1: 2 tokens but 1 tags"):
        normalise_tags(read_token_source(jl, None, None))


def test_alignment_first_subtoken_and_all_subtokens():
    word_ids = [None, 0, 1, 1, 1, 2, None]
    assert align_labels(word_ids, [5, 3, 0]) == [IGNORE, 5, 3, IGNORE, IGNORE, 0, IGNORE]
    assert align_labels(word_ids, [5, 3, 0], label_all_subtokens=True) == [IGNORE, 5, 3, 3, 3, 0, IGNORE]


def test_encode_tokens_with_a_real_tokenizer_and_truncation():
    from ptmlab.data.tokens import TokenSplit
    from ptmlab.models.zoo import load_tokenizer

    tok = load_tokenizer("tiny")
    split = TokenSplit([["Schwarzkopf", "rejects", "it"], ["x"] * 40], [[1, 0, 0], [0] * 40], [0, 1])
    feats = encode_tokens(tok, split, max_length=16)
    first = feats.word_ids[0]
    assert first[0] is None and first[-1] is None
    n_sub = sum(1 for w in first if w == 0)
    assert n_sub > 1  # "Schwarzkopf" is split, so only its first piece carries the label
    assert feats.labels[0][1] == 1 and feats.labels[0][2:1 + n_sub] == [IGNORE] * (n_sub - 1)
    assert len(feats.input_ids[1]) == 16  # truncated
    batch = feats.make_batch([0, 1])
    assert batch["labels"].shape == batch["input_ids"].shape
    assert (batch["labels"][0, len(feats.input_ids[0]):] == IGNORE).all()
    # reading predictions back: one tag per word; the 26 words cut off by truncation are O (label 0)
    logits = np.zeros((16, 3))
    logits[:, 2] = 1.0
    words = word_predictions(logits, feats.word_ids[1], 40)
    assert len(words) == 40 and words[:14] == [2] * 14 and words[14:] == [0] * 26


# ---------------------------------------------------------------------------- entity metrics (seqeval's rules)
def test_entity_scores_hand_built_cases():
    # an exact span and type is right; a partial span or a wrong type is both a false positive and a miss
    refs = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "I-ORG", "O"], ["B-MISC", "O"]]
    preds = [["B-PER", "I-PER", "O", "O"], ["B-ORG", "O", "O"], ["B-LOC", "O"]]
    s = entity_scores(refs, preds)
    # gold 4 entities, predicted 3, 1 right: P 1/3, R 1/4
    assert s["entity_precision"] == pytest.approx(1 / 3)
    assert s["entity_recall"] == pytest.approx(1 / 4)
    assert s["entity_f1"] == pytest.approx(2 * (1 / 3) * (1 / 4) / (1 / 3 + 1 / 4))
    assert s["per_type"]["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1}
    assert s["per_type"]["LOC"]["support"] == 1 and s["per_type"]["LOC"]["f1"] == 0.0
    assert s["token_accuracy"] == pytest.approx(6 / 9)
    # conlleval's reading of a dangling I-: it starts an entity, so I-PER I-PER matches B-PER I-PER
    assert entity_scores([["B-PER", "I-PER"]], [["I-PER", "I-PER"]])["entity_f1"] == 1.0
    # two adjacent entities of one type are two entities
    two = entity_scores([["B-PER", "B-PER"]], [["B-PER", "I-PER"]])
    assert two["entity_precision"] == 0.0 and two["entity_recall"] == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and quietly: no numpy warning from averaging over no entity types
        nothing = entity_scores([["O", "O"]], [["O", "O"]])
    assert nothing["entity_f1"] == 0.0 and nothing["per_type"] == {}  # nothing to find: 0 as seqeval
    assert nothing["token_accuracy"] == 1.0
