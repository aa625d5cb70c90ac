"""first_token_only: the last feed-forward block on position 0 alone gives the same logits, loss and gradients."""

import pytest
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification

from ptmlab.models.first_token import FAMILIES, first_token_only

SMALL = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64, vocab_size=120,
             max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=3)
DISTIL = dict(dim=32, n_layers=3, n_heads=4, hidden_dim=64, vocab_size=120, max_position_embeddings=64,
              dropout=0.0, attention_dropout=0.0, seq_classif_dropout=0.0, num_labels=3)


def _model(family: str):
    torch.manual_seed(0)
    cfg = AutoConfig.for_model(family, **(DISTIL if family == "distilbert" else SMALL))
    return AutoModelForSequenceClassification.from_config(cfg)


def _batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 120, (4, 17), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    mask[3, 4:] = 0  # padded rows
    return ids, mask, torch.tensor([0, 2, 1, 2])


@pytest.mark.parametrize("family", FAMILIES)
def test_same_logits_loss_and_gradients(family):
    model = _model(family).train()
    ids, mask, labels = _batch()
    full = model(input_ids=ids, attention_mask=mask, labels=labels)
    full.loss.backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()

    handle = first_token_only(model)
    assert handle is not None
    seen = {}

    def record(module, inputs, output):
        seen["shape"] = (output[0] if isinstance(output, tuple) else output).shape

    last = model.base_model.get_submodule("transformer.layer" if family == "distilbert" else "encoder.layer")[-1]
    hook = last.register_forward_hook(record)
    cut = model(input_ids=ids, attention_mask=mask, labels=labels)
    hook.remove()
    assert seen["shape"][1] == 1  # the last layer really ran on one position
    torch.testing.assert_close(cut.logits, full.logits, atol=1e-5, rtol=1e-5)
    cut.loss.backward()
    for n, p in model.named_parameters():
        if n in want:
            torch.testing.assert_close(p.grad, want[n], atol=1e-5, rtol=1e-4, msg=n)
        else:  # parameters the full model leaves without gradient stay so
            assert p.grad is None or not p.grad.any(), n

    handle.remove()
    model.zero_grad()
    again = model(input_ids=ids, attention_mask=mask)
    torch.testing.assert_close(again.logits, full.logits, atol=1e-6, rtol=1e-6)


def test_not_applied_where_it_would_change_the_result():
    from transformers import AutoModel

    bare = AutoModel.from_config(AutoConfig.for_model("bert", **SMALL))
    assert first_token_only(bare) is None  # hidden states of every position are the output
    mobile = AutoModelForSequenceClassification.from_config(AutoConfig.for_model(
        "mobilebert", hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        intra_bottleneck_size=16, embedding_size=16, vocab_size=120, num_labels=2))
    assert first_token_only(mobile) is None
    shared = _model("bert")
    shared.bert.encoder.layer[2] = shared.bert.encoder.layer[0]  # cross-layer sharing
    assert first_token_only(shared) is None


def test_fine_tune_with_the_cut_trains_the_same_model(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    import ptmlab.models.first_token as ft
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune
    from tests.synthetic import write_task

    files = write_task(tmp_path / "task", n_train=96, n_dev=32)
    import sys

    installed = []  # (caller, handle): fine_tune installs it for training, predict_logits for a prediction pass
    real = ft.first_token_only

    def spy(m):
        installed.append((sys._getframe(1).f_code.co_name, real(m)))
        return installed[-1][1]

    monkeypatch.setattr(ft, "first_token_only", spy)
    runs = {}
    for on in (True, False):
        cfg = FinetuneConfig(model="tiny", task="synthetic", train_file=files["train"], dev_file=files["dev"],
                             epochs=1, batch_size=16, lr=1e-3, max_length=32, seed=0, dropout=0.0, precision="fp32",
                             first_token_only=on, output=str(tmp_path / f"run-{on}"))
        runs[on] = run_finetune(cfg)
    training = [h for caller, h in installed if caller == "fine_tune"]
    assert len(training) == 1 and training[0] is not None  # trained with the cut in the first run only
    assert runs[True]["metrics"]["accuracy"] == pytest.approx(runs[False]["metrics"]["accuracy"])
    cut, full = (load_file(str(tmp_path / f"run-{on}" / "model.safetensors")) for on in (True, False))
    for name, w in full.items():
        torch.testing.assert_close(cut[name], w, atol=1e-4, rtol=1e-3, msg=name)


def test_predict_logits_cuts_only_unwatched_models(monkeypatch):
    import numpy as np

    import ptmlab.models.first_token as ft
    from ptmlab.data.encode import Encoded
    from ptmlab.train.evaluate import predict_logits

    model = _model("bert").eval()
    ids, mask, _ = _batch()
    rows = [r[m.bool()].tolist() for r, m in zip(ids, mask, strict=True)]
    enc = Encoded(input_ids=rows, token_type_ids=None, labels=None)
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask).logits.numpy()
    calls = []
    monkeypatch.setattr(ft, "first_token_only", lambda m: calls.append(m) or _real(m))
    got = predict_logits(model, enc, pad_id=0, batch_size=2)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert len(calls) == 1 and not model.bert.encoder.layer[-1].attention.output.LayerNorm._forward_hooks  # removed
    model.bert.encoder.layer[0].register_forward_hook(lambda m, i, o: None)  # someone is watching
    np.testing.assert_allclose(predict_logits(model, enc, pad_id=0, batch_size=2), want, atol=1e-5)
    assert len(calls) == 1


_real = first_token_only
