"""ptmlab in a stock ``transformers.Trainer`` script on ``tiny``: the optimizer/scheduler factory (layer-wise rates,
slanted triangular schedule), the gradual-unfreezing callback and the distillation Trainer."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")

from transformers import DataCollatorWithPadding, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from ptmlab.integrations.trainer import (  # noqa: E402
    DistillationTrainer,
    GradualUnfreezing,
    optimizer_and_scheduler,
)
from ptmlab.models.zoo import load_model, load_tokenizer  # noqa: E402
from ptmlab.train.optim import depth_groups  # noqa: E402
from tests.synthetic import NEG, POS  # noqa: E402


@pytest.fixture(scope="module")
def data():
    """A tokenized ``datasets.Dataset`` of a keyword task (label 1: a positive word), as a Trainer user has one."""
    import random

    rng = random.Random(0)
    rows = []
    for _ in range(256):
        label = rng.random() < 0.5
        words = rng.choices(["the", "film", "was", "plot", "a", "story"], k=rng.randint(2, 8))
        words.insert(rng.randint(0, len(words)), rng.choice(POS if label else NEG))
        rows.append({"text": " ".join(words), "label": int(label)})
    tok = load_tokenizer("tiny")
    ds = datasets.Dataset.from_list(rows).map(lambda b: tok(b["text"], truncation=True, max_length=32),
                                              batched=True, remove_columns=["text"])
    return ds, tok


def _args(tmp_path, **kw):
    base = dict(output_dir=str(tmp_path), per_device_train_batch_size=16, learning_rate=3e-3, logging_steps=1,
                save_strategy="no", report_to=[], use_cpu=True, seed=0, disable_tqdm=True)
    return TrainingArguments(**{**base, **kw})


class GradRecorder(TrainerCallback):
    """Which layer groups got gradients at each optimizer step."""

    def __init__(self, groups):
        self.groups, self.trained = groups, []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        params = dict(model.named_parameters())
        self.trained.append([g for g, names in self.groups if any(params[n].grad is not None for n in names)])


def test_gradual_unfreezing_callback_unfreezes_a_group_every_k_steps(data, tmp_path):
    ds, tok = data
    torch.manual_seed(0)
    model = load_model("tiny", num_labels=2)
    groups = depth_groups(model)
    assert [g for g, _ in groups] == ["head", "layer.1", "layer.0", "embeddings"]
    emb = [n for n in groups[-1][1]]
    before = {n: p.detach().clone() for n, p in model.named_parameters() if n in emb}
    unfreeze, recorder = GradualUnfreezing(every=2), GradRecorder(groups)
    trainer = Trainer(model=model, args=_args(tmp_path, max_steps=8), train_dataset=ds,
                      data_collator=DataCollatorWithPadding(tok), callbacks=[unfreeze, recorder])
    trainer.train()
    names = ["head", "layer.1", "layer.0", "embeddings"]
    assert recorder.trained == [names[:1 + step // 2] for step in range(8)]
    assert unfreeze.schedule == [{"group": g, "from_step": 2 * i} for i, g in enumerate(names)]
    assert all(p.requires_grad for p in model.parameters())  # trainable again after training
    # the embeddings trained only in the last two steps: they moved, but not before step 6
    assert any(not torch.equal(before[n], dict(model.named_parameters())[n]) for n in emb)


def test_unfreezing_spreads_the_steps_over_the_groups_by_default(data, tmp_path):
    ds, tok = data
    model = load_model("tiny", num_labels=2)
    unfreeze = GradualUnfreezing()
    Trainer(model=model, args=_args(tmp_path, max_steps=12), train_dataset=ds,
            data_collator=DataCollatorWithPadding(tok), callbacks=[unfreeze]).train()
    assert [s["from_step"] for s in unfreeze.schedule] == [0, 3, 6, 9]  # as `finetune --strategy gradual-unfreeze`


def test_factory_gives_layer_wise_rates_and_the_slanted_triangular_schedule(data, tmp_path):
    ds, tok = data
    torch.manual_seed(0)
    model = load_model("tiny", num_labels=2)
    args = _args(tmp_path, max_steps=40, learning_rate=4e-3)
    optimizer, scheduler = optimizer_and_scheduler(model, args, 40, llrd=0.5, schedule="stlr")
    peak = {g["group"]: g["initial_lr"] for g in optimizer.param_groups}
    assert peak == {"head": 4e-3, "layer.1": 4e-3, "layer.0": 2e-3, "embeddings": 1e-3}
    trainer = Trainer(model=model, args=args, train_dataset=ds, data_collator=DataCollatorWithPadding(tok),
                      optimizers=(optimizer, scheduler))
    trainer.train()
    logs = [r for r in trainer.state.log_history if "loss" in r]
    lrs = [r["learning_rate"] for r in logs]
    top = lrs.index(max(lrs))
    assert top == 3 and max(lrs) == pytest.approx(4e-3)  # ULMFiT: rise over cut_frac 0.1 of 40 steps, then decay
    assert lrs[0] == pytest.approx(4e-3 * (1 + 0.25 * 31) / 32) and lrs[-1] < lrs[top] / 8
    first, last = sum(r["loss"] for r in logs[:8]) / 8, sum(r["loss"] for r in logs[-8:]) / 8
    assert last < first - 0.1, (first, last)  # the keyword task is learnt


def _logged_lrs(trainer) -> list[float]:
    return [r["learning_rate"] for r in trainer.state.log_history if "loss" in r]


def _ptmlab_lrs(schedule: str, total: int, lr: float, warmup: float = 0.0) -> list[float]:
    """The rate of each of ``total`` steps under ptmlab's own scheduler (what ``ptmlab finetune`` runs), as the
    Trainer logs it, and the rate it ends at."""
    from types import SimpleNamespace

    from ptmlab.train.optim import build_scheduler

    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    sched = build_scheduler(opt, schedule, total, SimpleNamespace(warmup=warmup, stlr_cut_frac=0.1, stlr_ratio=32))
    out = []
    for _ in range(total):
        out.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return out + [sched.get_last_lr()[0]]


def test_schedule_spans_the_trainers_max_steps_without_a_step_count(data, tmp_path):
    """An 8-step run: the linear schedule ends at 0 (1000 steps given by hand ended it at 0.000992 of 1e-3)."""
    ds, tok = data
    model = load_model("tiny", num_labels=2)
    args = _args(tmp_path, max_steps=8, learning_rate=1e-3)
    optimizer, scheduler = optimizer_and_scheduler(model, args, schedule="linear")
    trainer = Trainer(model=model, args=args, train_dataset=ds, data_collator=DataCollatorWithPadding(tok),
                      optimizers=(optimizer, scheduler))
    trainer.train()
    assert scheduler.total == 8
    assert _logged_lrs(trainer) == pytest.approx([1e-3 * (8 - k) / 8 for k in range(8)], abs=1e-12)
    assert scheduler.get_last_lr() == [0.0] * len(optimizer.param_groups)  # the end of the decay
    assert {g["lr"] for g in optimizer.param_groups} == {0.0}


@pytest.mark.parametrize("schedule,warmup_steps", [("stlr", 0), ("linear", 0.25), ("cosine", 2)])
def test_every_schedule_and_the_trainers_warmup_follow_max_steps(data, tmp_path, schedule, warmup_steps):
    ds, tok = data
    model = load_model("tiny", num_labels=2)
    args = _args(tmp_path, max_steps=8, learning_rate=1e-3, warmup_steps=warmup_steps)
    optimizer, scheduler = optimizer_and_scheduler(model, args, schedule=schedule)
    trainer = Trainer(model=model, args=args, train_dataset=ds, data_collator=DataCollatorWithPadding(tok),
                      optimizers=(optimizer, scheduler))
    trainer.train()
    warmup = 0.0 if schedule == "stlr" else 0.25  # 0.25 of the steps, or 2 of 8
    expected = _ptmlab_lrs(schedule, 8, 1e-3, warmup)
    assert _logged_lrs(trainer) + scheduler.get_last_lr()[:1] == pytest.approx(expected, abs=1e-12)


def test_an_epoch_run_reads_the_step_count_from_the_trainer_when_the_scheduler_is_a_callback(data, tmp_path):
    ds, tok = data
    model = load_model("tiny", num_labels=2)
    args = _args(tmp_path, num_train_epochs=1, learning_rate=1e-3)  # 256 rows / 16 = 16 steps
    optimizer, scheduler = optimizer_and_scheduler(model, args, schedule="stlr")
    assert scheduler.total is None
    trainer = Trainer(model=model, args=args, train_dataset=ds, data_collator=DataCollatorWithPadding(tok),
                      optimizers=(optimizer, scheduler), callbacks=[scheduler])
    trainer.train()
    assert trainer.state.max_steps == scheduler.total == 16
    lrs = _logged_lrs(trainer) + scheduler.get_last_lr()[:1]
    assert lrs == pytest.approx(_ptmlab_lrs("stlr", 16, 1e-3), abs=1e-12)
    assert lrs[-1] == pytest.approx(1e-3 / 32) and max(lrs) == pytest.approx(1e-3)  # STLR: back to lr / ratio


def test_an_unknown_step_count_stops_before_any_optimizer_step(data, tmp_path):
    from ptmlab.core.errors import PtmlabError

    ds, tok = data
    model = load_model("tiny", num_labels=2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = _args(tmp_path, num_train_epochs=1)
    optimizer, scheduler = optimizer_and_scheduler(model, args)
    trainer = Trainer(model=model, args=args, train_dataset=ds, data_collator=DataCollatorWithPadding(tok),
                      optimizers=(optimizer, scheduler))  # the scheduler is not in callbacks
    with pytest.raises(PtmlabError, match="callbacks"):
        trainer.train()
    assert all(torch.equal(before[n], p.cpu()) for n, p in model.named_parameters())


def test_a_step_count_that_disagrees_with_the_trainer_is_an_error(data, tmp_path):
    from ptmlab.core.errors import PtmlabError

    ds, tok = data
    model = load_model("tiny", num_labels=2)
    with pytest.raises(PtmlabError, match="num_training_steps=1000 .*max_steps=8"):
        optimizer_and_scheduler(model, _args(tmp_path, max_steps=8), 1000)
    args = _args(tmp_path, num_train_epochs=1)
    optimizer, scheduler = optimizer_and_scheduler(model, args, 1000)  # by hand, as before: kept
    assert scheduler.total == 1000
    trainer = Trainer(model=model, args=args, train_dataset=ds, data_collator=DataCollatorWithPadding(tok),
                      optimizers=(optimizer, scheduler), callbacks=[scheduler])
    with pytest.raises(PtmlabError, match="takes 16 optimizer steps"):
        trainer.train()


def test_the_schedule_survives_a_checkpoint_and_resume(data, tmp_path):
    """The Trainer saves the scheduler's state (torch.save, read back with weights_only) and resumes on it."""
    ds, tok = data
    torch.manual_seed(0)
    model = load_model("tiny", num_labels=2)
    args = _args(tmp_path, num_train_epochs=1, learning_rate=1e-3, save_strategy="steps", save_steps=6)
    optimizer, scheduler = optimizer_and_scheduler(model, args, schedule="linear")
    trainer = Trainer(model=model, args=args, train_dataset=ds, data_collator=DataCollatorWithPadding(tok),
                      optimizers=(optimizer, scheduler), callbacks=[scheduler])
    trainer.train()
    optimizer, scheduler = optimizer_and_scheduler(model, args, schedule="linear")
    again = Trainer(model=model, args=args, train_dataset=ds, data_collator=DataCollatorWithPadding(tok),
                    optimizers=(optimizer, scheduler), callbacks=[scheduler])
    again.train(resume_from_checkpoint=str(tmp_path / "checkpoint-12"))
    assert scheduler.total == 16
    resumed = _logged_lrs(again)[12:]  # the log history up to the checkpoint comes back with it
    assert resumed + scheduler.get_last_lr()[:1] == pytest.approx(_ptmlab_lrs("linear", 16, 1e-3)[12:], abs=1e-12)


