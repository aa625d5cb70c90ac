import math

import pytest
import torch

from ptmlab.core.rundir import RunDir
from ptmlab.models.zoo import load_model
from ptmlab.train.args import FinetuneConfig
from ptmlab.train.finetune import run_finetune
from ptmlab.train.optim import SCHEDULES, build_optimizer, clipped_step
from ptmlab.train.strategies import make_strategy, trainable_parameters
from tests.synthetic import write_task


@pytest.fixture(scope="module")
def task_files(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("task"))


def _cfg(files, out, **kw) -> FinetuneConfig:
    base = dict(model="tiny", task="synthetic", train_file=files["train"], dev_file=files["dev"], epochs=3,
                batch_size=16, lr=1e-3, max_length=32, output=str(out), seed=0, logging_steps=5)
    base.update(kw)
    return FinetuneConfig(**base)


def test_tiny_learns_and_the_run_directory_is_complete(task_files, tmp_path):
    summary = run_finetune(_cfg(task_files, tmp_path / "r"))
    assert summary["metrics"]["accuracy"] >= 0.9
    run = RunDir(tmp_path / "r")
    for f in ("config.yaml", "metrics.jsonl", "summary.json", "report.html", "model.safetensors", "config.json",
              "tokenizer.json"):
        assert (tmp_path / "r" / f).is_file(), f
    assert not (tmp_path / "r" / "checkpoint").exists()
    losses = [r["loss"] for r in run.metrics() if "loss" in r]
    assert losses[-1] < 0.5 * losses[0]
    evals = [r for r in run.metrics() if "eval" in r]
    assert len(evals) == 3  # one per epoch
    assert "data:image/png;base64" in (tmp_path / "r" / "report.html").read_text()
    # the saved model reloads and gives the same dev accuracy
    from ptmlab.data.encode import encode_split
    from ptmlab.data.loaders import load_task
    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.train.evaluate import evaluate

    data = load_task("synthetic", train_file=task_files["train"], dev_file=task_files["dev"])
    tok = load_tokenizer(str(tmp_path / "r"))
    enc = encode_split(tok, data.splits["dev"], 32)
    metrics, _ = evaluate(load_model(str(tmp_path / "r")), enc, data.spec, tok.pad_token_id,
                          precision=summary["precision"])
    assert metrics["accuracy"] == pytest.approx(summary["metrics"]["accuracy"])


def test_frozen_and_adapter_train_few_parameters(task_files, tmp_path):
    model = load_model("tiny", num_labels=2)
    total = sum(p.numel() for p in model.parameters())
    frozen = make_strategy(FinetuneConfig(strategy="frozen")).prepare(model)
    head = 64 * 64 + 64 + 64 * 2 + 2  # pooler + classifier
    assert trainable_parameters(frozen) == head
    model = load_model("tiny", num_labels=2)
    adapted = make_strategy(FinetuneConfig(strategy="adapter", adapter_size=8)).prepare(model)
    n_adapters = 2 * 2 * (64 * 8 + 8 + 8 * 64 + 64)
    n_norms = (1 + 2 * 2) * 2 * 64
    assert trainable_parameters(adapted) == head + n_adapters + n_norms
    assert trainable_parameters(adapted) < 0.05 * total
    summary = run_finetune(_cfg(task_files, tmp_path / "a", strategy="adapter", adapter_size=8, epochs=1))
    assert (tmp_path / "a" / "adapter" / "adapter_model.safetensors").is_file()
    assert summary["trainable_params"] == head + n_adapters + n_norms


