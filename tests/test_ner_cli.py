"""Token classification across the CLI: an unseen CoNLL-format dataset fine-tunes, scores and distils; the built-in
conll2003 task; bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import json
import random

import pytest
import torch

from tests.conftest import SHARED, assert_clean_error, run_cli

CONLL = SHARED / "ner" / "conll2003"
needs_conll = pytest.mark.skipif(not (CONLL / "eng.train.gz").is_file(),
                                 reason=f"CoNLL-2003 not found at {CONLL} (shared data is absent on this machine)")

FIRST = ["alice", "bruno", "chen", "dmitri", "elena", "farah"]
LAST = ["smith", "okafor", "tanaka", "ivanov", "garcia", "haddad"]
PLACES = ["paris", "lagos", "lima", "oslo", "kyoto", "quito"]
FILLER = ["the", "visit", "to", "met", "in", "was", "with", "from", "and", "today"]


def _sentences(n: int, seed: int) -> list[list[tuple[str, str]]]:
    """Words with BIOES tags: two-word people (B-PER E-PER), one-word places (S-GEO), filler (O)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        sent = []
        for _ in range(rng.randint(3, 7)):
            r = rng.random()
            if r < 0.2:
                sent += [(rng.choice(FIRST), "B-PER"), (rng.choice(LAST), "E-PER")]
            elif r < 0.4:
                sent.append((rng.choice(PLACES), "S-GEO"))
            else:
                sent.append((rng.choice(FILLER), "O"))
        out.append(sent)
    return out


def _write_conll(path, sents) -> None:
    lines = ["-DOCSTART-\tO", ""]
    for s in sents:
        lines += [f"{w}\tNN\t{t}" for w, t in s] + [""]
    path.write_text("\n".join(lines))


@pytest.fixture(scope="module")
def ner_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("ner")
    _write_conll(d / "train.conll", _sentences(240, 0))
    _write_conll(d / "dev.conll", _sentences(60, 1))
    run = d / "run"
    proc = run_cli("finetune", "--model", "tiny", "--task", "geo-ner", "--task-kind", "token-classification",
                   "--train-file", str(d / "train.conll"), "--dev-file", str(d / "dev.conll"), "--epochs", "6",
                   "--batch-size", "16", "--lr", "2e-3", "--precision", "fp32", "--output", str(run))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return d, run


def test_unseen_conll_dataset_finetunes_and_scores(ner_run):
    d, run = ner_run
    summary = json.loads((run / "summary.json").read_text())
    assert summary["labels"] == ["O", "B-GEO", "I-GEO", "B-PER", "I-PER"]  # BIOES read as IOB2
    m = summary["metrics"]
    assert m["entity_f1"] > 0.9, m  # the tags are a function of the word: a tiny model learns them
    assert set(m) >= {"entity_precision", "entity_recall", "f1_GEO", "f1_PER", "token_accuracy"}
    preds = json.loads((run / "predictions_dev.json").read_text())
    assert all(len(p) == len(t) for p, t in zip(preds["pred"], preds["tokens"], strict=True))  # a tag per word
    proc = run_cli("evaluate", str(run), "--dev-file", str(d / "dev.conll"), "--task", "geo-ner",
                   "--task-kind", "token-classification", "--precision", "fp32")
    assert proc.returncode == 0, proc.stderr[-2000:]
    again = json.loads(proc.stdout)["metrics"]
    assert again["entity_f1"] == pytest.approx(m["entity_f1"], abs=1e-9)


