"""``ptmlab optimize`` on a tiny tagger and a tiny span extractor: every backend runs on the run itself, a student and
a pruned model train through the span distillation, trials are scored with entity F1 / SQuAD F1 and compared with the
run on decoded tags and answer spans, and the exported winner predicts and serves like a run; multi-label and
multi-task runs are refused in one line."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import assert_clean_error, run_cli
from tests.test_ner_cli import _sentences, _write_conll
from tests.test_qa_cli import ANIMALS, _examples, _jsonl

BACKENDS = ["torch-fp32", "onnx", "onnx-fused", "onnx-int8", "onnx-int8-static"]
FAST = dict(batch=["1", "4"], latency_texts=8, latency_rounds=1, search_rounds=1, calibration_examples=16,
            epochs=1.0, batch_size=16, lr=2e-3, eval_batch_size=64, budget="600s", backends=BACKENDS)
TRAIN = ["--batch-size", "16", "--lr", "2e-3", "--precision", "fp32"]


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
    d = tmp_path_factory.mktemp("opt-ner")
    _write_conll(d / "train.conll", _sentences(200, 0))
    _write_conll(d / "dev.conll", _sentences(60, 1))
    proc = run_cli("finetune", "--model", "tiny", "--task", "geo-ner", "--task-kind", "token-classification",
                   "--train-file", str(d / "train.conll"), "--dev-file", str(d / "dev.conll"), "--epochs", "5",
                   *TRAIN, "--output", str(d / "run"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return d


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    d = tmp_path_factory.mktemp("opt-qa")
    _jsonl(d / "train.jsonl", _examples(120, 0))
    _jsonl(d / "dev.jsonl", _examples(40, 1))
    proc = run_cli("finetune", "--model", "tiny", "--task", "passwords", "--task-kind", "extractive-qa",
                   "--train-file", str(d / "train.jsonl"), "--dev-file", str(d / "dev.jsonl"), "--max-length", "48",
                   "--doc-stride", "16", "--epochs", "5", *TRAIN, "--output", str(d / "run"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return d


def _check_trials(summary: dict, metric: str, top: float) -> dict:
    rows = {(r["structure"], r["backend"]): r for r in summary["trials"]}
    assert not [r for r in rows.values() if r["status"] == "failed"], rows
    for b in BACKENDS:  # every backend ran on the run itself and kept the parity check
        r = rows[("source", b)]
        assert r["status"] == "complete", r
        assert 0 <= r["dev"] <= top and r["dev"] == r["dev_metrics"][metric]
        assert 0 <= r["agreement"] <= 1 and r["latency_b4_ms"] > 0
    assert rows[("source", "torch-fp32")]["agreement"] == 1.0 and rows[("source", "onnx")]["agreement"] == 1.0
    assert summary["main_metric"] == metric
    return rows


def test_a_tagger_is_optimized_on_entity_f1_and_its_winner_predicts(tagger, store):
    from fastapi.testclient import TestClient

    import ptmlab
    from ptmlab.serve.app import create_app
    from ptmlab.serve.config import ServeConfig

    out = tagger / "opt"
    run = ptmlab.optimize(tagger / "run", max_loss=50, output=str(out), objective="size",
                          structures=["source", "layers:1", "prune:heads=0.5/ffn=0.5", "static"], **FAST)
    s = run.summary
    rows = _check_trials(s, "entity_f1", 1.0)
    assert s["source"]["dev"] > 0.5  # the run tags well: entity F1 is a fraction, and points are 100ths of it
    assert rows[("source", "onnx-int8")]["loss_points"] == pytest.approx(
        round((s["source"]["dev"] - rows[("source", "onnx-int8")]["dev"]) * 100, 2), abs=0.02)
    for st in ("layers:1", "prune:heads=0.5/ffn=0.5"):  # trained through the span distillation, or stopped early
        assert {rows[(st, b)]["status"] for b in BACKENDS} <= {"complete", "pruned"}
    student = rows[("layers:1", "onnx-int8")]  # smaller than the int8 run itself can be: trained, then measured
    assert student["status"] == "complete", student
    trained = json.loads((out / "structures" / "layers-1" / "summary.json").read_text())
    assert trained["strategy"] == "distill" and "entity_f1" in trained["metrics"]
    assert trained["eval_examples"] == 30  # the search part of dev chose its epoch; the held-out part was not read
    assert "f1_GEO" in s["held_out"]["winner"] and s["held_out"]["examples"] == 30
    parity = json.loads((out / "parity.json").read_text())
    assert parity["kind"] == "token-classification" and parity["words"] > 0 and 0 <= parity["label_agreement"] <= 1
    assert (out / "model.onnx").is_file() or (out / "model.safetensors").is_file()
    # a static-embedding student cannot tag words: left out of the space, with the reason in the report
    assert [x["structure"] for x in s["left_out"]] == ["static"] and "tag words" in s["left_out"][0]["reason"]
    assert not [r for r in s["trials"] if r["structure"] == "static"]
    assert "Left out of the search space: static" in (out / "report.html").read_text()
    # the winner tags like any run: predict (API and CLI) and serve
    preds = ptmlab.predict(out, [["alice", "smith", "met", "oslo"]])
    assert len(preds[0]["tags"]) == 4
    (tagger / "in.jsonl").write_text(json.dumps({"tokens": ["alice", "smith", "met", "oslo"]}) + "\n")
    proc = run_cli("predict", str(out), "--input", str(tagger / "in.jsonl"), "--output", str(tagger / "tags"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads((tagger / "tags" / "predictions.jsonl").read_text().splitlines()[0])
    assert row["tokens"] == ["alice", "smith", "met", "oslo"] and len(row["tags"]) == 4
    key = store.create_key("opt-ner", rate=1000, burst=1000)
    with TestClient(create_app(str(out), ServeConfig(detector=False, precision="fp32"), store)) as client:
        r = client.post("/v1/predict", json={"texts": ["alice smith visited oslo"]},
                        headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    assert "entities" in r.json()["predictions"][0]


def test_a_span_extractor_is_optimized_on_squad_f1_and_its_onnx_winner_answers(reader):
    import ptmlab
    from ptmlab.models.onnx import OrtModel
    from ptmlab.models.zoo import load_model

    out = reader / "opt"
    run = ptmlab.optimize(reader / "run", max_loss=100, output=str(out), objective="size",
                          structures=["source", "vocab", "layers:1"], **FAST)
    s = run.summary
    rows = _check_trials(s, "f1", 100.0)
    assert s["source"]["dev"] > 20  # SQuAD F1 in percent: a point is one unit of it
    r = rows[("source", "onnx-int8")]
    assert r["loss_points"] == pytest.approx(round(s["source"]["dev"] - r["dev"], 2), abs=0.02)
    assert "exact_match" in s["held_out"]["winner"]
    assert (out / "structures" / "vocab" / "model.safetensors").is_file()
    vocab = rows[("vocab", "onnx-int8")]  # answers are character spans: comparable across tokenizers
    assert vocab["status"] == "complete" and vocab["max_abs_logit_diff"] is None and 0 <= vocab["agreement"] <= 1
    parity = json.loads((out / "parity.json").read_text())
    assert parity["kind"] == "extractive-qa" and parity["examples"] == 20
    # the size objective within a huge loss budget: an int8 graph wins, exported as ONNX with its QA outputs
    assert s["winner"]["backend"].startswith("onnx-int8") and isinstance(load_model(str(out)), OrtModel)
    ctx = _examples(3, 7)
    preds = ptmlab.predict(out, [{"question": e["question"], "context": e["context"]} for e in ctx])
    assert len(preds) == 3
    for p, e in zip(preds, ctx, strict=True):
        assert p["answer"] == e["context"][p["start"]:p["end"]]
    assert sum(p["answer"] in ANIMALS for p in preds) >= 1  # the run answers these; a 100-point budget may lose some
    proc = run_cli("predict", str(out), "--input", str(reader / "dev.jsonl"), "--output", str(reader / "answers"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len((reader / "answers" / "predictions.jsonl").read_text().splitlines()) == 40


def test_multi_label_and_multi_task_runs_are_refused_in_one_line(tagger, tmp_path):
    out = tmp_path / "out"
    multi = tmp_path / "multi-task"
    shutil.copytree(tagger / "run", multi)
    (multi / "config.yaml").write_text("command: finetune\nmodel: tiny\ntasks: [sst2, rte]\n")
    assert_clean_error(run_cli("optimize", str(multi), "--max-loss", "1", "--output", str(out)), "multi-task")
    assert not out.exists()
    d = tmp_path / "ml"
    d.mkdir()
    rows = [{"text": f"w{i % 5} x{i % 3} text", "labels": [f"a{i % 2}", f"b{i % 3}"]} for i in range(60)]
    _jsonl(d / "train.jsonl", rows)
    _jsonl(d / "dev.jsonl", rows[:20])
    proc = run_cli("finetune", "--model", "tiny", "--task", "tags", "--train-file", str(d / "train.jsonl"),
                   "--dev-file", str(d / "dev.jsonl"), "--label-col", "labels", "--max-steps", "2", *TRAIN,
                   "--output", str(d / "run"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_clean_error(run_cli("optimize", str(d / "run"), "--max-loss", "1", "--output", str(out)), "multi-label")
    assert not out.exists()


def test_a_span_outputs_agreement_reads_decoded_tags_across_tokenizers():
    import numpy as np

    from ptmlab.data.tokens import TokenFeatures, TokenSplit
    from ptmlab.export.parity import span_agreement

    split = TokenSplit([["a", "b"]], [[0, 1]], [0])
    one = TokenFeatures([[1, 5, 6, 2]], [[None, 0, 1, None]], None, [2])
    two = TokenFeatures([[1, 5, 7, 8, 2]], [[None, 0, 1, 1, None]], None, [2])  # word b in two pieces
    ref = [np.array([[0, 0], [5, 0], [0, 5], [0, 0]], dtype=np.float32)]
    got = [np.array([[0, 0], [5, 0], [5, 0], [0, 9], [0, 0]], dtype=np.float32)]
    res = span_agreement(split, one, ref, two, got, "token-classification", ["O", "B-X"])
    assert res["max_abs_logit_diff"] is None  # tokenized differently: no token-by-token gap
    assert res["label_agreement"] == 0.5 and res["words"] == 2
