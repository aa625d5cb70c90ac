"""``ptmlab optimize`` on the tiny model and the synthetic task: the search (cheap trials first, a student trained
only where it can still win, the pruner), resuming a search without redoing its trials, the held-out report, the
winner exported so that ``ptmlab predict`` and ``ptmlab serve`` load it, and bad input (one line, exit 2, nothing
written)."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import optuna
import pytest

from ptmlab.core.errors import PtmlabError
from tests.conftest import assert_clean_error, run_cli
from tests.synthetic import tiny_teacher, write_task

FAST = dict(batch=["1", "8"], latency_texts=8, latency_rounds=2, search_rounds=1, calibration_examples=16,
            epochs=1.0, batch_size=16, lr=3e-3, eval_batch_size=64, budget="1800s")  # ends when all is decided


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    d = tmp_path_factory.mktemp("optimize")
    files = write_task(d / "data", n_train=160, n_dev=80)
    return tiny_teacher(files, d / "teacher")


@pytest.fixture(scope="module")
def searched(teacher, tmp_path_factory):
    """A search stopped after its first two trials, then resumed to the end (objective size: the estimates are
    parameter counts, so which trials run does not depend on timing noise)."""
    import ptmlab

    out = tmp_path_factory.mktemp("search") / "out"
    opts = dict(FAST, structures=["source", "layers:1"], backends=["torch-fp32", "onnx-int8"], objective="size",
                max_loss=40, output=str(out))
    ptmlab.optimize(teacher, trials=2, **opts)
    first = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    first_summary = json.loads((out / "summary.json").read_text())
    # a third trial was running when the process was killed: it stays RUNNING in the study
    study = optuna.load_study(study_name="ptmlab-optimize", storage=f"sqlite:///{out / 'study.db'}")
    study.enqueue_trial({"structure": "layers:1", "backend": "onnx-int8"})
    killed = study.ask()
    killed.suggest_categorical("structure", ["source", "layers:1"])
    killed.suggest_categorical("backend", ["torch-fp32", "onnx-int8"])
    run = ptmlab.optimize(teacher, resume=True, output=str(out), budget="1800s")
    return out, first, first_summary, run


def test_a_resumed_search_keeps_its_trials_and_finishes(searched):
    out, first, first_summary, run = searched
    assert [(r["structure"], r["backend"]) for r in first] == [("source", "torch-fp32"), ("source", "onnx-int8")]
    assert first_summary["search"]["trials"] == 2
    rows = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    assert rows[:2] == first  # the second call appended: the first two trials were not run again
    pairs = [(r["structure"], r["backend"]) for r in rows]
    assert len(pairs) == len(set(pairs)) == 4  # every pair decided once
    study = optuna.load_study(study_name="ptmlab-optimize", storage=f"sqlite:///{out / 'study.db'}")
    failed = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert [t.params for t in failed] == [{"structure": "layers:1", "backend": "onnx-int8"}]  # the killed one
    decided = [t for t in study.trials
               if "duplicate_of" not in t.user_attrs and t.state != optuna.trial.TrialState.FAIL]
    assert len(decided) == 4  # ... was run again on resume, once
    summary = run.summary
    assert summary["search"]["trials"] == 4 and summary["search"]["candidates"] == 4


def test_the_student_trains_only_where_it_can_win(searched):
    out, _, _, run = searched
    rows = {(r["structure"], r["backend"]): r for r in run.summary["trials"]}
    # on int8 the 1-layer student can be smaller than anything so far: trained, then measured
    student = rows[("layers:1", "onnx-int8")]
    assert student["status"] == "complete", student
    assert (out / "structures" / "layers-1" / "summary.json").is_file()
    # in fp32 it cannot beat the int8 run itself: stopped by the pruner before anything was spent on it
    fp32 = rows[("layers:1", "torch-fp32")]
    assert fp32["status"] == "pruned" and "cannot beat" in fp32["reason"], fp32
    for r in rows.values():
        if r["status"] == "complete":
            assert 0 <= r["agreement"] <= 1 and r["size_mb"] > 0 and r["latency_b8_ms"] > 0
            assert set(r["ratios"]) == {"1", "8"}
    assert run.summary["source"]["size_mb"] > run.summary["winner"]["size_mb"]


def test_outputs_winner_card_report_and_held_out(searched):
    out, _, _, run = searched
    s = run.summary
    w = s["winner"]
    assert w["backend"] == "onnx-int8" and w["loss_points"] <= 40 and s["target_met"]
    assert (out / "model.onnx").is_file() and (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    held = s["held_out"]
    assert held["examples"] == 40 and s["search_part"]["examples"] == 40  # half of the 80 dev rows set aside
    assert "set aside" in held["part"] and held["within_max_loss"] == (held["loss_points"] <= 40)
    assert "accuracy" in held["winner"] and s["main_metric"] == "accuracy"
    machine = s["machine"]
    assert machine["threads"] >= 1 and isinstance(machine["cpu_features"], list)
    card = (out / "README.md").read_text()
    assert "Recipe found by ptmlab optimize" in card and "onnx-int8" in card and "Held-out part" in card
    html = (out / "report.html").read_text()
    assert "Every trial" in html and "data:image/png" in html and "layers:1" in html
    parity = json.loads((out / "parity.json").read_text())
    assert parity["examples"] == 40 and parity["held_out"]["examples"] == 40


def test_predict_and_serve_load_the_onnx_winner(searched, store):
    from fastapi.testclient import TestClient

    import ptmlab
    from ptmlab.models.onnx import OrtModel
    from ptmlab.models.zoo import load_model
    from ptmlab.serve.app import create_app
    from ptmlab.serve.config import ServeConfig

    out = searched[0]
    assert isinstance(load_model(str(out)), OrtModel)
    preds = ptmlab.predict(out, ["the film was excellent", "awful and boring"])
    assert len(preds) == 2 and all(p["label"] in ("neg", "pos") for p in preds)
    key = store.create_key("opt", rate=1000, burst=1000)
    with TestClient(create_app(str(out), ServeConfig(detector=False, precision="fp32"), store)) as client:
        r = client.post("/v1/predict", json={"texts": ["a really superb story"]},
                        headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    assert len(r.json()["predictions"]) == 1
    with pytest.raises(PtmlabError, match="ONNX model"):
        load_model(str(out), num_labels=3)  # an ONNX export runs as it is: no new head


def test_a_pytorch_winner_is_a_transformers_directory(teacher, tmp_path):
    import ptmlab

    out = tmp_path / "torch"
    run = ptmlab.optimize(teacher, max_loss=1, output=str(out), structures=["source", "vocab"],
                          backends=["torch-fp32"], **FAST)
    s = run.summary
    assert not [r for r in s["trials"] if r["status"] == "failed"], s["trials"]
    assert (out / "structures" / "vocab" / "model.safetensors").is_file()  # the pruned vocabulary was made
    assert s["winner"]["backend"] == "torch-fp32" and (out / "model.safetensors").is_file()
    assert not (out / "model.onnx").exists()
    if not s["target_met"]:  # the run itself on fp32: no faster candidate, and the report says so
        assert "Target not met" in (out / "report.html").read_text()
    preds = ptmlab.predict(out, ["the film was excellent"])
    assert preds[0]["label"] in ("neg", "pos")


def test_a_labelled_test_split_is_the_held_out_part(teacher, tmp_path):
    import ptmlab

    run = tmp_path / "with-test"
    shutil.copytree(teacher, run)
    files = write_task(tmp_path / "data", n_train=10, n_dev=30, seed=5)  # its dev file serves as a test file
    config = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(config.replace("test_file: null", f"test_file: {files['dev']}"))
    s = ptmlab.optimize(run, max_loss=5, output=str(tmp_path / "out"), structures=["source"], backends=["onnx"],
                        **FAST).summary
    assert s["held_out"]["part"] == "test split" and s["held_out"]["examples"] == 30
    assert s["search_part"]["examples"] == 80  # all of dev chooses
    assert s["test_metrics"] == s["held_out"]["winner"]


def test_the_report_says_when_the_held_out_loss_is_outside_the_budget():
    from ptmlab.optimize.report import _lines

    ctx = SimpleNamespace(cfg=SimpleNamespace(max_loss=1.0, objective="latency"), spec=SimpleNamespace(
        main_metric="accuracy"), source_score=0.8, batches=(1, 32), describe_value=lambda v: f"{1 / v:.2f}x")
    winner = {"dev": 0.795, "loss_points": 0.5, "speedup": 3.0, "latency_b1_ms": 2.0, "latency_b32_ms": 20.0,
              "size_mb": 22.0}
    held = {"part": "test split", "examples": 100, "winner": {"accuracy": 0.77}, "source": {"accuracy": 0.8},
            "loss_points": 3.0, "within_max_loss": False}
    summary = {"winner": winner, "recipe": "r", "held_out": held, "target_met": True, "nearest": None,
               "search": {"trials": 3, "candidates": 4, "complete": 2, "pruned": 1, "failed": 0, "elapsed_s": 5,
                          "budget_s": 60, "sampler": "tpe"}}
    text = " ".join(_lines(ctx, summary))
    assert "OUTSIDE --max-loss 1" in text and "+3.00 points lost" in text
    near = {"trial": 7, "structure": "layers:2", "backend": "onnx-int8", "loss_points": 2.5, "objective": 0.25}
    text = " ".join(_lines(ctx, {**summary, "target_met": False, "nearest": near}))
    assert "Target not met" in text and "Nearest: trial 7, layers:2 on onnx-int8" in text


def test_the_pruner_stops_what_cannot_move_the_front():
    from ptmlab.optimize.search import HOPELESS_POINTS, FrontPruner

    study = optuna.create_study()
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    study.add_trial(optuna.trial.create_trial(params={"x": 0.1}, distributions=dist, value=0.5,
                                              user_attrs={"row": {"feasible": True}}))
    study.add_trial(optuna.trial.create_trial(params={"x": 0.2}, distributions=dist, value=0.1,
                                              user_attrs={"row": {"feasible": False}}))  # outside the budget
    pruner = FrontPruner(max_loss=1.0)
    assert FrontPruner.best_feasible(study) == 0.5

    def trial(values):
        return optuna.trial.create_trial(params={"x": 0.3}, distributions=dist, intermediate_values=values,
                                         state=optuna.trial.TrialState.RUNNING)

    assert pruner.prune(study, trial({0: 0.7}))  # estimated slower than the best within the budget
    assert not pruner.prune(study, trial({0: 0.52}))  # within the estimate's slack
    assert pruner.prune(study, trial({0: 0.1, 1: 1.0 + HOPELESS_POINTS + 0.1}))  # its structure already loses more
    assert not pruner.prune(study, trial({0: 0.1, 1: 0.8}))


def test_a_candidate_refused_for_lack_of_time_is_tried_again_on_resume():
    from ptmlab.optimize.search import tried

    study = optuna.create_study()
    dist = {"structure": optuna.distributions.CategoricalDistribution(["source", "layers:3"]),
            "backend": optuna.distributions.CategoricalDistribution(["onnx"])}
    for s, attrs in (("source", {}), ("layers:3", {"over_budget": True})):
        study.add_trial(optuna.trial.create_trial(params={"structure": s, "backend": "onnx"}, distributions=dist,
                                                  user_attrs=attrs, state=optuna.trial.TrialState.PRUNED))
    assert set(tried(study)) == {("source", "onnx")}


def test_structures_and_budgets_parse():
    from ptmlab.optimize.config import parse_batches, parse_budget
    from ptmlab.optimize.space import default_structures, parse_structure

    assert parse_budget("90s") == 90 and parse_budget("20m") == 1200 and parse_budget("1.5h") == 5400
    assert parse_batches(["32", "8"]) == (1, 8, 32)
    assert parse_structure("prune:ffn=0.5/heads=0.25").name == "prune:heads=0.25/ffn=0.5"
    assert parse_structure("shrink:layers=4/hidden=192/heads=6/ffn=768").student_spec() == \
        "shrink:layers=4,hidden=192,heads=6,ffn=768"
    assert parse_structure("static").student_spec() == "static"
    assert parse_structure("static:dim=32").student_spec() == "static:dim=32"
    for bad in ("layers:x", "prune:heads=1.5", "shrink:width=3", "vocab:1", "quantum", "static:dim=0", "static:x=1"):
        with pytest.raises(PtmlabError):
            parse_structure(bad)
    names = [s.name for s in default_structures(SimpleNamespace(num_hidden_layers=6, hidden_size=384,
                                                                num_attention_heads=12, intermediate_size=1536))]
    assert names[:2] == ["source", "vocab"] and "layers:3" in names and \
        "shrink:layers=4/hidden=192/heads=6/ffn=768" in names
    assert names[-1] == "static"


def test_a_static_student_is_a_candidate_and_its_winner_predicts(teacher, tmp_path):
    import ptmlab
    from ptmlab.models.zoo import load_model

    out = tmp_path / "static"
    run = ptmlab.optimize(teacher, max_loss=100, output=str(out), structures=["source", "static"],
                          backends=["torch-fp32", "onnx"], objective="size", **FAST)
    s = run.summary
    rows = {(r["structure"], r["backend"]): r for r in s["trials"]}
    assert {("static", "torch-fp32"), ("static", "onnx")} <= set(rows)
    for b in ("torch-fp32", "onnx"):  # no layers: smaller than the run on either backend, so trained and measured
        assert rows[("static", b)]["status"] == "complete" and 0 <= rows[("static", b)]["agreement"] <= 1, rows
    trained = json.loads((out / "structures" / "static" / "summary.json").read_text())
    assert trained["model"] == "static" and trained["strategy"] == "distill"
    # within a 100-point budget the smallest model wins: the static student (a transformers directory or ONNX)
    assert s["winner"]["structure"] == "static" and "static-embedding student" in s["recipe"]
    assert (out / "model.onnx").is_file() or (out / "model.safetensors").is_file()
    assert load_model(str(out)) is not None
    preds = ptmlab.predict(out, ["the film was excellent", "awful and boring"])
    assert len(preds) == 2 and all(p["label"] in ("neg", "pos") for p in preds)
    (tmp_path / "in.csv").write_text("text\nthe film was excellent\n")
    proc = run_cli("predict", str(out), "--input", str(tmp_path / "in.csv"), "--output", str(tmp_path / "p"))
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_bad_input_is_one_line_and_writes_nothing(teacher, tmp_path):
    out = tmp_path / "out"
    base = ["optimize", teacher, "--max-loss", "1", "--output", str(out)]
    assert_clean_error(run_cli(*base, "--backends", "onnx,tensorrt"), "unknown backend 'tensorrt'")
    assert_clean_error(run_cli(*base, "--resume", "--overwrite"), "--resume", "--overwrite")
    memory = tmp_path / "from-memory"  # a run trained on data held in memory: no dev data to read again
    shutil.copytree(teacher, memory)
    (memory / "config.yaml").write_text("command: finetune\nmodel: tiny\ntask: custom\n")
    assert_clean_error(run_cli("optimize", str(memory), "--max-loss", "1", "--output", str(out)), "dev data")
    assert not out.exists()


@pytest.mark.parametrize("options, needle", [
    (dict(backends=["torch-fp32", "tensorrt"]), "unknown backend 'tensorrt'"),
    (dict(held_out="test"), "no labelled test split"),
    (dict(max_loss=None), "max_loss"),
    (dict(structures=["layers:9"]), "the run has 2"),
])
def test_bad_options_through_the_api(teacher, tmp_path, options, needle):
    import ptmlab

    out = tmp_path / "out"
    with pytest.raises(PtmlabError, match=needle):
        ptmlab.optimize(teacher, **{"max_loss": 1, **options}, output=str(out), budget="60s")
    assert not out.exists()


def test_openvino_backends_run_and_their_winner_loads_on_openvino(teacher, tmp_path, monkeypatch):
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    import ptmlab
    from ptmlab.models.onnx import OvModel
    from ptmlab.models.zoo import load_model

    out = tmp_path / "ov"
    run = ptmlab.optimize(teacher, max_loss=100, output=str(out), structures=["source"],
                          backends=["torch-fp32", "openvino", "openvino-int8"], objective="size", **FAST)
    rows = {r["backend"]: r for r in run.summary["trials"]}
    for b in ("openvino", "openvino-int8"):
        assert rows[b]["status"] == "complete" and 0 <= rows[b]["agreement"] <= 1, rows[b]
    assert rows["openvino"]["agreement"] == 1.0 and rows["openvino"]["max_abs_logit_diff"] < 1e-3
    assert rows["openvino-int8"]["size_mb"] < rows["openvino"]["size_mb"]  # int8 weights
    assert run.summary["winner"]["backend"] == "openvino-int8"  # the smallest
    assert json.loads((out / "config.json").read_text())["ptmlab_runtime"] == "openvino"
    assert isinstance(load_model(str(out)), OvModel)  # served and predicted on the runtime it was measured on
    preds = ptmlab.predict(out, ["the film was excellent"])
    assert preds[0]["label"] in ("neg", "pos")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nncf" else real(name, *a))
    with pytest.raises(PtmlabError, match="needs nncf"):
        ptmlab.optimize(teacher, max_loss=1, output=str(tmp_path / "no"), backends=["openvino-int8"], budget="60s")
    assert not (tmp_path / "no").exists()
