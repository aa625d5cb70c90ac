"""``ptmlab compress`` and pruning's distilled recovery for token classification and extractive QA: every pipeline
step runs on a tagger and a span extractor, rows are scored with entity F1 / SQuAD EM and F1, sizes and latencies
are measured, the compressed model predicts; recovery can distil per word or per start/end position from the model
before it was changed."""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import assert_clean_error, run_cli
from tests.test_ner_cli import _sentences, _write_conll
from tests.test_qa_cli import ANIMALS, _examples, _jsonl

NER_DATA = ["--task", "geo-ner", "--task-kind", "token-classification"]
QA_DATA = ["--task", "passwords", "--task-kind", "extractive-qa", "--max-length", "48", "--doc-stride", "16"]
TRAIN = ["--batch-size", "16", "--lr", "2e-3", "--precision", "fp32"]


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
    d = tmp_path_factory.mktemp("ner")
    _write_conll(d / "train.conll", _sentences(240, 0))
    _write_conll(d / "dev.conll", _sentences(60, 1))
    files = ["--train-file", str(d / "train.conll"), "--dev-file", str(d / "dev.conll")]
    proc = run_cli("finetune", "--model", "tiny", *NER_DATA, *files, "--epochs", "6", *TRAIN, "--output",
                   str(d / "run"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return d, files


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    d = tmp_path_factory.mktemp("qa")
    _jsonl(d / "train.jsonl", _examples(160, 0))
    _jsonl(d / "dev.jsonl", _examples(40, 1))
    files = ["--train-file", str(d / "train.jsonl"), "--dev-file", str(d / "dev.jsonl")]
    proc = run_cli("finetune", "--model", "tiny", *QA_DATA, *files, "--epochs", "6", *TRAIN, "--output",
                   str(d / "run"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return d, files


def _check_rows(summary: dict, metrics: set[str], top: float) -> list[dict]:
    """Every row: the task's own dev scores (dev = the main metric), a parameter count, a size and latencies."""
    rows = summary["rows"]
    for r in rows:
        assert set(r["dev_metrics"]) >= metrics, r
        assert r["dev"] == r["dev_metrics"][summary["main_metric"]]
        assert all(0 <= r["dev_metrics"][m] <= top for m in metrics), r
        assert r["size_mb"] > 0 and r["latency_b1_ms"] > 0 and r["latency_b32_ms"] > 0 and r["speedup_b32"] > 0
        assert r["size_ratio"] == pytest.approx(rows[0]["size_mb"] / r["size_mb"], abs=0.01)
    return rows


def test_compress_a_tagger_step_by_step_and_predict(tagger):
    d, files = tagger
    out = d / "compressed"
    proc = run_cli("compress", str(d / "run"), *NER_DATA, *files, "--steps", "vocab,heads=0.25,ffn=0.3,lowrank=0.5",
                   "--recover-epochs", "1", "--distill-alpha", "0.5", *TRAIN, "--latency-repeats", "2",
                   "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["main_metric"] == "entity_f1" and s["task_kind"] == "token-classification"
    assert s["recovery_loss"].startswith("soft_ce (alpha 0.5")
    rows = _check_rows(s, {"entity_f1", "entity_precision", "entity_recall", "f1_GEO", "f1_PER"}, 1.0)
    assert [r["variant"] for r in rows] == ["original", "vocab", "vocab+heads=0.25", "vocab+heads=0.25+ffn=0.3",
                                            "vocab+heads=0.25+ffn=0.3+lowrank=0.5"]
    assert rows[0]["dev"] > 0.9
    assert rows[1]["dev_metrics"] == rows[0]["dev_metrics"]  # the smaller vocabulary tags every word alike
    assert rows[1]["size_mb"] < rows[0]["size_mb"] / 5  # tiny's embeddings are most of it; the corpus uses few
    assert rows[0]["params"] > rows[1]["params"] > rows[2]["params"] > rows[3]["params"] > rows[4]["params"]
    config = json.loads((d / "run" / "config.json").read_text())
    assert sum(s["heads_per_layer"]) < config["num_attention_heads"] * config["num_hidden_layers"]
    assert s["vocab_after"] < s["vocab_before"]
    assert rows[-1]["dev"] > 0.8  # recovered with the soft targets
    (d / "sents.jsonl").write_text(json.dumps({"tokens": ["alice", "smith", "met", "oslo"]}) + "\n")
    proc = run_cli("predict", str(out), "--input", str(d / "sents.jsonl"), "--output", str(d / "tagged"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads((d / "tagged" / "predictions.jsonl").read_text())
    assert row["tokens"] == ["alice", "smith", "met", "oslo"] and len(row["tags"]) == 4
    assert row["tags"][2] == "O" and all(0 < p <= 1 for p in row["scores"])
    proc = run_cli("evaluate", str(out), *NER_DATA, *files, "--precision", "fp32")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["metrics"]["entity_f1"] == pytest.approx(rows[-1]["dev"], abs=1e-4)


def test_compress_a_span_extractor_and_predict(reader):
    d, files = reader
    out = d / "compressed"
    proc = run_cli("compress", str(d / "run"), *QA_DATA, *files, "--steps", "vocab,params=0.3,magnitude=0.3,share=1",
                   "--recover-epochs", "1", "--distill-alpha", "0.5", *TRAIN, "--latency-repeats", "2",
                   "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["main_metric"] == "f1" and s["task_kind"] == "extractive-qa"
    rows = _check_rows(s, {"exact_match", "f1"}, 100.0)
    assert rows[0]["dev_metrics"]["exact_match"] > 60 and rows[1]["dev_metrics"] == rows[0]["dev_metrics"]
    assert rows[0]["params"] > rows[1]["params"] > rows[2]["params"] > rows[4]["params"]
    assert s["magnitude_sparsity"] == pytest.approx(0.3, abs=0.02) and s["share_groups"] == 1
    assert rows[-1]["dev_metrics"]["f1"] >= rows[-1]["dev_metrics"]["exact_match"] > 30
    questions = [{"question": r["question"], "context": r["context"]} for r in _examples(8, 7)]
    _jsonl(d / "questions.jsonl", questions)
    proc = run_cli("predict", str(out), "--input", str(d / "questions.jsonl"), "--output", str(d / "answers"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    answers = [json.loads(x) for x in (d / "answers" / "predictions.jsonl").read_text().splitlines()]
    assert len(answers) == 8 and all(q["context"][a["start"]:a["end"]] == a["answer"]
                                     for a, q in zip(answers, questions, strict=True))
    assert sum(a["answer"] in ANIMALS for a in answers) >= 4


@pytest.mark.parametrize("kind,step", [("ner", "int8"), ("qa", "int8"), ("qa", "torch-int8")])
def test_int8_steps_keep_the_span_scores(kind, step, tagger, reader):
    d, files = tagger if kind == "ner" else reader
    data = NER_DATA if kind == "ner" else QA_DATA
    out = d / f"q-{step}"
    proc = run_cli("compress", str(d / "run"), *data, *files, "--steps", step, "--latency-repeats", "2",
                   "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((out / "summary.json").read_text())["rows"]
    assert rows[1]["variant"] == step and rows[1]["size_mb"] < rows[0]["size_mb"]
    assert rows[0]["dev"] > (0.9 if kind == "ner" else 60)
    for m, v in rows[0]["dev_metrics"].items():  # int8 weights change a confident tiny model's answers little
        assert rows[1]["dev_metrics"][m] == pytest.approx(v, abs=0.1 if kind == "ner" else 10), m
    assert (out / "model.onnx").is_file() == (step == "int8")


@pytest.mark.parametrize("kind", ["ner", "qa"])
def test_distilled_recovery_matches_the_teacher_feature_by_feature(kind, tagger, reader):
    """At alpha 1 the loss against the unchanged model itself is 0 on every training feature (the teacher's logits
    line up with the batches recovery trains on), and pruning moves it off 0; at alpha 0 it is the task loss."""
    from ptmlab.compress.importance import compute_importance
    from ptmlab.compress.prune import PruneConfig, prune_by_target, teacher_loss
    from ptmlab.core.config import build_config
    from ptmlab.data.encode import encode_split
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.spans import span_task_loss

    d, files = tagger if kind == "ner" else reader
    args = dict(zip((NER_DATA if kind == "ner" else QA_DATA)[::2], (NER_DATA if kind == "ner" else QA_DATA)[1::2],
                    strict=True))
    values = {k.lstrip("-").replace("-", "_"): v for k, v in {**args, **dict(zip(files[::2], files[1::2],
                                                                                   strict=True))}.items()}
    cfg = build_config(PruneConfig, {**values, "model": str(d / "run"), "heads": 0.5, "distill_alpha": 1.0,
                                     "distill_temperature": 2.0})
    data = load_task_data(cfg)
    model, tok = load_model(str(d / "run")), load_tokenizer(str(d / "run"))
    model.eval()
    loss = teacher_loss(model, data, tok, cfg)
    feats = encode_split(tok, data.splits["train"], cfg.max_length)
    batch = feats.make_batch(list(range(len(feats) - 1, len(feats) - 17, -1)))  # the last 16, in reverse order
    with torch.no_grad():
        same = loss(model, batch).abs().max()
        assert same < 1e-4
        hard = build_config(PruneConfig, {**values, "model": str(d / "run"), "heads": 0.5, "distill_alpha": 0.0})
        assert torch.allclose(teacher_loss(model, data, tok, hard)(model, batch), span_task_loss(model, batch),
                              atol=1e-5)
    enc = encode_split(tok, data.splits["train"].select(list(range(64))), cfg.max_length)
    prune_by_target(model, compute_importance("gate", model, enc, tok.pad_token_id), heads=0.5, ffn=0.5)
    with torch.no_grad():
        assert loss(model, batch).mean() > max(100 * same, 1e-5)


def test_prune_distils_a_tagger_during_recovery(tagger):
    d, files = tagger
    out = d / "pruned"
    proc = run_cli("prune", str(d / "run"), *NER_DATA, *files, "--heads", "0.5", "--recover-epochs", "1",
                   "--distill-alpha", "0.7", *TRAIN, "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["recovery_loss"].startswith("soft_ce (alpha 0.7") and s["heads"] < s["heads_before"]
    assert s["metrics"]["entity_f1"] > 0.8


def test_compress_distill_alpha_needs_vocab_first_and_recovery(tagger):
    d, files = tagger
    out = d / "bad"
    proc = run_cli("compress", str(d / "run"), *NER_DATA, *files, "--steps", "heads=0.25,vocab",
                   "--distill-alpha", "0.5", "--output", str(out))
    assert_clean_error(proc, "step 'vocab' must come before every recovered step with --distill-alpha")
    proc = run_cli("compress", str(d / "run"), *NER_DATA, *files, "--steps", "heads=0.25",
                   "--recover-epochs", "0", "--distill-alpha", "0.5", "--output", str(out))
    assert_clean_error(proc, "--distill-alpha applies to recovery fine-tuning")
    assert not out.exists()


def test_compress_distils_a_sentence_model_during_recovery(tmp_path, capsys):
    from ptmlab.cli import main
    from tests.synthetic import write_task

    files = write_task(tmp_path / "task", n_train=48, n_dev=24)
    out = tmp_path / "c"
    assert main(["compress", "tiny", "--task", "syn", "--train-file", files["train"], "--dev-file", files["dev"],
                 "--max-length", "32", "--batch-size", "16", "--steps", "vocab,heads=0.25", "--recover-epochs", "1",
                 "--distill-alpha", "0.5", "--latency-repeats", "1", "--output", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["recovery_loss"].startswith("soft_ce (alpha 0.5") and s["task_kind"] == "classification"
    assert s["recovery_train_examples"] == 48
    assert all(r["dev"] == r["dev_metrics"]["accuracy"] for r in s["rows"])
