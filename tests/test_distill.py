"""Distillation runs on `tiny`: loss goes down, teacher outputs are cached and reused, every student kind saves,
loads and evaluates, two-stage distillation with augmentation runs, bad inputs are clean errors, 2 processes run."""

import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from ptmlab.core.errors import PtmlabError
from ptmlab.data.encode import encode_split
from ptmlab.distill.config import DistillConfig
from ptmlab.distill.pipeline import run_distill
from tests.conftest import ROOT, assert_clean_error, kill_at_step, run_cli
from tests.synthetic import tiny_teacher, write_task


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("task"), n_train=64, n_dev=40)


@pytest.fixture(scope="module")
def teacher(files, tmp_path_factory):
    return tiny_teacher(files, tmp_path_factory.mktemp("teacher") / "run")


def cfg(files, teacher, out, **kw):
    base = dict(teacher=teacher, task="synthetic", train_file=files["train"], dev_file=files["dev"], max_length=32,
                lr=1e-3, batch_size=16, seed=0, output=str(out), precision="fp32", logging_steps=1)
    return DistillConfig(**{**base, **kw})


def eval_loss(files, teacher, student) -> float:
    """The distillation loss (soft_ce + hidden_mse + attention_kl, layer 0 <- 1) of a student over the training
    data, in eval mode (no dropout), from the cached teacher outputs."""
    from ptmlab.data.batching import collate
    from ptmlab.data.loaders import load_task
    from ptmlab.distill.cache import teacher_outputs
    from ptmlab.distill.matches import Match, ModelInfo
    from ptmlab.distill.objective import DistillObjective
    from ptmlab.distill.teacher import fingerprint
    from ptmlab.models.zoo import load_model, load_tokenizer

    t, tok = load_model(teacher), load_tokenizer(teacher)
    enc = encode_split(tok, load_task("synthetic", train_file=files["train"]).splits["train"], 32)
    matches = [Match("soft_ce", "logits"), Match("hidden_mse", "hidden", 0, 1),
               Match("attention_kl", "attention", 0, 1)]
    out = teacher_outputs(t, fingerprint(t), enc, 0, {m.key for m in matches[1:]})
    assert out.hit
    obj = DistillObjective(student, matches, out, ModelInfo.of(student), ModelInfo.of(t))
    student.eval()
    with torch.no_grad():
        return float(sum(obj(student, collate(enc, list(range(i, min(i + 32, len(enc)))), 0)).sum()
                         for i in range(0, len(enc), 32)) / len(enc))


def losses_logged(run):
    return [json.loads(x)["loss"] for x in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]


def test_layer_student_learns_and_reuses_cached_teacher_outputs(files, teacher, tmp_path):
    from ptmlab.distill.students import build_student
    from ptmlab.models.zoo import load_model

    a = run_distill(cfg(files, teacher, tmp_path / "a", student="layers:1",
                        losses=["soft_ce", "hidden_mse", "attention_kl"], epochs=3, lr=3e-3))
    assert a["teacher_cache"] == "computed" and a["teacher_batches_run"] == math.ceil(64 / 64)
    assert len(losses_logged(tmp_path / "a")) == 12
    before = build_student("layers:1", load_model(teacher), 2, False, ["neg", "pos"])
    assert eval_loss(files, teacher, load_model(str(tmp_path / "a"))) < 0.95 * eval_loss(files, teacher, before)
    assert set(a["final_losses"]) == {"soft_ce", "hidden_mse", "attention_kl"}
    assert a["layers"] == 1 and a["params"] < a["teacher_params"]
    # agreement is the share of dev examples where the saved student and the teacher predict the same label
    student = load_model(str(tmp_path / "a"))
    assert student.config.num_hidden_layers == 1
    saved = json.loads((tmp_path / "a" / "predictions_dev.json").read_text())
    preds, gold = saved["pred"], saved["gold"]
    teacher_preds = json.loads((ROOT / teacher / "predictions_dev.json").read_text())["pred"]
    same = sum(p == q for p, q in zip(preds, teacher_preds, strict=True))
    assert a["agreement_with_teacher"] == pytest.approx(same / 40, abs=1e-4)
    assert a["metrics"]["accuracy"] == pytest.approx(sum(p == g for p, g in zip(preds, gold, strict=True)) / 40)
    assert (tmp_path / "a" / "report.html").is_file() and not (tmp_path / "a" / "checkpoint").exists()

    b = run_distill(cfg(files, teacher, tmp_path / "b", student="layers:1",
                        losses=["soft_ce", "hidden_mse", "attention_kl"], epochs=3, lr=3e-3))
    assert b["teacher_cache"] == "hit" and b["teacher_batches_run"] == 0  # the teacher did not run again
    wa, wb = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)  # cached outputs give the very same training


