"""Long strategies: chunking covers the document, pooling is mean/max, the loss trains, window needs a long model."""

from __future__ import annotations

import pytest
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.longseq.convert import longify
from ptmlab.longseq.strategies import LongSettings, chunk_ids, long_logits, long_loss, pool_logits, truncate_ids
from ptmlab.models.zoo import load_model


def test_chunks_cover_the_body_with_overlap():
    ids = [101, *range(1000, 1030), 102]
    chunks = chunk_ids(ids, length=12, stride=7)
    assert all(c[0] == 101 and c[-1] == 102 and len(c) == 12 for c in chunks)
    seen = {t for c in chunks for t in c[1:-1]}
    assert seen == set(range(1000, 1030))
    assert chunks[1][1] == 1007 and chunks[-1][-2] == 1029
    assert chunk_ids(ids[:8], 12, 7) == [ids[:8]]
    assert truncate_ids(ids, 5) == [101, 1000, 1001, 1002, 102]


def test_pooling():
    logits = torch.tensor([[1.0, 0.0], [3.0, -2.0], [5.0, 5.0]])
    owner = torch.tensor([0, 0, 1])
    assert torch.equal(pool_logits(logits, owner, 2, "mean"), torch.tensor([[2.0, -1.0], [5.0, 5.0]]))
    assert torch.equal(pool_logits(logits, owner, 2, "max"), torch.tensor([[3.0, 0.0], [5.0, 5.0]]))


def test_chunk_logits_equal_manual_per_window_mean():
    torch.manual_seed(0)
    model = load_model("tiny", num_labels=3).eval()
    docs = [[101, *torch.randint(1000, 3000, (700,)).tolist(), 102], [101, 1500, 1600, 102]]
    s = LongSettings(length=256, stride=200, pool="mean", batch_size=3)
    got = long_logits(model, docs, "chunk", s)
    with torch.no_grad():
        manual = torch.stack([model(input_ids=torch.tensor([c])).logits[0] for c in chunk_ids(docs[0], 256, 200)])
        short = model(input_ids=torch.tensor([docs[1]])).logits[0]
    assert torch.allclose(got[0], manual.mean(0), atol=1e-5) and torch.allclose(got[1], short, atol=1e-5)


def test_loss_trains_and_window_needs_long_model():
    torch.manual_seed(0)
    model = load_model("tiny", num_labels=2)
    ids = torch.randint(1000, 3000, (4, 600))
    ids[:, 0], ids[:, -1] = 101, 102
    mask = torch.ones_like(ids)
    mask[2, 400:] = 0
    batch = {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([0, 1, 0, 1])}
    with pytest.raises(PtmlabError, match="longify"):
        long_loss("window")(model, batch)
    loss = long_loss("chunk", LongSettings(length=128, stride=100, pool="max"))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.eval()  # no dropout: the drop in loss comes from the updates alone
    first = None
    for _ in range(8):
        per = loss(model, batch)
        assert per.shape == (4,)
        first = float(per.detach().mean()) if first is None else first
        opt.zero_grad()
        per.mean().backward()
        opt.step()
    assert float(loss(model, batch).detach().mean()) < 0.9 * first
    longify(model, 1024, 64)
    per = long_loss("window")(model, batch)
    assert per.shape == (4,) and torch.isfinite(per).all()


def test_bad_settings():
    with pytest.raises(PtmlabError, match="stride"):
        LongSettings(length=512, stride=600).validate()
    with pytest.raises(PtmlabError, match="pooling"):
        long_loss("chunk", LongSettings(pool="median"))
    with pytest.raises(PtmlabError, match="long strategy"):
        long_loss("slide")
