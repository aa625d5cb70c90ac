"""MobileBERT-style students (``mobile:LAYERS[xBOTTLENECK]``) on `tiny`: sized against the teacher, forward and
backward run, layer-by-layer distillation through the bottleneck lowers the loss, the run directory reloads and
evaluates, and a student that is not smaller than its teacher is a one-line error."""

import json

import pytest
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.distill.config import DistillConfig
from ptmlab.distill.pipeline import run_distill
from tests.conftest import assert_clean_error, run_cli
from tests.synthetic import tiny_teacher, write_task

LOSSES = ["soft_ce", "hidden_mse", "attention_mse"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("task"), n_train=64, n_dev=40)


@pytest.fixture(scope="module")
def teacher(files, tmp_path_factory):
    return tiny_teacher(files, tmp_path_factory.mktemp("teacher") / "run")


def cfg(files, teacher, out, **kw):
    base = dict(teacher=teacher, task="synthetic", train_file=files["train"], dev_file=files["dev"], max_length=32,
                lr=3e-3, batch_size=16, seed=0, output=str(out), precision="fp32", logging_steps=1,
                student="mobile:2x16", losses=LOSSES, layer_map="uniform")
    return DistillConfig(**{**base, **kw})


def test_mobile_student_is_a_bottleneck_mobilebert_sized_by_the_teacher(teacher):
    from ptmlab.distill.students import build_student
    from ptmlab.models.structure import structure_of
    from ptmlab.models.zoo import load_model

    t = load_model(teacher)
    s = build_student("mobile:2x16", t, 2, False, ["neg", "pos"])
    c = s.config
    assert c.model_type == "mobilebert" and structure_of(s).family == "mobilebert"
    assert (c.hidden_size, c.intra_bottleneck_size, c.num_attention_heads, c.num_hidden_layers) == (64, 16, 4, 2)
    assert c.num_feedforward_networks == 4 and c.intermediate_size == 64
    assert sum(p.numel() for p in s.parameters()) < sum(p.numel() for p in t.parameters())
    # default bottleneck: a quarter of the teacher's width, a multiple of its heads
    assert build_student("mobile:1", t, 2, False, None).config.intra_bottleneck_size == 16
    # position embeddings have the teacher's width and start from the teacher's
    assert torch.equal(s.mobilebert.embeddings.position_embeddings.weight, t.bert.embeddings.position_embeddings.weight)
    # forward and backward: layer outputs keep the teacher's width, every weight gets a gradient
    ids = torch.randint(5, 1000, (3, 7))
    out = s(input_ids=ids, attention_mask=torch.ones_like(ids), labels=torch.tensor([0, 1, 0]),
            output_hidden_states=True)
    assert out.logits.shape == (3, 2) and out.hidden_states[-1].shape == (3, 7, 64)
    out.loss.backward()
    assert s.mobilebert.encoder.layer[1].bottleneck.input.dense.weight.grad.abs().sum() > 0
    assert structure_of(s).part(s, 0, "query").out_features == 16  # attention runs inside the bottleneck


def test_mobile_student_distils_layer_by_layer_and_reloads(files, teacher, tmp_path):
    from ptmlab.models.zoo import load_model

    s = run_distill(cfg(files, teacher, tmp_path / "s", max_steps=16))
    assert s["layers"] == 2 and s["params"] < s["teacher_params"]
    assert {m["loss"] for m in s["matches"]} == set(LOSSES)
    assert {(m["student"], m["teacher"]) for m in s["matches"] if m["feature"] == "hidden"} == {(0, 0), (1, 1)}
    losses = [json.loads(x)["loss"] for x in (tmp_path / "s" / "metrics.jsonl").read_text().splitlines()
              if '"loss"' in x]
    assert len(losses) >= 8 and sum(losses[-4:]) / 4 < 0.9 * sum(losses[:4]) / 4
    m = load_model(str(tmp_path / "s"))
    assert m.config.model_type == "mobilebert" and m.config.intra_bottleneck_size == 16
    r = run_cli("evaluate", str(tmp_path / "s"), "--task", "synthetic", "--train-file", files["train"],
                "--dev-file", files["dev"], "--max-length", "32")
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["metrics"]["accuracy"] == pytest.approx(s["metrics"]["accuracy"])


def test_a_mobile_student_not_smaller_than_its_teacher_is_refused(files, teacher, tmp_path):
    from ptmlab.distill.students import build_student
    from ptmlab.models.zoo import load_model

    t = load_model(teacher)
    for spec, needle in [("mobile:3", "teacher has 2"), ("mobile:2x64", "narrower"), ("mobile:2x18", "divisible"),
                         ("mobile:two", "mobile:LAYERS")]:
        with pytest.raises(PtmlabError, match=needle):
            build_student(spec, t, 2, False, None)
    assert_clean_error(run_cli("distill", "--teacher", teacher, "--student", "mobile:4", "--task", "synthetic",
                               "--train-file", files["train"], "--dev-file", files["dev"], "--output",
                               str(tmp_path / "x")), "mobile:4", "no deeper")