@pytest.mark.parametrize("kind", ["bilstm:hidden=32", "cnn:filters=16"])
def test_non_transformer_students_save_load_and_evaluate(files, teacher, tmp_path, kind):
    from ptmlab.models.zoo import load_model

    s = run_distill(cfg(files, teacher, tmp_path / "s", student=kind, max_steps=8, lr=3e-3))
    assert load_model(str(tmp_path / "s")).config.ptmlab_rnn == kind.split(":")[0]
    r = run_cli("evaluate", str(tmp_path / "s"), "--task", "synthetic", "--train-file", files["train"],
                "--dev-file", files["dev"], "--max-length", "32")
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["metrics"]["accuracy"] == pytest.approx(s["metrics"]["accuracy"])
    with pytest.raises(PtmlabError, match="use --losses soft_ce"):
        run_distill(cfg(files, teacher, tmp_path / "bad", student=kind, losses=["hidden_mse"], max_steps=1))


def test_shrink_student_slices_the_teacher_head_by_head(teacher):
    from ptmlab.distill.students import build_student
    from ptmlab.models.zoo import load_model

    t = load_model(teacher)
    s = build_student("shrink:layers=1,hidden=32,heads=4,ffn=64", t, 2, False, ["neg", "pos"])
    assert (s.config.num_hidden_layers, s.config.hidden_size) == (1, 32)
    tq = t.bert.encoder.layer[0].attention.self.query.weight  # layer 0 of 2 is the evenly spaced choice
    rows = [h * 16 + j for h in range(4) for j in range(8)]  # the first 8 dims of each of the 4 teacher heads
    assert torch.equal(s.bert.encoder.layer[0].attention.self.query.weight, tq[rows][:, :32])
    assert torch.equal(s.bert.encoder.layer[0].attention.output.dense.weight,
                       t.bert.encoder.layer[0].attention.output.dense.weight[:32][:, rows])
    with pytest.raises(PtmlabError, match="at most the teacher's"):
        build_student("shrink:hidden=128,heads=4", t, 2, False, None)


def test_shrink_student_with_projected_losses_and_declared_matches(files, teacher, tmp_path):
    from ptmlab.models.zoo import load_model

    matches = [{"loss": "soft_ce"}, {"loss": "hidden_mse", "student": 0, "teacher": 1, "weight": 0.5},
               {"loss": "hidden_mse", "feature": "embeddings", "weight": 0.1},
               {"loss": "pkd", "student": 0, "teacher": 0}, {"loss": "minilm", "feature": "vv_relation",
                                                             "student": 0, "teacher": 1}]
    s = run_distill(cfg(files, teacher, tmp_path / "s", student="shrink:layers=1,hidden=32,heads=2,ffn=64",
                        matches=matches, relation_heads=4, max_steps=3))
    assert [m["loss"] for m in s["matches"]] == ["soft_ce", "hidden_mse", "hidden_mse", "pkd", "minilm"]
    assert load_model(str(tmp_path / "s")).config.hidden_size == 32


