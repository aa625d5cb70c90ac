"""Multi-task fine-tuning and distillation: task-homogeneous sampled batches, one head per task
that reloads from the run directory, per-task evaluation, a multi-task student, bad inputs, and the ``multitask``
study's rule and small budget."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
import torch

from ptmlab.core.config import build_config
from ptmlab.core.errors import PtmlabError
from ptmlab.data.encode import Encoded
from ptmlab.data.multitask import MultiTaskSource, allocate, parse_tasks, task_probabilities
from tests.conftest import assert_clean_error, needs_glue, run_cli

# fp32 everywhere: a distilled teacher's outputs are computed in fp32, and "auto" means bf16 on CPUs with AMX
SMALL = dict(model="tiny", max_train=48, max_eval=24, max_length=32, batch_size=16, epochs=1.0, eval_batch_size=64,
             seed=3, precision="fp32")


def _enc(n: int, label: int = 0) -> Encoded:
    return Encoded([[101, 7 + i % 5, 102] for i in range(n)], None, [label] * n)


# ------------------------------------------------------------------------------------------ data: sampled batches
def test_parse_tasks_rejects_unknown_duplicate_and_single():
    assert parse_tasks("sst2, mrpc,rte") == ["sst2", "mrpc", "rte"]
    with pytest.raises(PtmlabError, match="unknown task 'sst3'"):
        parse_tasks("sst2,sst3")
    with pytest.raises(PtmlabError, match="repeats mrpc"):
        parse_tasks(["mrpc", "rte", "mrpc"])
    with pytest.raises(PtmlabError, match="two or more"):
        parse_tasks("rte")


def test_sampling_probabilities_and_allocation():
    assert task_probabilities([300, 100], "proportional") == pytest.approx([0.75, 0.25])
    assert task_probabilities([300, 100], "uniform") == pytest.approx([0.5, 0.5])
    assert task_probabilities([400, 100], "sqrt") == pytest.approx([2 / 3, 1 / 3])
    with pytest.raises(PtmlabError, match="--task-sampling 'random'"):
        task_probabilities([1, 2], "random")
    assert allocate(10, [0.75, 0.25]) == [8, 2]  # 7.5 / 2.5: largest remainder, ties to the first
    assert allocate(10, [0.99, 0.01]) == [9, 1]  # every task at least one batch when there is room


@pytest.mark.parametrize("sampling,expected", [("proportional", {0: 12, 1: 4}), ("uniform", {0: 8, 1: 8})])
def test_batches_hold_one_task_and_follow_the_sampling(sampling, expected):
    src = MultiTaskSource({"a": _enc(150, 0), "b": _enc(50, 1)}, pad_id=0, sampling=sampling)
    assert len(src) == 200 and len(src.lengths) == 200
    batches = src.plan_batches(batch_size=13, seed=5, epoch=0)
    assert len(batches) == math.ceil(200 / 13)
    tasks = Counter()
    for b in batches:
        k = {src.locate(i)[0] for i in b}
        assert len(k) == 1  # task-homogeneous
        tasks[k.pop()] += 1
        batch = src.make_batch(b, 0)
        assert batch["task_id"].unique().tolist() == [src.locate(b[0])[0]]
        assert batch["index"].max() < len(src.encs[src.tasks[src.locate(b[0])[0]]])  # task-local indices
    assert dict(tasks) == expected
    assert src.plan_batches(13, 5, 0) == batches  # a pure function of (seed, epoch): resumable
    assert src.plan_batches(13, 5, 1) != batches


def test_a_task_smaller_than_a_batch_is_cycled_not_padded():
    src = MultiTaskSource({"a": _enc(40), "b": _enc(5)}, pad_id=0, sampling="uniform")
    for b in src.plan_batches(16, 0, 0):
        assert len(b) == len(set(b))  # no example twice in one batch
        assert len(b) == (16 if src.locate(b[0])[0] == 0 else 5)


# ------------------------------------------------------------------------------------------ model: one head per task
def test_task_heads_save_and_reload_every_head(tmp_path):
    from ptmlab.models.loader import save_model
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.multitask import add_task_heads, model_tasks, recorded_tasks, set_task

    torch.manual_seed(0)
    model = load_model("tiny", num_labels=3)
    add_task_heads(model, [{"name": "tweets", "kind": "classification", "num_labels": 3, "labels": None},
                           {"name": "stsb", "kind": "regression", "num_labels": 1, "labels": None}])
    save_model(model, load_tokenizer("tiny"), tmp_path)
    assert [t["name"] for t in recorded_tasks(str(tmp_path))] == ["tweets", "stsb"]
    again = load_model(str(tmp_path))
    x = {"input_ids": torch.tensor([[101, 2023, 2003, 102]]), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    model.eval()
    for task, width in (("tweets", 3), ("stsb", 1)):
        set_task(model, task)
        set_task(again, task)
        a, b = model(**x).logits, again(**x).logits
        assert a.shape == (1, width)
        assert torch.allclose(a, b, atol=1e-6)
    assert [t["kind"] for t in model_tasks(again)] == ["classification", "regression"]
    with pytest.raises(PtmlabError, match="no head for task 'rte'"):
        set_task(again, "rte")
    with pytest.raises(PtmlabError, match="already has one head per task"):
        add_task_heads(again, [{"name": "rte", "kind": "classification", "num_labels": 2, "labels": None}])


# ------------------------------------------------------------------------------------------ end to end (GLUE subsets)
@pytest.fixture(scope="module")
def mt_run(tmp_path_factory):
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    out = tmp_path_factory.mktemp("mt") / "run"
    cfg = build_config(FinetuneConfig, {**SMALL, "tasks": ["tweets", "mrpc", "stsb"], "output": str(out)})
    return out, run_finetune(cfg)


@needs_glue
def test_multitask_finetune_writes_per_task_metrics(mt_run):
    out, s = mt_run
    assert s["tasks"] == ["tweets", "mrpc", "stsb"] and s["main_metric"] == "task_mean"
    per = s["task_metrics"]
    assert set(per) == {"tweets", "mrpc", "stsb"} and "pearson" in per["stsb"] and "f1" in per["mrpc"]
    mean = (per["tweets"]["accuracy"] + per["mrpc"]["f1"] + per["stsb"]["pearson"]) / 3
    assert s["metrics"]["task_mean"] == pytest.approx(mean)
    assert s["train_examples"] == 3 * 48 and s["steps"] == math.ceil(3 * 48 / 16)
    evals = [r["eval"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "eval" in r]
    assert evals and "mrpc/f1" in evals[-1] and "stsb/pearson" in evals[-1]
    preds = json.loads((out / "predictions_dev_stsb.json").read_text())
    assert preds["kind"] == "regression" and len(preds["pred"]) == 24


@needs_glue
def test_evaluate_scores_each_task_with_its_head(mt_run, tmp_path):
    out, s = mt_run
    one = run_cli("evaluate", str(out), "--task", "mrpc", "--max-eval", "24", "--max-length", "32", "--seed", "3",
                  "--precision", "fp32", "--output", str(tmp_path / "mrpc.json"))
    assert one.returncode == 0, one.stderr[-2000:]
    r = json.loads((tmp_path / "mrpc.json").read_text())
    assert r["task"] == "mrpc" and r["metrics"]["f1"] == pytest.approx(s["task_metrics"]["mrpc"]["f1"])
    from ptmlab.commands.evaluate import EvaluateConfig
    from ptmlab.train.multitask import evaluate_tasks

    cfg = build_config(EvaluateConfig, {"max_eval": 24, "max_length": 32, "seed": 3, "precision": "fp32"})
    every = evaluate_tasks(str(out), cfg, None)
    assert set(every["tasks"]) == {"tweets", "mrpc", "stsb"}
    for t in every["tasks"]:
        assert every["tasks"][t]["metrics"] == pytest.approx(s["task_metrics"][t])
    with pytest.raises(PtmlabError, match="no head for task 'rte': its heads are tweets, mrpc, stsb"):
        evaluate_tasks(str(out), cfg, ["rte"])


@needs_glue
def test_distill_multitask_teacher_and_single_teachers_into_one_student(mt_run, tmp_path):
    from ptmlab.distill.config import DistillConfig
    from ptmlab.distill.pipeline import run_distill
    from ptmlab.models.zoo import load_model
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune
    from ptmlab.train.multitask import model_tasks

    out, teacher = mt_run
    base = {k: v for k, v in SMALL.items() if k != "model"}
    s = run_distill(build_config(DistillConfig, {**base, "teacher": str(out), "student": "layers:1",
                                                 "output": str(tmp_path / "student")}))
    assert s["tasks"] == ["tweets", "mrpc", "stsb"] and s["layers"] == 1 and s["teacher_layers"] == 2
    assert s["params"] < teacher["params"]
    assert set(s["task_metrics"]) == {"tweets", "mrpc", "stsb"}
    assert s["teacher_metrics"]["task_mean"] == pytest.approx(teacher["metrics"]["task_mean"])
    assert 0 <= s["metrics"]["tweets/agreement_with_teacher"] <= 1
    student = load_model(str(tmp_path / "student"))
    assert [t["name"] for t in model_tasks(student)] == ["tweets", "mrpc", "stsb"]

    single = tmp_path / "rte-teacher"
    run_finetune(build_config(FinetuneConfig, {**SMALL, "task": "rte", "output": str(single)}))
    s2 = run_distill(build_config(DistillConfig, {**base, "teacher": f"tweets={out},rte={single}",
                                                  "student": "layers:1", "output": str(tmp_path / "student2")}))
    assert s2["tasks"] == ["tweets", "rte"] and s2["teachers"]["rte"] == str(single)
    assert s2["teacher_params"] > teacher["params"]  # two teachers
    assert [t["name"] for t in model_tasks(load_model(str(tmp_path / "student2")))] == ["tweets", "rte"]
    with pytest.raises(PtmlabError, match="no head for task 'rte'"):
        run_distill(build_config(DistillConfig, {**base, "teacher": str(out), "tasks": ["tweets", "rte"],
                                                 "output": str(tmp_path / "s3")}))
    with pytest.raises(PtmlabError, match="--losses soft_ce"):
        run_distill(build_config(DistillConfig, {**base, "teacher": str(out), "student": "layers:1",
                                                 "losses": ["soft_ce", "hidden_mse"], "output": str(tmp_path / "s4")}))


@needs_glue
def test_multitask_run_resumes_exactly_after_a_kill(tmp_path):
    """Killed mid-run and resumed: the same kept step, metrics and weights as an uninterrupted run (a best step from
    before the kill is evaluated again after the resume)."""
    from safetensors.torch import load_file

    from ptmlab.core.rundir import RunDir
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune
    from tests.conftest import kill_at_step

    opts = {**SMALL, "tasks": ["tweets", "mrpc", "stsb"], "max_train": 32, "max_eval": 16, "batch_size": 8,
            "eval_steps": 4, "save_steps": 4, "seed": 1}
    flags = [f"--{k.replace('_', '-')}={','.join(v) if isinstance(v, list) else v}" for k, v in opts.items()]
    kill_at_step(["finetune", *flags, "--output", str(tmp_path / "a")], tmp_path / "a", 8)
    resumed = run_finetune(RunDir.resume_config(str(tmp_path / "a"), FinetuneConfig, "finetune"), resume=True)
    whole = run_finetune(build_config(FinetuneConfig, {**opts, "output": str(tmp_path / "b")}))
    assert resumed["metrics"] == pytest.approx(whole["metrics"]) and resumed["best_step"] == whole["best_step"]
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert set(a) == set(b) and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_finetune_bad_tasks_are_one_line_errors(tmp_path):
    proc = run_cli("finetune", "--model", "tiny", "--tasks", "sst2,nope", "--output", str(tmp_path / "x"))
    assert_clean_error(proc, "unknown task 'nope'")
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------------------ the study
def test_multitask_decide_has_three_outcomes():
    from ptmlab.studies.multitask import decide

    single = {"mrpc": [0.70, 0.72, 0.71], "rte": [0.55, 0.56, 0.54]}
    better = {"mrpc": [0.74, 0.75, 0.75], "rte": [0.58, 0.60, 0.57]}
    worse = {"mrpc": [0.66, 0.67, 0.66], "rte": [0.51, 0.52, 0.50]}
    mixed = {"mrpc": [0.80, 0.65, 0.71], "rte": [0.55, 0.50, 0.60]}
    assert decide(single, better).outcome == "supported"
    assert decide(single, worse).outcome == "not supported"
    assert decide(single, mixed).outcome == "inconclusive"
    assert decide({"rte": [0.5]}, {"rte": [0.9]}).outcome == "inconclusive"  # one seed: no interval


@needs_glue
def test_multitask_study_small_budget(tmp_path):
    from ptmlab.studies.multitask import run

    assert run(["--budget", "small", "--output", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    assert [r["task"] for r in res["rows"]] == ["tweets", "mrpc", "rte"]
    assert res["claim"]["study"] == "multitask" and res["rule"]["outcome"] == "inconclusive"  # one seed
    assert res["outcome"] == "cannot test" and any(c["value"] is None for c in res["validity"])
    mt = json.loads((tmp_path / "multitask" / "summary.json").read_text())
    for row in res["rows"]:
        assert row["multi"] == pytest.approx(mt["task_metrics"][row["task"]][row["metric"]])


@pytest.mark.parametrize("name", ["multitask", "ticket_sharing"])
def test_study_states_its_claim_and_rule_in_its_docstring(name):
    import importlib

    from ptmlab.studies import load_all

    studies = load_all()
    mod = importlib.import_module(f"ptmlab.studies.{name}")
    rule = " ".join(mod.CLAIM.rule.split())
    assert mod.CLAIM.study in studies.names() and mod.CLAIM.paper
    assert rule in " ".join(mod.__doc__.split())
    assert all(w in rule for w in ("supported", "not supported", "inconclusive"))
