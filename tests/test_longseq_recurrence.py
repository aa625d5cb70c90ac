"""Segment recurrence (--long-strategy recurrence): a one-segment document equals truncation, information reaches the
last segment only through the memory, padded memory is masked, no gradient flows into the memory, unsupported
families are one-line errors, and finetune/evaluate run it end to end."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    DistilBertConfig,
    DistilBertForSequenceClassification,
    ElectraConfig,
    ElectraForSequenceClassification,
    MPNetConfig,
    MPNetForSequenceClassification,
    RobertaConfig,
    RobertaForSequenceClassification,
)

from ptmlab.core.errors import PtmlabError
from ptmlab.longseq.recurrence import memory_attention, recurrent_logits, segments_of
from ptmlab.longseq.strategies import LongSettings, check_strategy, long_logits, long_loss

SEG = 16  # segment length: 14 body tokens + [CLS]/[SEP]
SMALL = dict(vocab_size=200, num_labels=3, initializer_range=0.3)  # a wide init so logits differ visibly
BERT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **SMALL)


def _bert():
    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(**BERT)).eval()


def _family(name: str):
    torch.manual_seed(0)
    if name == "bert":
        return _bert()
    if name == "roberta":
        return RobertaForSequenceClassification(RobertaConfig(**{**BERT, "max_position_embeddings": 66})).eval()
    if name == "electra":
        return ElectraForSequenceClassification(ElectraConfig(embedding_size=16, **BERT)).eval()
    return DistilBertForSequenceClassification(DistilBertConfig(
        dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64, dropout=0.0,
        attention_dropout=0.0, **SMALL)).eval()


def _doc(n_body: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return [101, *torch.randint(5, 100, (n_body,), generator=g).tolist(), 102]


def test_segments_do_not_overlap_and_keep_special_tokens():
    doc = _doc(40, 0)
    segs = segments_of(doc, SEG)
    assert [len(s) for s in segs] == [16, 16, 14]  # 40 body tokens: 14 + 14 + 12
    assert all(s[0] == 101 and s[-1] == 102 for s in segs)
    assert sum((s[1:-1] for s in segs), []) == doc[1:-1]
    assert segments_of(doc[:10], SEG) == [doc[:10]]


def test_one_segment_documents_equal_truncation():
    model = _bert()
    docs = [_doc(n, n) for n in (3, 9, 14)]  # different lengths, so the batch is padded
    settings = LongSettings(length=SEG, stride=SEG - 2)
    trunc = long_logits(model, docs, "truncate", settings)
    recur = long_logits(model, docs, "recurrence", settings)
    assert trunc.abs().max() > 0.05
    assert torch.allclose(trunc, recur, atol=1e-6)
    assert model.config._attn_implementation == "sdpa"  # switched back after the pass


@pytest.mark.parametrize("family", ["bert", "roberta", "electra", "distilbert"])
def test_information_reaches_the_last_segment_only_through_the_memory(family):
    model = _family(family)
    doc = _doc(40, 1)  # three segments
    changed = list(doc)
    changed[3] = 7 if doc[3] != 7 else 8  # a token of the first segment
    with torch.no_grad():
        base, other = recurrent_logits(model, [doc, changed], SEG)
        alone = recurrent_logits(model, [doc], SEG)[0]
        no_mem, no_mem_changed = recurrent_logits(model, [doc, changed], SEG, memory=0)
        last_alone = model(input_ids=torch.tensor([segments_of(doc, SEG)[-1]])).logits[0]
    assert (base - other).abs().max() > 1e-3  # segment 1 -> memory -> segment 2 -> memory -> segment 3
    assert torch.allclose(base, alone, atol=1e-5)  # batching documents does not mix their memories
    # without memory the first segment cannot matter (up to the kernels' rounding: rows of one batch may take
    # different blocking paths on CPUs with AMX)
    assert torch.allclose(no_mem, no_mem_changed, atol=1e-6)
    assert torch.allclose(no_mem, last_alone, atol=1e-5)
    assert (base - no_mem).abs().max() > 1e-3


def test_padded_memory_is_masked():
    model = _bert()
    seg = torch.tensor([_doc(10, 5)])
    mask = torch.ones_like(seg)
    hidden = model.config.hidden_size
    torch.manual_seed(1)
    real = [torch.randn(1, 9, hidden) for _ in range(2)]
    junk = [torch.randn(1, 6, hidden) * 50 for _ in range(2)]
    from ptmlab.longseq.recurrence import LayerMemory

    short = [LayerMemory(h, torch.ones(1, 9, dtype=torch.bool)) for h in real]
    padded = [LayerMemory(torch.cat([h, j], 1), torch.cat([torch.ones(1, 9), torch.zeros(1, 6)], 1).bool())
              for h, j in zip(real, junk, strict=True)]
    unmasked = [LayerMemory(m.hidden, torch.ones(1, 15, dtype=torch.bool)) for m in padded]
    with torch.no_grad(), memory_attention(model, SEG) as rec:
        a, _ = rec.step(seg, mask, short)
        b, _ = rec.step(seg, mask, padded)
        c, _ = rec.step(seg, mask, unmasked)
        d, _ = rec.step(seg, mask, None)
    assert torch.allclose(a, b, atol=1e-6)
    assert (a - c).abs().max() > 1e-3 and (a - d).abs().max() > 1e-3  # the memory (and the junk) do matter

    # the same through whole documents: a batch where one document's previous segment is padded
    long_doc, short_doc = _doc(40, 2), _doc(30, 3)
    with torch.no_grad(), memory_attention(model, SEG) as rec:
        segs = [segments_of(d, SEG) for d in (long_doc, short_doc)]
        ids1 = torch.tensor([segs[0][0], segs[1][0][:10] + [0] * 6])
        m1 = torch.tensor([[1] * 16, [1] * 10 + [0] * 6])
        _, mem = rec.step(ids1, m1)
        batched, _ = rec.step(torch.tensor([segs[0][1], segs[1][1]]), torch.ones(2, 16, dtype=torch.long), mem)
        _, mem_alone = rec.step(torch.tensor([segs[1][0][:10]]), torch.ones(1, 10, dtype=torch.long))
        alone, _ = rec.step(torch.tensor([segs[1][1]]), torch.ones(1, 16, dtype=torch.long), mem_alone)
    assert torch.allclose(batched[1], alone[0], atol=1e-5)


def test_gradients_reach_the_parameters_not_the_memory():
    model = _bert().train()
    first = [101, *range(110, 124), 102]  # tokens 110..123 appear only in the first segment
    doc = first[:-1] + list(range(130, 144)) + [102]
    with memory_attention(model, SEG) as rec:
        segs = segments_of(doc, SEG)
        first_logits, mem = rec.step(torch.tensor([segs[0]]), torch.ones(1, SEG, dtype=torch.long))  # with a graph
        logits, new_mem = rec.step(torch.tensor([segs[1]]), torch.ones(1, SEG, dtype=torch.long), mem)
    assert first_logits.requires_grad and all(not m.hidden.requires_grad for m in mem + new_mem)
    logits.sum().backward()
    emb = model.bert.embeddings.word_embeddings.weight.grad
    assert emb[130:144].abs().sum() > 0  # the last segment's tokens get gradient
    assert emb[110:124].abs().sum() == 0  # the memory's tokens do not (stop-gradient)
    layer0 = model.bert.encoder.layer[0].attention.self
    assert layer0.key.weight.grad.abs().sum() > 0 and layer0.value.weight.grad.abs().sum() > 0

    # the training loss: one value per document, gradients finite, first-segment-only tokens untouched
    model.zero_grad()
    loss_fn = long_loss("recurrence", LongSettings(length=SEG, stride=SEG - 2))
    batch = {"input_ids": torch.tensor([doc, doc[:20] + [0] * (len(doc) - 20)]),
             "attention_mask": torch.tensor([[1] * len(doc), [1] * 20 + [0] * (len(doc) - 20)]),
             "labels": torch.tensor([0, 2])}
    loss = loss_fn(model, batch)
    assert loss.shape == (2,) and torch.isfinite(loss).all()
    loss.sum().backward()
    emb = model.bert.embeddings.word_embeddings.weight.grad
    assert emb[130:144].abs().sum() > 0 and emb[110:124].abs().sum() == 0


def test_segment_pooling_options():
    model = _bert()
    docs = [_doc(40, 1), _doc(5, 2)]
    with torch.no_grad():
        last = recurrent_logits(model, docs, SEG, pool="last")
        mean = recurrent_logits(model, docs, SEG, pool="mean")
        top = recurrent_logits(model, docs, SEG, pool="max")
    assert torch.allclose(last[1], mean[1]) and torch.allclose(last[1], top[1])  # one segment: all agree
    assert (top[0] >= mean[0] - 1e-6).all() and (last[0] - mean[0]).abs().max() > 1e-4
    settings = LongSettings(length=SEG, stride=SEG - 2, segment_pool="mean")
    assert torch.allclose(long_logits(model, docs, "recurrence", settings), mean, atol=1e-6)
    with pytest.raises(PtmlabError, match="segment pooling 'median'"):
        LongSettings(segment_pool="median").validate()
    with pytest.raises(PtmlabError, match="memory of -1 tokens"):
        LongSettings(memory=-1).validate()


def test_unsupported_families_are_one_line_errors():
    torch.manual_seed(0)
    mpnet = MPNetForSequenceClassification(MPNetConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                                       intermediate_size=64, vocab_size=200)).eval()
    settings = LongSettings(length=SEG, stride=SEG - 2)
    with pytest.raises(PtmlabError, match="does not support MPNet"):
        check_strategy(mpnet, "recurrence", settings)
    with pytest.raises(PtmlabError, match="beyond what this model supports"):
        check_strategy(_bert(), "recurrence", LongSettings(length=100, stride=98))


def test_finetune_and_evaluate_with_recurrence(tmp_path, capsys):
    from ptmlab.cli import main
    from ptmlab.longseq.synthetic import write_long_task

    task = write_long_task(tmp_path / "data", n_train=12, n_dev=8, words=60)
    flags = ["--task", "syn", "--train-file", task["train"], "--dev-file", task["dev"], "--max-length", "128",
             "--long-strategy", "recurrence", "--long-chunk", "32"]
    run = tmp_path / "run"
    assert main(["finetune", "--model", "tiny", *flags, "--batch-size", "4", "--max-steps", "2",
                 "--output", str(run)]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert "long_strategy: recurrence" in (run / "config.yaml").read_text()
    capsys.readouterr()
    assert main(["evaluate", str(run), *flags]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["long_strategy"] == "recurrence"
    assert out["metrics"]["accuracy"] == pytest.approx(summary["metrics"]["accuracy"])


def test_recurrence_options_reach_the_strategy():
    from ptmlab.core.config import build_config
    from ptmlab.longseq.runs import long_settings, tokens_per_example
    from ptmlab.train.args import FinetuneConfig

    # --long-stride is unused by recurrence, so its default does not have to fit a short --long-chunk
    cfg = build_config(FinetuneConfig, {"model": "tiny", "long_strategy": "recurrence", "long_chunk": 64,
                                        "long_memory": 0, "long_segment_pool": "max", "max_length": 1024})
    s = long_settings(cfg)
    assert (s.length, s.stride, s.memory, s.segment_pool) == (64, 62, 0, "max")
    assert tokens_per_example(cfg) == 17 * 64  # 1,022 body tokens in segments of 62
    with pytest.raises(PtmlabError, match="--long-memory -5"):
        build_config(FinetuneConfig, {"model": "tiny", "long_strategy": "recurrence", "long_memory": -5})
    with pytest.raises(PtmlabError, match="--long-stride 600"):  # still checked for chunk
        build_config(FinetuneConfig, {"model": "tiny", "long_strategy": "chunk", "long_stride": 600})


def test_reach_is_layers_times_memory_segments():
    """h at layer l of segment t depends on segments t-l..t when the memory is one segment (Transformer-XL's
    O(layers x memory) context): a 2-layer model's last segment of four cannot see the first, with two segments of
    memory it can."""
    model = _bert()
    doc = _doc(50, 4)  # segments of 14, 14, 14, 8 body tokens
    assert len(segments_of(doc, SEG)) == 4
    changed = list(doc)
    changed[3] = 7 if doc[3] != 7 else 8
    with torch.no_grad():
        one = [recurrent_logits(model, [d], SEG)[0] for d in (doc, changed)]
        two = [recurrent_logits(model, [d], SEG, memory=2 * SEG)[0] for d in (doc, changed)]
        second = list(doc)
        second[20] = 7 if doc[20] != 7 else 8  # a token of the second segment: within reach
        seen = recurrent_logits(model, [second], SEG)[0]
    assert torch.allclose(one[0], one[1], atol=1e-6)
    assert (two[0] - two[1]).abs().max() > 1e-3
    assert (seen - one[0]).abs().max() > 1e-3
