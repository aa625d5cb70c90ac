"""Each objective corrupts exactly what its paper says, at the paper's rates, and trains its model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.pretrain.objectives import OBJECTIVES, build_objective
from ptmlab.pretrain.objectives.masking import with_specials, word_ids
from ptmlab.pretrain.objectives.span import mean_span_length, span_length_probs
from ptmlab.pretrain.objectives.t5 import random_spans_noise_mask

WORDS = ("the of and to in a is was for on as by with he it at from his an were are which this be or has had "
         "unbelievable tokenization pretraining transformers photosynthesis misunderstanding").split()
N = 126  # content tokens of a 128-token MLM block


@pytest.fixture(scope="module")
def tok():
    from ptmlab.models.zoo import load_tokenizer

    return load_tokenizer("minilm")


@pytest.fixture(scope="module")
def stream(tok) -> np.ndarray:
    """A token stream of generated sentences (words of one and of several WordPiece pieces, full stops)."""
    rng = np.random.default_rng(0)
    sents = [" ".join(rng.choice(WORDS, size=int(rng.integers(4, 15)))) + "." for _ in range(5000)]
    return np.asarray(tok(" ".join(sents), add_special_tokens=False, verbose=False)["input_ids"], dtype=np.int64)


def _blocks(stream: np.ndarray, n: int, count: int, sep: int | None = None) -> list[np.ndarray]:
    out = [stream[i * n:(i + 1) * n].copy() for i in range(count)]
    if sep is not None:
        for b in out[::3]:
            b[n // 2] = sep  # a document boundary inside some blocks
    return out


def _rngs(count: int, seed: int = 0) -> list[np.random.Generator]:
    return [np.random.default_rng([seed, i]) for i in range(count)]


# --------------------------------------------------------------------------------------------- mlm
def test_mlm_rates_and_labels(tok, stream):
    obj = build_objective("mlm", tok)
    blocks = _blocks(stream, N, 300, sep=tok.sep_token_id)
    b = obj.make_batch(blocks, _rngs(300))
    x, y = b["input_ids"].numpy(), b["labels"].numpy()
    orig = np.stack([with_specials(bl, obj.tok)[0] for bl in blocks])
    cand = np.stack([with_specials(bl, obj.tok)[1] for bl in blocks])
    picked = y != -100
    assert np.array_equal(y[picked], orig[picked])  # labels are the originals, -100 elsewhere
    assert not (picked & ~cand).any()  # never [CLS], [SEP] or the document separator
    assert (picked.sum(1) == np.round(0.15 * cand.sum(1))).all()  # BERT's per-sequence count
    assert np.array_equal(x[~picked], orig[~picked])  # only picked positions change
    masked = x[picked] == tok.mask_token_id
    same = x[picked] == orig[picked]
    rand = ~masked & ~same
    n = picked.sum()
    assert abs(masked.mean() - 0.8) < 0.02 and abs(same.mean() - 0.1) < 0.015 and abs(rand.mean() - 0.1) < 0.015
    assert n > 5000
    assert not np.isin(x[picked][rand], list(tok.all_special_ids)).any()  # random tokens are ordinary tokens
    assert (orig[picked][masked] != tok.mask_token_id).all()  # no label leakage: the label is never [MASK]


def test_wwm_masks_whole_words(tok, stream):
    obj = build_objective("wwm", tok)
    blocks = _blocks(stream, N, 300)
    b = obj.make_batch(blocks, _rngs(300))
    y = b["labels"].numpy()
    multi = 0
    for bl, lab in zip(blocks, y, strict=True):
        ids, cand = with_specials(bl, obj.tok)
        w = word_ids(ids, obj.tok)
        picked = lab != -100
        for word in np.unique(w[picked]):
            assert picked[w == word].all()  # every piece of a picked word is picked
            multi += (w == word).sum() > 1
        k = round(0.15 * cand.sum())
        assert k - 4 <= picked.sum() <= k
    assert multi > 100  # words of several pieces were picked, whole
    assert abs((y != -100).mean() - 0.15 * N / (N + 2)) < 0.01


# --------------------------------------------------------------------------------------------- span
def test_span_length_distribution():
    p = span_length_probs(0.2, 10)
    assert abs(mean_span_length(0.2, 10) - 3.8) < 0.01  # SpanBERT's reported mean
    assert p[0] == pytest.approx(0.2 / (1 - 0.8 ** 10))
    from ptmlab.models.zoo import load_tokenizer

    obj = build_objective("span", load_tokenizer("minilm"))
    lengths = obj.sample_lengths(np.random.default_rng(0), 50_000)
    assert lengths.min() == 1 and lengths.max() == 10
    assert abs(lengths.mean() - mean_span_length(0.2, 10)) < 0.05
    assert np.abs(np.bincount(lengths, minlength=11)[1:] / len(lengths) - p).max() < 0.01


def test_span_masking_whole_word_spans(tok, stream):
    obj = build_objective("span", tok)
    blocks = _blocks(stream, N, 200)
    rngs = _rngs(200)
    spans_seen, span_words, cut_spans = 0, [], 0
    for bl, rng in zip(blocks, rngs, strict=True):
        ids, cand = with_specials(bl, obj.tok)
        w = word_ids(ids, obj.tok)
        copy = np.random.default_rng()
        copy.bit_generator.state = rng.bit_generator.state  # the same draws corrupt_spans will make
        spans = obj.spans(copy, ids, cand)
        inputs, labels, left, right, rel = obj.corrupt_spans(bl, rng)
        picked = labels != -100
        assert picked.sum() == round(0.15 * cand.sum())  # the 15% budget, exactly
        covered = np.zeros(len(ids), bool)
        for s, e in spans:
            assert not covered[s:e + 1].any()
            covered[s:e + 1] = True
            assert w[s] != w[s - 1]  # starts at a word start
            kinds = {("mask" if inputs[i] == tok.mask_token_id else "same" if inputs[i] == ids[i] else "rand")
                     for i in range(s, e + 1)}
            assert kinds <= {"mask"} or "mask" not in kinds  # 80/10/10 decided per span
            assert (left[s:e + 1] == s - 1).all() and (right[s:e + 1] == e + 1).all()
            assert rel[s:e + 1].tolist() == list(range(e - s + 1))
            cut_spans += e + 1 < len(ids) and w[e] == w[e + 1]
            span_words.append(len(np.unique(w[s:e + 1])))
            spans_seen += 1
        assert np.array_equal(covered, picked)
        assert cut_spans <= 1  # only the span cut at the budget may end inside a word
        cut_spans = 0
    assert spans_seen > 500
    assert 2.5 < np.mean(span_words) < 4.2  # geometric word counts, shortened by the budget and by gaps


# --------------------------------------------------------------------------------------------- t5
def test_t5_sentinel_layout_and_rates(tok, stream):
    obj = build_objective("t5", tok)
    assert obj.vocab_size() == len(tok) + 100 and obj.sentinels[0] == len(tok) + 99  # <extra_id_0> on top
    n = obj.content_length(128)
    assert obj.lengths(n)[0] <= 128 < obj.lengths(n + 1)[0]
    blocks = _blocks(stream, n, 300)
    b = obj.make_batch(blocks, _rngs(300))
    x, y = b["input_ids"].numpy(), b["labels"].numpy()
    assert x.shape == (300, obj.lengths(n)[0]) and y.shape == (300, obj.lengths(n)[1])
    spans_total, noise_total = 0, 0
    for bl, xi, yi in zip(blocks, x, y, strict=True):
        sx = xi[xi >= len(tok)]
        k = len(sx)
        assert sx.tolist() == obj.sentinels[:k].tolist()  # input sentinels in order
        assert yi[0] == obj.sentinels[0] and yi[-1] == xi[-1] == obj.eos_id
        pos = np.flatnonzero(yi >= len(tok))
        assert yi[pos].tolist() == obj.sentinels[:k].tolist()  # target: sentinel k, then its span
        bounds = np.append(pos, len(yi) - 1)
        spans = [yi[bounds[j] + 1:bounds[j + 1]] for j in range(k)]
        assert all(len(s) >= 1 for s in spans)
        rebuilt = []
        for t in xi[:-1]:
            rebuilt.extend(spans[int(np.flatnonzero(obj.sentinels == t)[0])] if t >= len(tok) else [t])
        assert np.array_equal(rebuilt, bl)  # input + target reconstruct the original
        spans_total += k
        noise_total += sum(len(s) for s in spans)
    assert abs(noise_total / (300 * n) - 0.15) < 0.01
    assert abs(noise_total / spans_total - 3.0) < 0.3


def test_t5_noise_mask_segments():
    rng = np.random.default_rng(0)
    runs = []
    for _ in range(500):
        m = random_spans_noise_mask(rng, 200, 0.15, 3.0)
        assert not m[0] and m.sum() == 30
        edges = np.flatnonzero(np.diff(np.concatenate([[0], m.astype(int), [0]])))
        runs.extend((edges[1::2] - edges[::2]).tolist())
        assert len(edges) // 2 == 10
    assert abs(np.mean(runs) - 3.0) < 1e-9 and np.std(runs) > 1  # random lengths, mean exactly 30 / 10


# --------------------------------------------------------------------------------------------- bart
def _is_sentence_permutation(body: np.ndarray, orig: np.ndarray, obj) -> bool:
    """``body`` is the sentences of ``orig`` (cut after each full stop) concatenated in some order."""
    ends = np.flatnonzero(obj.tok.sentence_end[orig] | (orig == obj.separator()))
    bounds = np.concatenate([[0], ends + 1, [len(orig)]])
    sents = [orig[bounds[i]:bounds[i + 1]].tolist() for i in range(len(bounds) - 1) if bounds[i + 1] > bounds[i]]

    def fits(pos: int, left: list) -> bool:
        if pos == len(body):
            return not left
        return any(body[pos:pos + len(s)].tolist() == s and fits(pos + len(s), left[:i] + left[i + 1:])
                   for i, s in enumerate(left))

    return fits(0, sents)


def test_bart_each_corruption(tok, stream):
    blocks = _blocks(stream, N, 60)
    mask_id = tok.mask_token_id
    for name in ("delete", "rotate", "permute", "mask", "infill"):
        obj = build_objective("bart", tok, corruptions=[name])
        b = obj.make_batch(blocks, _rngs(60))
        x, am, y = b["input_ids"].numpy(), b["attention_mask"].numpy(), b["labels"].numpy()
        removed = []
        for bl, xi, ai, yi in zip(blocks, x, am, y, strict=True):
            assert yi.tolist() == [tok.cls_token_id, *bl.tolist(), tok.sep_token_id]  # target: the original
            body = xi[ai == 1][1:-1]
            assert (xi[ai == 0] == tok.pad_token_id).all() and xi[ai == 1][0] == tok.cls_token_id
            if name == "delete":
                assert len(body) == N - round(0.3 * N)  # deletion shortens
                it = iter(bl.tolist())
                assert all(t in it for t in body.tolist())  # what is left keeps its order
            elif name == "rotate":
                assert any(np.array_equal(np.roll(bl, -r), body) for r in range(N))  # a rotation
            elif name == "permute":
                assert _is_sentence_permutation(body, bl, obj)  # the same sentences, reordered
                removed.append(not np.array_equal(body, bl))
            elif name == "mask":
                assert (body == mask_id).sum() == round(0.3 * N) and ((body == bl) | (body == mask_id)).all()
            else:  # infill: each masked span -> one [MASK]
                kept = body[body != mask_id]
                it = iter(bl.tolist())
                assert all(t in it for t in kept.tolist())
                assert len(body) < N
                removed.append((N - len(kept)) / N)
        if name == "permute":
            assert np.mean(removed) > 0.9  # (almost) every block was reordered
        if name == "infill":
            assert 0.2 < np.mean(removed) <= 0.3 + 1e-9  # 30% budget, less where spans overlap
    both = build_objective("bart", tok, corruptions="infill,permute")
    assert both.corruptions == ["permute", "infill"]
    with pytest.raises(PtmlabError, match="unknown BART corruption shuffle"):
        build_objective("bart", tok, corruptions=["shuffle"])


# --------------------------------------------------------------------------------------------- electra
def test_electra_labels_and_sharing(tok, stream):
    obj = build_objective("electra", tok)
    blocks = _blocks(stream, N, 100)
    b = obj.make_batch(blocks, _rngs(100))
    picked = b["labels"] != -100
    assert (b["input_ids"][picked] == tok.mask_token_id).all()  # all picked positions are [MASK]
    assert abs(picked.float().mean().item() - 0.15 * N / (N + 2)) < 0.005
    samples = b["labels"][picked].clone()
    samples[::2] = 2000  # half the samples differ from the original, half reproduce it
    same = b["labels"][picked][::2] == 2000
    corrupted, is_replaced = obj.replace(b["input_ids"], b["labels"], samples)
    original = torch.where(picked, b["labels"], b["input_ids"])
    assert torch.equal(is_replaced.bool(), corrupted != original)
    assert is_replaced.sum() == (~same).sum() and not is_replaced[~picked].any()

    from ptmlab.pretrain.models import build_scratch

    disc = build_scratch("electra", layers=1, hidden=128, heads=2, ffn=256, tokenizer=tok, max_positions=130,
                         objective=obj)
    pm = obj.wrap(disc)
    gen = pm.generator
    assert gen.config.hidden_size == 32 and gen.electra.embeddings is disc.electra.embeddings
    assert gen.generator_lm_head.weight is disc.electra.embeddings.word_embeddings.weight
    n_unique = sum(p.numel() for p in pm.parameters())
    shared = sum(p.numel() for p in disc.electra.embeddings.parameters())
    assert n_unique == sum(p.numel() for p in disc.parameters()) + sum(p.numel() for p in gen.parameters()) - shared
    assert obj.kept_model(pm) is disc


# --------------------------------------------------------------------------------------------- nsp / sop
@pytest.mark.parametrize("name", ["nsp", "sop"])
def test_sentence_pairs(tok, stream, name):
    from ptmlab.pretrain.corpus import TokenCorpus, pack_blocks

    obj = build_objective(name, tok)
    n = obj.content_length(128)
    corpus = TokenCorpus(stream.astype(np.uint32), np.array([[0, len(stream)]]))
    source = pack_blocks(corpus, n, tok.sep_token_id)
    idx = list(range(min(400, len(source))))
    blocks = [source[i] for i in idx]
    b = obj.make_batch(blocks, _rngs(len(idx)), source=source, indices=idx)
    y = b["next_sentence_label"].numpy()
    assert abs(y.mean() - 0.5) < 0.08
    x, tt, lab = b["input_ids"].numpy(), b["token_type_ids"].numpy(), b["labels"].numpy()
    for bl, xi, ti, li, yi in zip(blocks, x, tt, lab, y, strict=True):
        orig = np.where(li != -100, li, xi)
        seps = np.flatnonzero(orig == tok.sep_token_id)
        assert orig[0] == tok.cls_token_id and seps[-1] == len(orig) - 1 and len(seps) == 2
        a, bb = orig[1:seps[0]], orig[seps[0] + 1:-1]
        assert (ti == np.r_[np.zeros(seps[0] + 1), np.ones(len(bb) + 1)]).all()
        if yi == 0:
            assert np.array_equal(np.concatenate([a, bb]), bl)  # B follows A
        elif name == "sop":
            assert np.array_equal(np.concatenate([bb, a]), bl)  # swapped
        else:
            assert np.array_equal(a, bl[:len(a)]) and not np.array_equal(bb, bl[len(a):])  # B from elsewhere
    orig = np.where(lab != -100, lab, x)
    assert abs((lab != -100).sum() / (~obj.tok.special[orig]).sum() - 0.15) < 0.005


# --------------------------------------------------------------------------------------------- plm
def test_plm_permutation_masks(tok, stream):
    obj = build_objective("plm", tok)
    blocks = _blocks(stream, 128, 100)
    b = obj.make_batch(blocks, _rngs(100))
    pm, tm, lab = b["perm_mask"].numpy(), b["target_mapping"].numpy(), b["labels"].numpy()
    fracs = []
    for bl, p, t, y in zip(blocks, pm, tm, lab, strict=True):
        valid = y != -100
        pos = t[valid].argmax(-1)
        assert np.array_equal(y[valid], bl[pos])  # labels are the tokens at the target positions
        tgt = np.zeros(128, bool)
        tgt[pos] = True
        assert (p[:, tgt][~tgt] == 1).all()  # context never sees a target
        assert (p[~tgt][:, ~tgt] == 0).all()  # context sees all context
        assert (np.diag(p)[tgt] == 1).all()  # a target never sees itself
        sees = p[np.ix_(tgt, tgt)] == 0  # among targets: a strict order (a permutation)
        assert not (sees & sees.T).any()
        assert sorted(sees.sum(1).tolist()) == list(range(tgt.sum()))
        fracs.append(tgt.mean())
    assert abs(np.mean(fracs) - 1 / 6) < 0.03


# --------------------------------------------------------------------------------------------- every objective
@pytest.mark.parametrize("name", sorted(OBJECTIVES.names()))
def test_every_objective_trains_its_model(tok, stream, name):
    from ptmlab.pretrain.models import build_scratch

    opts = {"sbo": True} if name == "span" else {}
    obj = build_objective(name, tok, **opts)
    torch.manual_seed(0)
    model = build_scratch(obj.default_arch, layers=1, hidden=64, heads=2, ffn=128, tokenizer=tok, max_positions=96,
                          objective=obj)
    obj.check(tok, model.config)
    pm = obj.wrap(model)
    n = obj.content_length(64)
    batch = obj.make_batch(_blocks(stream, n, 3), _rngs(3))
    loss = obj.loss(pm, batch)
    assert loss.shape == (3,) and torch.isfinite(loss).all()
    ln_v, ln_2 = math.log(obj.vocab_size()), math.log(2)
    expected = {"electra": ln_v + 50 * ln_2, "nsp": ln_v + ln_2, "sop": ln_v + ln_2, "span": 2 * ln_v}.get(name, ln_v)
    assert (loss - expected).abs().max() < 1.0  # near-uniform predictions at init
    loss.mean().backward()
    grads = {n_: p.grad for n_, p in pm.named_parameters() if p.grad is not None}
    emb = model.get_input_embeddings().weight
    assert emb.grad is not None and emb.grad.abs().sum() > 0
    assert len(grads) >= 0.9 * sum(1 for p in pm.parameters() if p.requires_grad)
    if name == "span":
        assert pm.boundary.mlp[0].weight.grad.abs().sum() > 0


def test_bad_inputs(tok):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2, "[SEP]": 3}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    no_mask = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]", sep_token="[SEP]")
    for name in ("mlm", "wwm", "span", "electra", "nsp", "sop"):
        with pytest.raises(PtmlabError, match="no mask token"):
            build_objective(name, no_mask)
    with pytest.raises(PtmlabError, match="no mask token"):
        build_objective("bart", no_mask, corruptions=["infill"])
    build_objective("bart", no_mask, corruptions=["delete", "rotate"])  # needs no mask
    build_objective("clm", no_mask)
    with pytest.raises(PtmlabError, match="takes no option noise_density"):
        build_objective("mlm", tok, noise_density=0.2)
    with pytest.raises(PtmlabError, match="unknown objective 'mml'"):
        build_objective("mml", tok)
    with pytest.raises(PtmlabError, match="noise-density must be in"):
        build_objective("t5", tok, noise_density=1.5)
    with pytest.raises(PtmlabError, match="masking must be static or dynamic"):
        build_objective("mlm", tok, masking="sometimes")
