"""A static-embedding student trains at 3e-3 unless --lr is given, and takes a task with another class count than
the head it was built with (a fresh head for the new classes)."""

from __future__ import annotations

import pytest
import yaml

from tests.synthetic import write_task


@pytest.fixture(scope="module")
def static_dir(tmp_path_factory):
    from ptmlab.distill.static import distill_static

    out = tmp_path_factory.mktemp("static") / "student"
    distill_static("tiny", output=str(out), dim=16, ids=list(range(1000, 1600)), num_labels=2)
    return str(out)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("static-task"), n_train=40, n_dev=20)


def _finetune(static_dir, train, dev, out, **kw):
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    cfg = FinetuneConfig(model=static_dir, task="t", train_file=train, dev_file=dev, max_steps=2, max_length=32,
                         test=False, output=str(out), **kw)
    return run_finetune(cfg), yaml.safe_load((out / "config.yaml").read_text())


def test_static_student_default_lr_and_explicit_lr(static_dir, files, tmp_path):
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import STATIC_STUDENT_LR, static_student_lr

    _, config = _finetune(static_dir, files["train"], files["dev"], tmp_path / "default")
    assert STATIC_STUDENT_LR == 3e-3 and config["lr"] == 3e-3
    _, config = _finetune(static_dir, files["train"], files["dev"], tmp_path / "explicit", lr=1e-3)
    assert config["lr"] == 1e-3

    class Plain:  # a transformer student: the default stays
        config = object()

    cfg = FinetuneConfig(model="tiny")
    assert static_student_lr(cfg, Plain()).lr == 5e-5


def test_static_student_takes_another_class_count(static_dir, tmp_path):
    from ptmlab.models.zoo import load_model

    rows = ["text,label"] + [f"{w} words here,{c}" for w in ("good", "bad", "odd", "nice", "mean", "fair") * 5
                             for c in ("a", "b", "c")][:60]
    train, dev = tmp_path / "train.csv", tmp_path / "dev.csv"
    train.write_text("\n".join(rows) + "\n")
    dev.write_text("\n".join(rows[:1] + rows[1:16]) + "\n")
    summary, _ = _finetune(static_dir, str(train), str(dev), tmp_path / "three")
    assert summary["labels"] == ["a", "b", "c"]
    model = load_model(str(tmp_path / "three"))
    assert tuple(model.classifier.weight.shape) == (3, 16)
    two = load_model(static_dir)
    # the table is the distilled one, carried over; only the head is new
    assert model.bert.counted.sum() == two.bert.counted.sum()