def test_two_stage_distillation_with_augmentation(files, teacher, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("\n\n".join(f"paragraph {i}: the story of the film and its music was quite something to see "
                                f"and the actors were really there for it" for i in range(40)))
    s = run_distill(cfg(files, teacher, tmp_path / "s", student="layers:1", losses=["soft_ce", "hidden_mse"],
                        general_text=str(text), general_examples=32, general_epochs=1, intermediate_epochs=1,
                        augment=1, epochs=1))
    assert [st["stage"] for st in s["stages"]] == ["general", "intermediate"]
    assert s["stages"][0]["examples"] == 32 and s["train_examples"] == 2 * 64
    assert set(s["stages"][1]["losses"]) == {"hidden_mse"} and set(s["final_losses"]) == {"soft_ce"}
    assert (tmp_path / "s" / "stages" / "general" / "metrics.jsonl").is_file()


def test_augmented_copies_replace_words_with_embedding_neighbours(teacher):
    from ptmlab.data.encode import Encoded
    from ptmlab.distill.augment import augment, neighbours
    from ptmlab.models.zoo import load_model, load_tokenizer

    t, tok = load_model(teacher), load_tokenizer(teacher)
    ids = tok(["the film was great fun"])["input_ids"]
    out = augment(Encoded(ids, None, [1]), t, tok, copies=2, prob=1.0, seed=0)
    assert len(out) == 3 and out.labels == [1, 1, 1] and out.input_ids[0] == ids[0]
    near = neighbours(t, tok, ids[0][1:-1])
    for copy in out.input_ids[1:]:
        assert copy[0] == ids[0][0] and copy[-1] == ids[0][-1]  # [CLS] and [SEP] stay
        assert all(c in near[o] for c, o in zip(copy[1:-1], ids[0][1:-1], strict=True))


def test_bad_inputs_are_clean_errors(files, teacher, tmp_path):
    three = {}
    for split in ("train", "dev"):  # a three-label task: the two-label teacher does not fit it
        three[split] = str(tmp_path / f"three_{split}.csv")
        rows = [f"the film number {i} was fine,{('pos', 'neg', 'maybe')[i % 3]}" for i in range(30)]
        open(three[split], "w").write("text,label\n" + "\n".join(rows) + "\n")
    assert_clean_error(run_cli("distill", "--teacher", teacher, "--task", "synthetic", "--train-file", three["train"],
                               "--dev-file", three["dev"], "--output", str(tmp_path / "x")), "teacher", "outputs")
    empty = tmp_path / "empty_run"
    empty.mkdir()
    shutil.copy(os.path.join(teacher, "config.yaml"), empty / "config.yaml")
    assert_clean_error(run_cli("distill", "--teacher", str(empty), "--task", "synthetic", "--train-file",
                               files["train"], "--output", str(tmp_path / "y")), "no model weights")
    with pytest.raises(PtmlabError, match="teacher layer 5"):
        run_distill(cfg(files, teacher, tmp_path / "z", student="layers:1", losses=["hidden_mse"], layer_map="0:5"))
    with pytest.raises(PtmlabError, match="2 heads and the teacher 4"):
        run_distill(cfg(files, teacher, tmp_path / "z", student="shrink:heads=2", losses=["attention_kl"]))
    with pytest.raises(PtmlabError, match="asks for 3 layers"):
        run_distill(cfg(files, teacher, tmp_path / "z", student="layers:3"))
    assert not (tmp_path / "z").exists()  # nothing is written before the inputs are checked


def test_two_process_distillation(files, teacher, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PTMLAB_DEBUG", None)
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                        "29533", "-m", "ptmlab", "distill", "--teacher", teacher, "--student", "layers:1", "--losses",
                        "soft_ce,hidden_mse", "--task", "synthetic", "--train-file", files["train"], "--dev-file",
                        files["dev"], "--max-length", "32", "--batch-size", "16", "--max-steps", "4",
                        "--output", str(tmp_path / "ddp")], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads((tmp_path / "ddp" / "summary.json").read_text())
    assert s["world_size"] == 2 and s["steps"] == 4 and 0 <= s["agreement_with_teacher"] <= 1


def test_killed_two_stage_distillation_resumes_to_the_same_student(files, teacher, tmp_path):
    """SIGKILL during the final stage, then `distill --resume`: the student equals an uninterrupted run's."""
    def args(out):
        return ["distill", "--teacher", teacher, "--student", "layers:1", "--losses", "soft_ce,hidden_mse",
                "--intermediate-epochs", "1", "--task", "synthetic", "--train-file", files["train"], "--dev-file",
                files["dev"], "--max-length", "32", "--batch-size", "4", "--max-steps", "120", "--save-steps", "4",
                "--precision", "fp32", "--seed", "0", "--output", str(out)]

    assert run_cli(*args(tmp_path / "ref")).returncode == 0
    kill_at_step(args(tmp_path / "killed"), tmp_path / "killed", 12)
    r = run_cli("distill", "--resume", str(tmp_path / "killed"))
    assert r.returncode == 0, r.stderr[-2000:]
    a, b = load_file(tmp_path / "ref" / "model.safetensors"), load_file(tmp_path / "killed" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    s = json.loads((tmp_path / "killed" / "summary.json").read_text())
    assert s["steps"] == 120 and s["stages"] == [{"stage": "intermediate", "ran_before_resume": True}]
    assert_clean_error(run_cli("finetune", "--resume", str(tmp_path / "killed")), "distill --resume")
    assert_clean_error(run_cli("distill", "--resume", str(tmp_path / "nothing")), "not a ptmlab run directory")