def test_distillation_trainer_trains_a_student_towards_its_teacher(data, tmp_path):
    from ptmlab.distill.students import build_student

    ds, tok = data
    torch.manual_seed(0)
    teacher = load_model("tiny", num_labels=2)
    Trainer(model=teacher, args=_args(tmp_path / "t", max_steps=40), train_dataset=ds,
            data_collator=DataCollatorWithPadding(tok)).train()
    student = build_student("layers:1", teacher, 2, False, ["neg", "pos"])
    trainer = DistillationTrainer(model=student, args=_args(tmp_path / "s", max_steps=30), train_dataset=ds,
                                  data_collator=DataCollatorWithPadding(tok), teacher=teacher,
                                  losses=["soft_ce", "hidden_mse"], alpha=1.0)
    trainer.train()
    logs = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    assert len(logs) == 30 and sum(logs[-5:]) / 5 < 0.5 * sum(logs[:5]) / 5, logs

    @torch.no_grad()
    def predictions(model):
        batch = DataCollatorWithPadding(tok)([{k: ds[i][k] for k in ("input_ids", "attention_mask")}
                                              for i in range(128)])
        return model.eval()(**batch).logits.argmax(-1)

    assert (predictions(student) == predictions(teacher)).float().mean() > 0.9


def test_distillation_trainer_names_an_unknown_loss(data, tmp_path):
    from ptmlab.core.errors import PtmlabError

    ds, tok = data
    teacher = load_model("tiny", num_labels=2)
    with pytest.raises(PtmlabError, match="soft_kl"):
        DistillationTrainer(model=load_model("tiny", num_labels=2), args=_args(tmp_path), train_dataset=ds,
                            teacher=teacher, losses=["soft_kl"])


