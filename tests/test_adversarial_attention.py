"""Adversarial attention (Jain & Wallace section 4) on `tiny`: JSD against hand values, the injected [CLS] row
reproduces the model when it is the model's own, the search returns distributions within the output tolerance
(checked by an independent forward pass) and far from the model's own, and ``ptmlab analyze adversarial-attention``
writes its outputs; bad options are one-line errors."""

import json
import math

import pytest
import torch

from ptmlab.analysis.adversarial import LastLayerCLSRow, adversarial_attention, jsd, summarize, tvd
from ptmlab.cli import main
from ptmlab.data.batching import collate
from ptmlab.data.encode import Encoded
from ptmlab.models.loader import model_inputs, save_model
from ptmlab.models.zoo import load_model, load_tokenizer
from tests.synthetic import write_task

TEXTS = ["a great movie with fine acting", "terrible and boring", "i liked it",
         "not good at all, very slow and far too long"]


@pytest.fixture(scope="module")
def model_and_enc():
    torch.manual_seed(0)
    model = load_model("tiny", num_labels=2, attn_implementation="eager").eval()
    tok = load_tokenizer("tiny")
    enc = Encoded([tok(t)["input_ids"] for t in TEXTS], None, [0, 1, 0, 1])
    return model, enc, tok.pad_token_id


def test_jsd_matches_hand_values():
    p = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.9, 0.1]])
    q = torch.tensor([[0.0, 1.0], [0.5, 0.5], [0.5, 0.5]])
    m = (p[2] + q[2]) / 2
    by_hand = 0.5 * sum(float(a * math.log(a / b)) for a, b in zip(p[2], m, strict=True)) + \
        0.5 * sum(float(a * math.log(a / b)) for a, b in zip(q[2], m, strict=True))
    assert jsd(p, q).tolist() == pytest.approx([math.log(2), 0.0, by_hand], abs=1e-5)
    assert tvd(p, q).tolist() == pytest.approx([1.0, 0.0, 0.4], abs=1e-6)


def test_own_row_injected_reproduces_the_model(model_and_enc):
    model, enc, pad = model_and_enc
    batch = model_inputs(model, collate(enc, [0, 1, 2, 3], pad))
    with torch.no_grad():
        ref = model(**batch).logits
        with LastLayerCLSRow(model) as hook:
            model(**batch)
            own = hook.own
            hook.weights = own
            same = model(**batch).logits
            hook.weights = torch.roll(own, 1, dims=-1)  # a different row changes the output
            other = model(**batch).logits
    assert torch.allclose(same, ref, atol=1e-5)
    assert not torch.allclose(other, ref, atol=1e-4)


def test_search_finds_distant_attention_within_tolerance(model_and_enc):
    model, enc, pad = model_and_enc
    eps = 0.01
    r = adversarial_attention(model, enc, pad, epsilon=eps, steps=30, batch_size=3, seed=0)
    assert len(r.jsd) == 4 and len(r.adversarial) == 4
    batch = model_inputs(model, collate(enc, [0, 1, 2, 3], pad))
    with torch.no_grad():
        p0 = model(**batch).logits.softmax(-1)
    for k, (adv, own) in enumerate(zip(r.adversarial, r.own, strict=True)):
        n = len(enc.input_ids[k])
        assert adv.shape == own.shape == (4, n)  # 4 heads of the last layer over the real tokens
        assert adv.sum(-1) == pytest.approx(1.0, abs=1e-4) and (adv >= 0).all()
        # an independent forward pass with the returned attention stays within the tolerance
        one = model_inputs(model, collate(enc, [k], pad))
        with torch.no_grad(), LastLayerCLSRow(model) as hook:
            hook.weights = torch.as_tensor(adv)[None]
            p = model(**one).logits.softmax(-1)
        assert float(tvd(p, p0[k:k + 1])[0]) <= eps + 1e-5
        assert float(tvd(p, p0[k:k + 1])[0]) == pytest.approx(r.tvd[k], abs=1e-5)
        assert float(jsd(torch.as_tensor(adv), torch.as_tensor(own)).mean()) == pytest.approx(r.jsd[k], abs=1e-5)
    assert ((0 <= r.jsd) & (r.jsd <= math.log(2))).all() and (r.jsd > 0.1).all()
    assert (r.max_head_jsd >= r.jsd - 1e-9).all()
    s = summarize(r)
    assert s["share_jsd_at_least_threshold"] == pytest.approx(float((r.jsd >= 0.5).mean()))
    assert s["max_output_tvd"] <= eps + 1e-5
    # a tighter tolerance can only make the search find less
    tight = adversarial_attention(model, enc, pad, epsilon=1e-4, steps=30, batch_size=4, seed=0)
    assert (tight.tvd <= 1e-4 + 1e-6).all() and tight.jsd.mean() < r.jsd.mean()


def test_analyze_adversarial_attention_command(tmp_path, capsys):
    torch.manual_seed(0)
    save_model(load_model("tiny", num_labels=2), load_tokenizer("tiny"), tmp_path / "model")
    paths = write_task(tmp_path / "data", n_train=8, n_dev=6)
    data = ["--task", "syn", "--train-file", paths["train"], "--dev-file", paths["dev"], "--max-length", "32"]
    rc = main(["analyze", "adversarial-attention", str(tmp_path / "model"), *data, "--adv-steps", "10",
               "--output", str(tmp_path / "adv")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    s = json.loads((tmp_path / "adv" / "summary.json").read_text())
    rows = json.loads((tmp_path / "adv" / "examples.json").read_text())
    assert s["examples"] == len(rows) == 6 and s["max_output_tvd"] <= 0.01 + 1e-6
    assert s["share_jsd_at_least_threshold"] == pytest.approx(sum(r["jsd"] >= 0.5 for r in rows) / 6)
    assert "have a last-layer [CLS] attention" in out.out and (tmp_path / "adv" / "report.html").is_file()
    rc = main(["analyze", "adversarial-attention", str(tmp_path / "model"), *data, "--epsilon", "1.5",
               "--output", str(tmp_path / "bad")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--epsilon" in err[0] and not (tmp_path / "bad").exists()