def test_gradual_unfreeze_opens_one_group_at_a_time():
    model = load_model("tiny", num_labels=2)
    strat = make_strategy(FinetuneConfig(strategy="gradual-unfreeze"))
    strat.prepare(model)
    names = [g for g, _ in strat.groups]
    assert names == ["head", "layer.1", "layer.0", "embeddings"]
    seen = []
    for step in (0, 10, 20, 30, 99):
        strat.update(model, step, step // 10, 10)
        seen.append(trainable_parameters(model))
    assert seen[0] == 64 * 64 + 64 + 130  # head only
    assert seen[0] < seen[1] < seen[2] < seen[3] == seen[4] == sum(p.numel() for p in model.parameters())


def test_layerwise_learning_rates():
    model = load_model("tiny", num_labels=2)
    opt = build_optimizer(model, lr=1.0, weight_decay=0.01, llrd=0.5)
    lrs = {}
    for g in opt.param_groups:
        lrs[g["group"]] = g["lr"]
    assert lrs == {"head": 1.0, "layer.1": 1.0, "layer.0": 0.5, "embeddings": 0.25}
    no_decay = [g for g in opt.param_groups if g["weight_decay"] == 0]
    assert all(p.dim() == 1 for g in no_decay for p in g["params"])  # biases and LayerNorms


@pytest.mark.parametrize("scale", [1e-4, 30.0])  # gradients under the clipping norm, and far over it
def test_clipped_step_equals_clip_grad_norm_then_step(scale):
    torch.manual_seed(0)
    models = [load_model("tiny", num_labels=2) for _ in range(3)]
    for m in models[1:]:
        m.load_state_dict(models[0].state_dict())
    start = [p.detach().clone() for p in models[0].parameters()]
    opts = [build_optimizer(m, lr=1e-3, weight_decay=0.01) for m in models]
    opts[2] = torch.optim.AdamW([{"params": g["params"], "weight_decay": g["weight_decay"]}  # not fused: torch clips
                                 for g in opts[2].param_groups], lr=1e-3)
    assert opts[0].defaults["fused"] and not opts[2].defaults["fused"]
    for step in range(4):
        grads = [torch.randn_like(p) * scale for p in models[0].parameters()]
        for m in models:
            for p, g in zip(m.parameters(), grads, strict=True):
                p.grad = None if p.dim() == 1 and step == 0 else g.clone()  # some tensors without a gradient
        total = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in models[0].parameters()
                                                            if p.grad is not None])))
        assert (total > 1.0) == (scale > 1)
        torch.nn.utils.clip_grad_norm_([p for p in models[0].parameters() if p.grad is not None], 1.0)
        opts[0].step()
        clipped_step(opts[1], 1.0)
        clipped_step(opts[2], 1.0)
        assert not hasattr(opts[1], "grad_scale")
        for m in models[1:]:
            for p, q in zip(models[0].parameters(), m.parameters(), strict=True):
                assert torch.allclose(p, q, rtol=0, atol=1e-6)
    moved = max((p - q).abs().max().item() for p, q in zip(models[0].parameters(), start, strict=True))
    assert moved > 1e-3  # the steps did something to compare


def test_schedules_by_hand():
    cfg = FinetuneConfig(stlr_cut_frac=0.1, stlr_ratio=32)
    stlr = SCHEDULES.get("stlr")(100, 0, cfg)
    assert stlr(9) == pytest.approx(1.0)  # t = cut = 10: the peak
    assert stlr(0) == pytest.approx((1 + 0.1 * 31) / 32)
    assert stlr(99) == pytest.approx(1 / 32)
    assert stlr(54) == pytest.approx((1 + 0.5 * 31) / 32)  # halfway down: p = 1 - 45/90
    lin = SCHEDULES.get("linear")(100, 10, cfg)
    assert lin(4) == pytest.approx(0.5) and lin(10) == pytest.approx(1.0) and lin(55) == pytest.approx(0.5)
    cos = SCHEDULES.get("cosine")(100, 0, cfg)
    assert cos(50) == pytest.approx(0.5) and cos(0) == pytest.approx(1.0)
    assert math.isclose(cos(100), 0.0, abs_tol=1e-9)


def test_early_stopping_keeps_the_best_weights(task_files, tmp_path):
    from ptmlab.data.encode import encode_split
    from ptmlab.data.loaders import load_task
    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.train.loop import Trainer

    cfg = _cfg(task_files, tmp_path / "e", eval_steps=2, early_stopping=2, max_steps=40)
    data = load_task("synthetic", train_file=task_files["train"], dev_file=task_files["dev"])
    tok = load_tokenizer("tiny")
    model = load_model("tiny", num_labels=2)
    scores = iter([0.5, 0.7, 0.6, 0.65, 0.9])
    snapshots = {}

    def fake_eval(m):  # a scripted metric: the best is the second evaluation (step 4)
        snapshots[len(snapshots)] = {k: v.clone() for k, v in m.state_dict().items()}
        return {"accuracy": next(scores)}

    run = RunDir.create(tmp_path / "e")
    trainer = Trainer(model, encode_split(tok, data.splits["train"], 32), cfg, run, tok.pad_token_id,
                      evaluate_fn=fake_eval, main_metric="accuracy")
    state = trainer.train()
    assert state.stopped_early and state.step == 8 and state.best_step == 4 and state.best_metric == 0.7
    final = trainer.final_model().state_dict()
    assert all(torch.equal(final[k], snapshots[1][k]) for k in final)