def test_predict_tags_every_word(ner_run):
    d, run = ner_run
    (d / "sents.jsonl").write_text(json.dumps({"tokens": ["alice", "smith", "met", "oslo"]}) + "\n"
                                   + json.dumps({"text": "the visit to lima"}) + "\n")
    proc = run_cli("predict", str(run), "--input", str(d / "sents.jsonl"), "--output", str(d / "tags"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(x) for x in (d / "tags" / "predictions.jsonl").read_text().splitlines()]
    assert rows[0]["tokens"] == ["alice", "smith", "met", "oslo"]
    assert rows[0]["tags"] == ["B-PER", "I-PER", "O", "B-GEO"]
    assert rows[1]["tags"] == ["O", "O", "O", "B-GEO"] and all(0 < p <= 1 for p in rows[1]["scores"])


def test_prune_scores_heads_with_the_tagging_loss(ner_run):
    d, run = ner_run
    from ptmlab.compress.importance import compute_importance
    from ptmlab.data.encode import encode_split
    from ptmlab.data.tokens import normalise_tags, read_conll, tag_set, to_split
    from ptmlab.models.zoo import load_model, load_tokenizer

    sents = normalise_tags(read_conll(d / "train.conll"))
    split = to_split(sents[:64], tag_set(sents), "train")
    model, tok = load_model(str(run)), load_tokenizer(str(run))
    imp = compute_importance("grad-weight", model, encode_split(tok, split, 64), tok.pad_token_id)
    heads = torch.cat(imp.heads)
    assert torch.isfinite(heads).all() and heads.std() > 0  # gradients of the tagging loss reach every head
    out = d / "pruned"
    proc = run_cli("prune", str(run), "--task", "geo-ner", "--task-kind", "token-classification", "--train-file",
                   str(d / "train.conll"), "--dev-file", str(d / "dev.conll"), "--heads", "0.25",
                   "--recover-epochs", "0", "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["heads"] < s["heads_before"] and "entity_f1" in s["metrics"]


def test_export_refuses_sentence_parity_text_for_a_tagger_with_one_line(ner_run):
    d, run = ner_run
    proc = run_cli("export", str(run), "--format", "onnx", "--task", "tweets", "--output", str(d / "onnx"))
    assert_clean_error(proc, "sentence data", "token-classification model")
    assert not (d / "onnx").exists()


def test_distilled_tagger_keeps_the_teachers_tags(ner_run):
    d, run = ner_run
    out = d / "student"
    proc = run_cli("distill", "--teacher", str(run), "--student", "layers:1", "--task", "geo-ner", "--task-kind",
                   "token-classification", "--train-file", str(d / "train.conll"), "--dev-file",
                   str(d / "dev.conll"), "--epochs", "4", "--batch-size", "16", "--lr", "2e-3", "--precision", "fp32",
                   "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["params"] < s["teacher_params"]
    assert s["retained_pct"] > 90 and s["agreement_with_teacher"] > 0.9, s
    assert s["speedup_b32"] > 0 and s["teacher_latency_b32_ms"] > 0


@pytest.mark.parametrize("rows, needle", [
    ([{"tokens": ["a", "b"], "tags": ["O"]}], "2 tokens but 1 tags"),
    ([{"tokens": ["a"], "tags": ["PERSON"]}], "unknown tag 'PERSON'"),
])
def test_bad_training_data_is_one_line_and_writes_nothing(tmp_path, rows, needle):
    f = tmp_path / "train.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows * 12))
    out = tmp_path / "run"
    proc = run_cli("finetune", "--model", "tiny", "--task", "x", "--task-kind", "token-classification",
                   "--train-file", str(f), "--output", str(out))
    assert_clean_error(proc, needle)
    assert not out.exists()


def test_a_dev_tag_the_training_data_never_had(tmp_path):
    _write_conll(tmp_path / "train.conll", _sentences(20, 0))
    (tmp_path / "dev.conll").write_text("rome\tB-CITY\n")
    out = tmp_path / "run"
    proc = run_cli("finetune", "--model", "tiny", "--task", "x", "--task-kind", "token-classification",
                   "--train-file", str(tmp_path / "train.conll"), "--dev-file", str(tmp_path / "dev.conll"),
                   "--output", str(out))
    assert_clean_error(proc, "'B-CITY' is not in the train tag set")
    assert not out.exists()


@needs_conll
def test_builtin_conll2003_finetunes_and_evaluate_prints_entity_f1(tmp_path):
    run = tmp_path / "R"
    proc = run_cli("finetune", "--model", "tiny", "--task", "conll2003", "--max-train", "64", "--max-eval", "32",
                   "--max-steps", "2", "--no-test", "--output", str(run))
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_cli("evaluate", str(run), "--task", "conll2003", "--max-eval", "32")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["examples"] == 32 and 0 <= result["metrics"]["entity_f1"] <= 1
    assert {"f1_LOC", "f1_MISC", "f1_ORG", "f1_PER"} <= set(result["metrics"])


def test_serve_answers_a_tokens_request_with_tags_per_word(ner_run, tmp_path):
    import httpx

    import ptmlab
    from ptmlab.serve.app import create_app
    from ptmlab.serve.config import ServeConfig
    from ptmlab.serve.server import serve_in_thread
    from ptmlab.serve.state import open_store

    _, run = ner_run
    store = open_store(str(tmp_path / "home"))
    key = store.create_key("tagger", daily_budget=2)
    auth = {"Authorization": f"Bearer {key}"}
    try:
        with serve_in_thread(create_app(str(run), ServeConfig(detector=False), store)) as url:
            r = httpx.post(f"{url}/v1/predict", json={"tokens": ["elena", "garcia", "from", "quito"]}, headers=auth)
            assert r.status_code == 200, r.text
            (p,) = r.json()["predictions"]
            assert p["tokens"] == ["elena", "garcia", "from", "quito"]
            assert p["tags"] == ["B-PER", "I-PER", "O", "B-GEO"]
            assert all(abs(sum(d) - 1) < 1e-3 for d in p["probs"])
            assert [(e["entity_group"], e["word"], e["start"], e["end"]) for e in p["entities"]] == \
                [("PER", "elena garcia", 0, 12), ("GEO", "quito", 18, 23)]
            bad = httpx.post(f"{url}/v1/predict", json={"question": "who?", "context": "x"}, headers=auth)
            assert bad.status_code == 422 and "tags words" in bad.json()["error"]
            text = "the visit to oslo, then"  # words as ptmlab predict splits them: "oslo" and "," apart
            r = httpx.post(f"{url}/v1/predict", json={"texts": [text]}, headers=auth)
            served = r.json()["predictions"][0]
            local = ptmlab.load(run).predict([text])[0]
            assert r.status_code == 200 and served["tokens"] == local["tokens"] == ["the", "visit", "to", "oslo", ",",
                                                                                    "then"]
            assert served["tags"] == local["tags"] and served["tags"][3] == "B-GEO"
            assert [(e["entity_group"], e["start"], e["end"]) for e in served["entities"]] == \
                [(e["entity_group"], e["start"], e["end"]) for e in local["entities"]]
            assert all(text[e["start"]:e["end"]] == e["word"] for e in served["entities"])
            # the same quota path as every request: the key's daily budget of 2 texts is spent
            r = httpx.post(f"{url}/v1/predict", json={"tokens": ["oslo"]}, headers=auth)
            assert r.status_code == 429 and "budget" in r.json()["error"]
            assert httpx.post(f"{url}/v1/predict", json={"tokens": ["oslo"]}).status_code == 401
    finally:
        store.close()


def test_python_api_trains_a_tagger_on_a_datasets_object(tmp_path):
    import datasets

    import ptmlab

    rows = [{"tokens": ["alice", "smith", "in", "oslo"], "ner_tags": ["B-PER", "I-PER", "O", "B-LOC"]}] * 40
    run = ptmlab.finetune("tiny", datasets.Dataset.from_list(rows), task_kind="token-classification",
                          output=str(tmp_path / "run"), epochs=1, batch_size=8, precision="fp32")
    assert run.summary["labels"] == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert 0 <= run.summary["metrics"]["entity_f1"] <= 1
