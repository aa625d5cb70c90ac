"""Models for pre-training: built from scratch by architecture, continued from an encoder, saved and reloaded
as classifiers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.pretrain.models import ARCHS, SIZES, build_scratch, load_continued, max_block_size, size
from ptmlab.pretrain.objectives import build_objective

SMALL = dict(layers=1, hidden=64, heads=2, ffn=128, max_positions=96)


@pytest.fixture(scope="module")
def tok():
    from ptmlab.models.zoo import load_tokenizer

    return load_tokenizer("minilm")


def test_sizes():
    assert size("tiny") == dict(layers=2, hidden=128, heads=2, ffn=512)
    assert all(s["hidden"] % s["heads"] == 0 for s in SIZES.values())
    with pytest.raises(PtmlabError, match="did you mean 'tiny'"):
        size("tine")


@pytest.mark.parametrize("arch,objective,cls", [
    ("bert", "mlm", "BertForMaskedLM"), ("bert", "sop", "BertForPreTraining"), ("roberta", "wwm", "RobertaForMaskedLM"),
    ("electra", "electra", "ElectraForPreTraining"), ("electra", "span", "ElectraForMaskedLM"),
    ("gpt2", "clm", "GPT2LMHeadModel"), ("t5", "t5", "T5ForConditionalGeneration"),
    ("bart", "bart", "BartForConditionalGeneration"), ("t5", "bart", "T5ForConditionalGeneration"),
    ("xlnet", "plm", "XLNetLMHeadModel")])
def test_build_scratch(tok, arch, objective, cls):
    obj = build_objective(objective, tok)
    m = build_scratch(arch, tokenizer=tok, objective=obj, **SMALL)
    assert type(m).__name__ == cls
    assert m.config.vocab_size == obj.vocab_size() >= len(tok)
    assert m.config.pad_token_id == tok.pad_token_id
    assert m.get_input_embeddings().weight.shape == (obj.vocab_size(), 64)
    assert m.config._attn_implementation == ("eager" if arch == "xlnet" else "sdpa")
    if arch == "t5":
        assert m.config.decoder_start_token_id == tok.pad_token_id and m.config.eos_token_id == tok.sep_token_id
    if arch in ("bert", "roberta", "electra", "gpt2", "bart"):  # positions cover the block (RoBERTa: + pad + 1)
        n_pos = m.config.n_positions if arch == "gpt2" else m.config.max_position_embeddings
        assert n_pos == 96 + (tok.pad_token_id + 1 if arch == "roberta" else 0)
    assert max_block_size(m.config) == (None if arch in ("t5", "xlnet") else 96)


def test_wrong_pairs_and_sizes(tok):
    cases = [("bert", "t5", "objective t5 needs an encoder-decoder, and bert is an encoder: use --arch t5 or bart"),
             ("bert", "clm", "objective clm needs a decoder, and bert is an encoder: use --arch gpt2"),
             ("gpt2", "mlm", "objective mlm needs an encoder, and gpt2 is a decoder: use --arch bert, roberta or "
                             "electra"),
             ("bert", "electra", "objective electra has no bert model in transformers: use --arch electra"),
             ("roberta", "nsp", "objective nsp has no roberta model in transformers: use --arch bert")]
    for arch, objective, message in cases:
        with pytest.raises(PtmlabError) as e:
            build_scratch(arch, tokenizer=tok, objective=objective, **SMALL)
        assert str(e.value) == message
    with pytest.raises(PtmlabError, match="--hidden 64 is not a multiple of --heads 3"):
        build_scratch("bert", tokenizer=tok, objective="mlm", **{**SMALL, "heads": 3})
    with pytest.raises(PtmlabError, match="unknown architecture 'mpnet'"):
        build_scratch("mpnet", tokenizer=tok, objective="mlm", **SMALL)
    with pytest.raises(PtmlabError, match="--layers must be a positive integer"):
        build_scratch("bert", tokenizer=tok, objective="mlm", **{**SMALL, "layers": 0})
    obj = build_objective("mlm", tok)
    small_vocab = build_scratch("bert", tokenizer=tok, objective=obj, **SMALL).config
    small_vocab.vocab_size = 1000
    with pytest.raises(PtmlabError, match="vocabulary has 1000 entries"):
        obj.check(tok, small_vocab)
    assert set(ARCHS) >= {"bert", "roberta", "electra", "gpt2", "t5", "bart", "xlnet"}


@pytest.mark.parametrize("arch,objective", [("bert", "mlm"), ("electra", "electra"), ("gpt2", "clm"), ("t5", "t5")])
def test_saved_model_loads_as_classifier(tok, tmp_path, arch, objective):
    from transformers import AutoModelForSequenceClassification

    from ptmlab.models.loader import read_safetensors_dir, save_model

    obj = build_objective(objective, tok)
    torch.manual_seed(0)
    pm = obj.wrap(build_scratch(arch, tokenizer=tok, objective=obj, **SMALL))
    kept = obj.kept_model(pm)
    save_model(kept, tok, tmp_path)
    saved = read_safetensors_dir(tmp_path)
    assert not any(k.startswith("generator") for k in saved)  # ELECTRA keeps the discriminator only
    clf = AutoModelForSequenceClassification.from_pretrained(tmp_path, num_labels=3)
    body = clf.base_model.state_dict()
    kept_body = kept.base_model.state_dict()
    shared = [k for k in kept_body if k in body and not k.endswith("position_ids")]
    assert len(shared) >= 0.9 * len(kept_body)  # the pre-trained body is what the classifier loads
    assert all(torch.equal(body[k], kept_body[k]) for k in shared)
    enc = tok(["a short one", "and a second, longer sentence"], padding=True, return_tensors="pt")
    inputs = {k: v for k, v in enc.items() if k != "token_type_ids" or arch == "bert"}
    logits = clf(**inputs).logits
    assert logits.shape == (2, 3) and torch.isfinite(logits).all()


def test_continued_minilm_gets_tied_mlm_head(tok):
    from transformers import AutoModel

    from ptmlab.models.zoo import resolve

    m = load_continued("minilm", "mlm")
    assert type(m).__name__ == "BertForMaskedLM"
    dec = m.cls.predictions.decoder
    assert dec.weight is m.bert.embeddings.word_embeddings.weight  # tied, not a copy
    assert torch.count_nonzero(m.cls.predictions.bias) == 0
    enc = AutoModel.from_pretrained(resolve("minilm")[0])
    assert torch.equal(enc.encoder.layer[3].output.dense.weight, m.bert.encoder.layer[3].output.dense.weight)
    sop = load_continued("minilm", "sop")
    assert type(sop).__name__ == "BertForPreTraining"
    assert sop.cls.predictions.decoder.weight is sop.bert.embeddings.word_embeddings.weight
    with pytest.raises(PtmlabError, match="objective t5 needs an encoder-decoder, and bert is an encoder"):
        load_continued("minilm", "t5")
    with pytest.raises(PtmlabError, match="unknown model"):
        load_continued("no-such-model", "mlm", tokenizer=tok)


def test_continued_from_a_saved_pretraining_run_keeps_its_head(tok, tmp_path):
    from ptmlab.models.loader import save_model

    m = load_continued("tiny", "mlm")
    assert m.config.hidden_size == 64 and type(m).__name__ == "BertForMaskedLM"
    with torch.no_grad():
        m.cls.predictions.bias.add_(0.5)
        m.cls.predictions.transform.dense.weight.mul_(2)
    save_model(m, tok, tmp_path)
    again = load_continued(str(tmp_path), "mlm")
    assert torch.equal(again.cls.predictions.bias, m.cls.predictions.bias)
    assert torch.equal(again.cls.predictions.transform.dense.weight, m.cls.predictions.transform.dense.weight)
    assert again.cls.predictions.decoder.weight is again.bert.embeddings.word_embeddings.weight
    obj = build_objective("mlm", tok)
    batch = obj.make_batch([np.arange(2000, 2060)], [np.random.default_rng(0)])
    assert torch.isfinite(obj.loss(obj.wrap(again), batch)).all()
