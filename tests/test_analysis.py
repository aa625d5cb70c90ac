"""Head/layer ablation against the naive loop, attention patterns, attention vs importance (tiny model)."""

import math

import numpy as np
import pytest
import torch

from ptmlab.analysis.ablation import (
    AblationTable,
    CachedAblation,
    head_ablation,
    layer_ablation,
    naive_head_ablation,
    naive_head_logits,
)
from ptmlab.analysis.attention import PATTERNS, attention_stats, attentions, classify, map_features
from ptmlab.analysis.explanation import PermutedLastLayer, explain, kendall_tau
from ptmlab.core.errors import PtmlabError
from ptmlab.data.batching import collate
from ptmlab.data.encode import encode_split
from ptmlab.data.loaders import Split
from ptmlab.data.tasks import TASKS
from ptmlab.models.gates import Gates
from ptmlab.models.loader import model_inputs
from ptmlab.models.zoo import load_model, load_tokenizer

TEXTS = ["a good movie", "bad bad bad film with long words in it", "fine", "the plot was thin but the acting was "
         "great overall", "terrible", "I liked the music and the actors a lot", "boring story", "superb and moving"]


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model = load_model("tiny", num_labels=2).eval()
    tok = load_tokenizer("tiny")
    enc = encode_split(tok, Split(TEXTS, None, [0] * len(TEXTS)), 32, use_cache=False)
    # labels = the intact model's predictions, so ablations that flip a prediction lower the accuracy
    with torch.no_grad():
        preds = [int(model(**model_inputs(model, collate(enc, [i], 0, pad_to=1))).logits.argmax()) for i in
                 range(len(enc))]
    enc.labels = preds
    return model, tok, enc


def test_cached_ablation_logits_equal_the_naive_loop(tiny):
    model, _, enc = tiny
    run = CachedAblation(model, enc, TASKS.get("sst2"), 0, batch_size=3)
    for layer, head, kind in ((0, 1, "removed"), (0, 2, "uniform"), (1, 0, "removed"), (1, 3, "uniform")):
        def act(g, layer=layer, head=head, kind=kind):
            return g.remove_head(layer, head) if kind == "removed" else g.uniform_head(layer, head)

        fast = run.logits(layer, act)
        slow = naive_head_logits(model, enc, layer, head, kind)
        assert np.allclose(fast, slow, atol=1e-5), (layer, head, kind)
    assert not np.allclose(run.logits(1, lambda g: g.remove_head(1, 0)), run.base_logits, atol=1e-5)


def test_head_ablation_table_equals_the_naive_table(tiny):
    model, _, enc = tiny
    spec = TASKS.get("sst2")
    fast = head_ablation(model, enc, spec, 0, batch_size=4)
    slow = naive_head_ablation(model, enc, spec)
    assert fast.base == slow.base == 1.0
    assert fast.removed.shape == (2, 4)
    assert np.array_equal(fast.removed, slow.removed) and np.array_equal(fast.uniform, slow.uniform)


def test_layer_ablation_equals_full_forward_with_gates(tiny):
    model, _, enc = tiny
    spec = TASKS.get("sst2")
    table = layer_ablation(model, enc, spec, 0, batch_size=3)
    for layer in range(2):
        for kind, arr in (("removed", table.removed), ("uniform", table.uniform)):
            preds = []
            with Gates(model) as g, torch.no_grad():
                if kind == "removed":
                    g.skip_layer(layer)
                else:
                    for h in range(4):
                        g.uniform_head(layer, h)
                for i in range(len(enc)):
                    preds.append(int(model(**model_inputs(model, collate(enc, [i], 0, pad_to=1))).logits.argmax()))
            assert arr[layer] == pytest.approx(np.mean(np.array(preds) == np.array(enc.labels)))


def test_ablation_table_rows_and_helpful_units():
    t = AblationTable("accuracy", 0.5, np.array([[0.6, 0.4], [0.5, 0.7]]), np.array([[0.5, 0.45], [0.52, 0.1]]))
    assert t.helpful("removed") == [(0, 0), (1, 1)]
    assert t.helpful("uniform") == [(1, 0)]
    assert t.helpful("removed", tol=0.15) == [(1, 1)]
    rows = t.rows()
    assert len(rows) == 4 and rows[1] == {"layer": 0, "head": 1, "removed_accuracy": 0.4,
                                          "removed_delta": pytest.approx(-0.1), "uniform_accuracy": 0.45,
                                          "uniform_delta": pytest.approx(-0.05)}


def test_kendall_tau_on_hand_made_cases():
    assert kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # one discordant pair of six: (5 - 1) / 6
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    # tau-b with one tie in b: concordant 2, discordant 0, pairs 3, untied in b 2 -> 2 / sqrt(3 * 2)
    assert kendall_tau([1, 2, 3], [1, 1, 2]) == pytest.approx(2 / math.sqrt(6))
    assert math.isnan(kendall_tau([1, 1, 1], [1, 2, 3]))
    assert math.isnan(kendall_tau([1], [2]))


def _maps(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float).view(1, 1, 1, len(rows), len(rows))


