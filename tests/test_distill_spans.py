"""Distillation of the span task kinds with layer losses: a token tagger (CoNLL columns) and a span extractor
(SQuAD-layout JSON, contexts over several windows) learn hidden states and attention maps of their teacher through
the one disk-backed teacher cache (a tagged sentence or a QA window per cached example); the cached and on-the-fly
modes give the same first step; a run killed while the teacher runs resumes; what has no meaning for tags or spans is
refused in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ptmlab.core.errors import PtmlabError
from ptmlab.distill import cache
from ptmlab.distill.config import DistillConfig
from ptmlab.distill.pipeline import run_distill
from tests.test_ner_cli import _sentences, _write_conll
from tests.test_qa_cli import _examples

LOSSES = ["soft_ce", "hidden_mse", "attention_kl"]


def _squad_json(path: Path, rows: list[dict]) -> None:
    """SQuAD's layout: data -> paragraphs -> qas, one paragraph per example."""
    paragraphs = [{"context": r["context"], "qas": [{"id": r["id"], "question": r["question"], "answers": [
        {"text": r["answers"]["text"][0], "answer_start": r["answers"]["answer_start"][0]}]}]} for r in rows]
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "passwords", "paragraphs": paragraphs}]}))


def _teacher(kind: str, files: dict, out: Path, **extra) -> str:
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    run_finetune(FinetuneConfig(model="tiny", task="t", task_kind=kind, train_file=files["train"],
                                dev_file=files["dev"], lr=3e-3, batch_size=16, max_steps=30, seed=0,
                                output=str(out), precision="fp32", **extra))
    return str(out)


@pytest.fixture(scope="module")
def ner(tmp_path_factory):
    d = tmp_path_factory.mktemp("ner-kd")
    _write_conll(d / "train.conll", _sentences(64, 0))
    _write_conll(d / "dev.conll", _sentences(24, 1))
    files = {"train": str(d / "train.conll"), "dev": str(d / "dev.conll")}
    opts = {"task_kind": "token-classification", "max_length": 32}
    return files, _teacher("token-classification", files, d / "teacher", max_length=32), opts


@pytest.fixture(scope="module")
def qa(tmp_path_factory):
    d = tmp_path_factory.mktemp("qa-kd")
    _squad_json(d / "train.json", _examples(24, 0))
    _squad_json(d / "dev.json", _examples(8, 1))
    files = {"train": str(d / "train.json"), "dev": str(d / "dev.json")}
    opts = {"task_kind": "extractive-qa", "max_length": 48, "doc_stride": 16}
    return files, _teacher("extractive-qa", files, d / "teacher", max_length=48, doc_stride=16), opts


def _cfg(setup, out: Path, **kw) -> DistillConfig:
    files, teacher, opts = setup
    base = dict(teacher=teacher, task="t", train_file=files["train"], dev_file=files["dev"], student="layers:1",
                losses=LOSSES, batch_size=8, lr=2e-3, max_steps=8, logging_steps=1, seed=0, precision="fp32",
                teacher_batch_size=8, output=str(out), **opts)
    return DistillConfig(**{**base, **kw})


def _losses(out: Path) -> list[float]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if "loss" in r and "step" in r]


def _entries() -> set[Path]:
    d = cache.teacher_dir()
    return set(d.glob("*.bin")) if d.is_dir() else set()


