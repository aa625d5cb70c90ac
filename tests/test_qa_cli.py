"""Extractive QA across the CLI: an unseen dataset with long contexts (several windows each) fine-tunes and scores,
predictions are spans of their contexts, the built-in squad task; soft-target losses of the span kinds; bad input is
one line, exit 2, nothing written."""

from __future__ import annotations

import json
import random

import pytest
import torch

from tests.conftest import SHARED, assert_clean_error, run_cli

SQUAD = SHARED / "qa" / "squad-v1.1"
needs_squad = pytest.mark.skipif(not (SQUAD / "dev-v1.1.reconstructed.json.gz").is_file(),
                                 reason=f"SQuAD v1.1 not found at {SQUAD} (shared data is absent on this machine)")

ANIMALS = ["zebra", "otter", "falcon", "lynx", "badger", "heron", "bison", "gecko"]
FILLER = ["the", "river", "was", "cold", "and", "we", "walked", "along", "it", "for", "hours", "near", "town"]


def _examples(n: int, seed: int) -> list[dict]:
    """A long context of filler with one 'password is ANIMAL' somewhere; the question asks for the password."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = [rng.choice(FILLER) for _ in range(rng.randint(40, 70))]
        at = rng.randint(0, len(words))
        animal = rng.choice(ANIMALS)
        context = " ".join(words[:at] + ["the", "password", "is", animal] + words[at:])
        start = context.index(f"password is {animal}") + len("password is ")
        out.append({"id": f"q{seed}-{i}", "question": "what is the password?", "context": context,
                    "answers": {"text": [animal], "answer_start": [start]}})
    return out


def _jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture(scope="module")
def qa_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("qa")
    _jsonl(d / "train.jsonl", _examples(160, 0))
    _jsonl(d / "dev.jsonl", _examples(40, 1))
    run = d / "run"
    proc = run_cli("finetune", "--model", "tiny", "--task", "passwords", "--task-kind", "extractive-qa",
                   "--train-file", str(d / "train.jsonl"), "--dev-file", str(d / "dev.jsonl"), "--max-length", "48",
                   "--doc-stride", "16", "--epochs", "6", "--batch-size", "16", "--lr", "2e-3", "--precision", "fp32",
                   "--output", str(run))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return d, run


def test_unseen_qa_dataset_with_windows_finetunes_and_scores(qa_run):
    d, run = qa_run
    s = json.loads((run / "summary.json").read_text())
    assert s["main_metric"] == "f1" and s["train_examples"] > 2 * 160  # every context spans several windows
    assert s["metrics"]["exact_match"] > 60 and s["metrics"]["f1"] >= s["metrics"]["exact_match"], s["metrics"]
    preds = json.loads((run / "predictions_dev.json").read_text())
    dev = [json.loads(x) for x in (d / "dev.jsonl").read_text().splitlines()]
    for p, ex in zip(preds["pred"], dev, strict=True):
        assert ex["context"][p["start"]:p["end"]] == p["answer"]


def test_predictions_are_spans_of_their_contexts(qa_run):
    d, run = qa_run
    rows = [{"question": r["question"], "context": r["context"]} for r in _examples(12, 7)]
    _jsonl(d / "questions.jsonl", rows)
    proc = run_cli("predict", str(run), "--input", str(d / "questions.jsonl"), "--output", str(d / "answers"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    answers = [json.loads(x) for x in (d / "answers" / "predictions.jsonl").read_text().splitlines()]
    assert len(answers) == 12
    for a, r in zip(answers, rows, strict=True):
        assert a["answer"] and r["context"][a["start"]:a["end"]] == a["answer"]
        assert 0 < a["probability"] <= 1
    assert sum(a["answer"] in ANIMALS for a in answers) >= 8


def test_answer_outside_its_context_and_a_window_with_no_room(tmp_path):
    rows = _examples(12, 0)
    rows[3]["answers"]["answer_start"] = [0]
    _jsonl(tmp_path / "bad.jsonl", rows)
    out = tmp_path / "run"
    proc = run_cli("finetune", "--model", "tiny", "--task", "x", "--task-kind", "extractive-qa", "--train-file",
                   str(tmp_path / "bad.jsonl"), "--output", str(out))
    assert_clean_error(proc, "bad.jsonl:4", "is not in its context at offset 0")
    assert not out.exists()
    _jsonl(tmp_path / "ok.jsonl", _examples(12, 0))
    proc = run_cli("finetune", "--model", "tiny", "--task", "x", "--task-kind", "extractive-qa", "--train-file",
                   str(tmp_path / "ok.jsonl"), "--max-length", "24", "--doc-stride", "16", "--output", str(out))
    assert_clean_error(proc, "context tokens per window at --max-length 24", "--doc-stride 16")
    assert not out.exists()


@needs_squad
def test_builtin_squad_scores_exact_match_and_f1(tmp_path):
    run = tmp_path / "Q"
    proc = run_cli("finetune", "--model", "tiny", "--task", "squad", "--max-train", "24", "--max-eval", "16",
                   "--max-steps", "2", "--output", str(run))
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads((run / "summary.json").read_text())
    assert set(s["metrics"]) == {"exact_match", "f1"} and 0 <= s["metrics"]["f1"] <= 100
    assert s["eval_examples"] >= 16  # windows of 16 questions


# ------------------------------------------------------------------------------------ soft targets of span tasks
def test_span_soft_target_losses():
    from types import SimpleNamespace

    from ptmlab.distill.spans import span_kd_loss

    torch.manual_seed(0)
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[1, 4] = 0
    s_start, s_end = torch.randn(2, 5), torch.randn(2, 5)
    batch = {"input_ids": torch.zeros(2, 5, dtype=torch.long), "attention_mask": mask, "index": torch.tensor([0, 1]),
             "start_positions": torch.tensor([1, 2]), "end_positions": torch.tensor([3, 2])}

    def model(**_):
        return SimpleNamespace(start_logits=s_start, end_logits=s_end)

    model.config = SimpleNamespace(type_vocab_size=1)
    same = [(s_start[0].numpy(), s_end[0].numpy()), (s_start[1, :4].numpy(), s_end[1, :4].numpy())]
    assert torch.allclose(span_kd_loss(same, True, 2.0, 1.0)(model, batch), torch.zeros(2), atol=1e-6)
    hard = span_kd_loss(same, True, 2.0, 0.0)(model, batch)
    want = (torch.nn.functional.cross_entropy(s_start.masked_fill(mask == 0, -1e4), batch["start_positions"],
                                              reduction="none")
            + torch.nn.functional.cross_entropy(s_end.masked_fill(mask == 0, -1e4), batch["end_positions"],
                                                reduction="none")) / 2
    assert torch.allclose(hard, want, atol=1e-5)
    other = [(x[0] * 0, x[1] * 0) for x in same]  # a uniform teacher is far from the student
    assert (span_kd_loss(other, True, 2.0, 1.0)(model, batch) > 0.01).all()

    # token classification: only labelled positions (first sub-tokens) count
    logits = torch.randn(1, 4, 3)
    labels = torch.tensor([[-100, 2, -100, 0]])
    tok_batch = {"input_ids": torch.zeros(1, 4, dtype=torch.long), "attention_mask": torch.ones(1, 4),
                 "index": torch.tensor([0]), "labels": labels}

    def tagger(**_):
        return SimpleNamespace(logits=logits)

    tagger.config = model.config
    teacher = logits[0].clone().numpy()
    teacher[0] = teacher[2] = [9.0, -9.0, 0.0]  # differs only where nothing is labelled: no soft loss
    assert span_kd_loss([teacher], False, 2.0, 1.0)(tagger, tok_batch).item() == pytest.approx(0.0, abs=1e-6)


def test_serve_answers_a_question_with_a_span_of_its_context(qa_run, tmp_path):
    import httpx

    from ptmlab.serve.app import create_app
    from ptmlab.serve.config import ServeConfig
    from ptmlab.serve.server import serve_in_thread
    from ptmlab.serve.state import open_store

    _, run = qa_run
    store = open_store(str(tmp_path / "home"))
    key = store.create_key("reader")
    auth = {"Authorization": f"Bearer {key}"}
    ex = _examples(3, 11)
    try:
        with serve_in_thread(create_app(str(run), ServeConfig(detector=False, output_policy="label"), store)) as url:
            for e in ex:
                r = httpx.post(f"{url}/v1/predict", json={"question": e["question"], "context": e["context"]},
                               headers=auth)
                assert r.status_code == 200, r.text
                (a,) = r.json()["predictions"]
                assert e["context"][a["start"]:a["end"]] == a["answer"] and a["probability"] is None
            r = httpx.post(f"{url}/v1/predict", json={"question": "what?"}, headers=auth)
            assert r.status_code == 422 and "needs its context" in r.json()["error"]
    finally:
        store.close()