def test_distillation_trainer_distils_a_multi_label_teacher(data, tmp_path):
    """A multi-label teacher (sigmoid per class) is distilled with the binary objective, not softmax CE."""
    from ptmlab.core.errors import PtmlabError

    ds, tok = data
    rows = ds.map(lambda r: {"labels": [float(r["label"]), 1.0 - float(r["label"]), 1.0]}).remove_columns("label")
    torch.manual_seed(0)
    teacher = load_model("tiny", num_labels=3, multi_label=True)
    Trainer(model=teacher, args=_args(tmp_path / "t", max_steps=40), train_dataset=rows,
            data_collator=DataCollatorWithPadding(tok)).train()
    student = load_model("tiny", num_labels=3, multi_label=True)
    trainer = DistillationTrainer(model=student, args=_args(tmp_path / "s", max_steps=30), train_dataset=rows,
                                  data_collator=DataCollatorWithPadding(tok), teacher=teacher, alpha=1.0)
    assert trainer.objective.multi_label
    trainer.train()

    @torch.no_grad()
    def label_sets(model):
        batch = DataCollatorWithPadding(tok)([{k: ds[i][k] for k in ("input_ids", "attention_mask")}
                                              for i in range(128)])
        return model.eval()(**batch).logits.sigmoid() > 0.5

    assert (label_sets(student) == label_sets(teacher)).all(-1).float().mean() > 0.8
    with pytest.raises(PtmlabError, match="one multi-label, one single-label"):
        DistillationTrainer(model=load_model("tiny", num_labels=3), args=_args(tmp_path / "x"), train_dataset=rows,
                            teacher=teacher)