def test_pattern_rule_and_entropy_on_hand_made_maps():
    t = 8  # [CLS] w1 .. w6 [SEP]
    mask = torch.ones(1, t)
    special = torch.tensor([[True] + [False] * 6 + [True]])
    seg = torch.zeros(1, t, dtype=torch.long)
    eye = torch.eye(t)
    cls_col = torch.zeros(t, t)
    cls_col[:, 0] = 1
    far = torch.zeros(t, t)  # each query attends to a plain token at distance >= 2
    for i, j in enumerate([3, 4, 5, 6, 1, 1, 2, 3]):
        far[i, j] = 1
    mixed = 0.4 * cls_col + 0.15 * eye + 0.45 * far
    cases = {"vertical": cls_col, "diagonal": eye, "vertical+diagonal": 0.5 * cls_col + 0.5 * eye,
             "block": far, "heterogeneous": mixed}
    for name, m in cases.items():
        v, d, b, ent = map_features(m.view(1, 1, 1, t, t), mask, special, seg)
        kind = classify(v.numpy(), d.numpy(), b.numpy())
        assert PATTERNS[int(kind.item())] == name, (name, v, d, b)
    v, d, b, _ = map_features(mixed.view(1, 1, 1, t, t), mask, special, seg)
    assert (v.item(), d.item(), b.item()) == pytest.approx((0.4, 0.15, 0.45))
    uniform = torch.full((t, t), 1 / t)
    v, d, b, ent = map_features(uniform.view(1, 1, 1, t, t), mask, special, seg)
    assert ent.item() == pytest.approx(math.log(t), rel=1e-5)
    # plain rows: 2 special columns; neighbours (w1 and w6 have one plain neighbour): (2 + 3 * 4 + 2) / 6 columns
    assert v.item() == pytest.approx(2 / t) and d.item() == pytest.approx(16 / 6 / t)
    assert v.item() + d.item() + b.item() == pytest.approx(1.0)


def test_attention_needs_eager_loading(tiny):
    model, tok, enc = tiny
    batch = collate(enc, [0, 1], 0)
    with pytest.raises(PtmlabError, match="attn_implementation='eager'"):
        attentions(model, batch)


@pytest.fixture(scope="module")
def tiny_eager():
    torch.manual_seed(0)
    model = load_model("tiny", num_labels=2, attn_implementation="eager").eval()
    tok = load_tokenizer("tiny")
    enc = encode_split(tok, Split(TEXTS, None, [0] * len(TEXTS)), 32, use_cache=False)
    return model, tok, enc


def test_attention_stats_shapes_and_shares(tiny_eager):
    model, tok, enc = tiny_eager
    stats = attention_stats(model, enc, 0, set(tok.all_special_ids), batch_size=3)
    assert stats.entropy.shape == (2, 4) and stats.counts.shape == (2, 4, 5)
    assert stats.counts.sum() == 2 * 4 * len(enc)  # every (example, head) map gets exactly one type
    assert np.allclose(stats.layer_shares().sum(-1), 1.0)
    # entropy never exceeds log(longest length)
    assert (stats.entropy <= math.log(max(enc.lengths)) + 1e-6).all() and (stats.entropy > 0).all()


def test_identity_permutation_changes_nothing_and_a_shuffle_does(tiny_eager):
    model, _, enc = tiny_eager
    batch = collate(enc, [1], 0, pad_to=1)
    n = len(enc.input_ids[1])
    with torch.no_grad():
        plain = model(**model_inputs(model, batch)).logits
        with PermutedLastLayer(model, torch.arange(n)):
            same = model(**model_inputs(model, batch)).logits
        with PermutedLastLayer(model, torch.arange(n).flip(0)):
            shuffled = model(**model_inputs(model, batch)).logits
    assert torch.allclose(plain, same, atol=1e-6)
    assert not torch.allclose(plain, shuffled, atol=1e-6)


def test_explain_gives_valid_taus_and_changes(tiny_eager):
    model, tok, enc = tiny_eager
    res = explain(model, enc, set(tok.all_special_ids), permutations=2, seed=0)
    assert len(res) == sum(1 for n in enc.lengths if n - 2 >= 3)  # examples with >= 3 plain tokens
    for r in res:
        for tau in (r.tau_last_grad, r.tau_last_loo, r.tau_mean_grad, r.tau_mean_loo):
            assert math.isnan(tau) or -1 <= tau <= 1
        assert 0 <= r.permutation_tvd <= 1 and 0 < r.max_attention <= 1


def test_random_init_keeps_the_architecture_with_fresh_weights():
    pre = load_model("minilm", num_labels=2)
    torch.manual_seed(1)
    a = load_model("minilm", num_labels=2, random_init=True)
    torch.manual_seed(1)
    b = load_model("minilm", num_labels=2, random_init=True)
    sa, sp, sb = a.state_dict(), pre.state_dict(), b.state_dict()
    assert sa.keys() == sp.keys() and all(sa[k].shape == sp[k].shape for k in sa)
    w = "bert.encoder.layer.0.attention.self.query.weight"
    assert not torch.allclose(sa[w], sp[w]) and torch.equal(sa[w], sb[w])
    assert a.config.num_hidden_layers == pre.config.num_hidden_layers == 6