@pytest.mark.parametrize("kind", ["ner", "qa"])
def test_layer_losses_through_the_teacher_cache_match_the_on_the_fly_teacher(kind, request, tmp_path):
    from ptmlab.data.encode import encode_split
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.models.zoo import load_model, load_tokenizer

    setup = request.getfixturevalue(kind)
    before = _entries()
    s = run_distill(_cfg(setup, tmp_path / "cached"))
    new = _entries() - before
    assert s["teacher_cache"] == "computed" and s["teacher_batches_run"] > 0 and len(new) == 1
    assert set(s["final_losses"]) == set(LOSSES) and all(math.isfinite(v) for v in s["final_losses"].values())
    assert s["steps"] == 8 and {m["loss"] for m in s["matches"]} == set(LOSSES)
    cached = _losses(tmp_path / "cached")
    assert len(cached) == 8 and all(math.isfinite(x) for x in cached)
    assert min(cached[-3:]) < cached[0], cached  # the student moves towards its teacher

    # the entry holds one row per cached unit at its real length (a window of a context for QA), of the size
    # estimated before any work: per-token logits [n, C] or [n, 2], hidden states and attention maps
    cfg = _cfg(setup, tmp_path / "x")
    data = load_task_data(cfg)
    teacher, tok = load_model(setup[1]), load_tokenizer(setup[1])
    enc = encode_split(tok, data.splits["train"], cfg.max_length)
    if kind == "qa":
        assert len(enc) > len(data.splits["train"])  # several windows per context
    needs = {(m["feature"], m["teacher"]) for m in s["matches"] if m["feature"] != "logits"}
    assert new.pop().stat().st_size == cache.estimate_bytes(enc.lengths, needs, cache.Shapes(teacher))

    # on the fly: nothing written, the same first step (same seed; the cache keeps layers in fp16)
    before = _entries()
    run_distill(_cfg(setup, tmp_path / "live", teacher_cache=False))
    assert _entries() == before
    first = _losses(tmp_path / "live")[0]
    assert first == pytest.approx(cached[0], rel=2e-3), (first, cached[0])
    # a second cached run reads the entry: the teacher does not run again
    again = run_distill(_cfg(setup, tmp_path / "again", max_steps=1))
    assert again["teacher_cache"] == "hit" and again["teacher_batches_run"] == 0
    assert _losses(tmp_path / "again")[0] == pytest.approx(cached[0], rel=1e-6)


def test_intermediate_stage_on_layer_losses_then_soft_targets(ner, tmp_path):
    s = run_distill(_cfg(ner, tmp_path / "s", max_steps=0, epochs=1, intermediate_epochs=1))
    assert [st["stage"] for st in s["stages"]] == ["intermediate"]
    assert set(s["stages"][0]["losses"]) == {"hidden_mse", "attention_kl"} and set(s["final_losses"]) == {"soft_ce"}
    assert "entity_f1" in s["metrics"]


def test_a_narrower_shrink_student_keeps_the_span_head_and_learns_through_a_projection(qa, tmp_path):
    s = run_distill(_cfg(qa, tmp_path / "s", student="shrink:layers=1,hidden=32,heads=2,ffn=64",
                         losses=["soft_ce", "hidden_mse"], max_steps=2))
    assert s["params"] < s["teacher_params"] and {"exact_match", "f1"} <= set(s["metrics"])
    assert set(s["final_losses"]) == {"soft_ce", "hidden_mse"}
    saved = json.loads((tmp_path / "s" / "config.json").read_text())
    assert saved["architectures"] == ["BertForQuestionAnswering"] and saved["hidden_size"] == 32


def test_a_span_distillation_killed_while_the_teacher_runs_resumes(qa, tmp_path, monkeypatch):
    from tests.conftest import run_cli

    out = tmp_path / "k"
    cfg = _cfg(qa, out, losses=["soft_ce", "hidden_mse:2", "attention_mse"], layer_map="0", max_steps=3,
               teacher_batch_size=4)  # teacher layer 0: a cache entry no other test made
    calls = {"n": 0}
    original = cache._store_batch

    def dies(*a, **k):
        calls["n"] += 1
        if calls["n"] > 9:
            raise KeyboardInterrupt  # the kill, in the teacher's fourth batch (three features a batch)
        return original(*a, **k)

    monkeypatch.setattr(cache, "_store_batch", dies)
    with pytest.raises(KeyboardInterrupt):
        run_distill(cfg)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["stage"] == "teacher outputs" and not (out / "checkpoint").exists()
    r = run_cli("distill", "--resume", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["steps"] == 3 and set(s["final_losses"]) == {"soft_ce", "hidden_mse", "attention_mse"}
    assert {"exact_match", "f1"} <= set(s["metrics"])


@pytest.mark.parametrize("kw, needle", [
    ({"augment": 2}, "--augment is for sentence tasks"),
    ({"losses": ["sentence_mse", "hidden_mse"]}, "loss 'sentence_mse' compares one output vector per example"),
])
def test_what_has_no_meaning_for_tags_is_refused_before_any_work(ner, tmp_path, kw, needle):
    out = tmp_path / "r"
    before = _entries()
    with pytest.raises(PtmlabError, match=needle):
        run_distill(_cfg(ner, out, **kw))
    assert not out.exists() and _entries() == before
