"""Extraction against a served tiny victim: query generators, 429 handling, copy training, defences."""

from __future__ import annotations

import csv
import json
import random
import sys

import pytest

from ptmlab.core.errors import PtmlabError
from ptmlab.data.loaders import Split
from ptmlab.extraction.client import VictimClient
from ptmlab.extraction.extract import ExtractConfig, run_extract
from ptmlab.extraction.queries import make_queries, vocabulary
from ptmlab.serve import flag_keys, verify_watermark
from ptmlab.serve.app import create_app
from ptmlab.serve.config import ServeConfig
from ptmlab.serve.server import serve_in_thread
from ptmlab.serve.state import open_store, text_hash
from tests.conftest import assert_clean_error, run_cli


def _cfg(victim, out, **kw) -> ExtractConfig:
    data = victim.parent / "data"
    base = dict(model="tiny", task="synthetic", train_file=str(data / "train.csv"), dev_file=str(data / "dev.csv"),
                query_strategy="task", budget=300, epochs=4, batch_size=16, lr=1e-3, max_length=32, seed=0,
                output=str(out), victim="http://unused", key="unused", logging_steps=50)
    base.update(kw)
    return ExtractConfig(**base)


def test_query_generators_follow_the_paper(tmp_path):
    train = Split(["a b c d", "one two three four five six", "x y"] * 10, None, [0, 1, 0] * 10)
    texts, pairs = make_queries("random", 500, train, 0, pair=False)
    vocab = set(vocabulary())
    assert len(vocabulary()) >= 9_900 and pairs is None
    assert all(w in vocab for t in texts for w in t.split())
    assert {len(t.split()) for t in texts} == {2, 4, 6}  # lengths drawn from the task's texts
    assert len(set(texts)) == 500
    texts, pairs = make_queries("random", 50, train, 0, pair=True)
    changed = [sum(a != b for a, b in zip(t.split(), p.split(), strict=True))
               for t, p in zip(texts, pairs, strict=True)]
    assert max(changed) <= 3 and sum(changed) > 0
    corpus = tmp_path / "c.txt"
    corpus.write_text("= Title =\nThe cat sat on the mat. It was a sunny day in the park.\nShort one.\n")
    texts, _ = make_queries("wiki", 20, train, 1, pair=False, corpus=str(corpus))
    assert all(t.split()[0] in ("The", "It") for t in texts)
    texts, _ = make_queries("task", 30, train, 2, pair=False)
    assert sorted(texts) == sorted(train.text)
    with pytest.raises(PtmlabError, match="budget"):
        make_queries("task", 31, train, 2, pair=False)
    with pytest.raises(PtmlabError, match="corpus"):
        make_queries("wiki", 5, train, 0, pair=False, corpus=str(tmp_path / "none"))


def test_extraction_copies_the_victim_and_respects_rate_limits(victim, tmp_path, monkeypatch):
    store = open_store(str(tmp_path / "home"))
    key = store.create_key("thief", rate=60, burst=40)  # texts per second, texts at once
    with serve_in_thread(create_app(str(victim), ServeConfig(detector=False), store)) as url:
        typed = ["ptmlab", "extract", "--victim", url.replace("://", "://user:hunter2@"), "--key", key,
                 f"--key={key}", "--output", str(tmp_path / "copy")]
        monkeypatch.setattr(sys, "argv", typed)  # the command line the run records
        client = VictimClient(url, key, chunk=32)
        s = run_extract(_cfg(victim, tmp_path / "copy", curve=["60"]), client)
    assert s["soft_labels"] and s["policy"] == "probs"
    assert s["rate_limited"] > 0 and s["waited_seconds"] >= 1  # 429s were waited out, not fatal
    assert s["agreement"] >= 0.85 and s["metrics"]["accuracy"] >= 0.8
    assert s["victim_metrics"]["accuracy"] >= 0.9
    assert [p["budget"] for p in s["curve"]] == [60, 300]
    assert s["eval_queries"] == 100
    kid = store.resolve_key("thief").id
    assert store.usage(kid)[kid]["queries"] == 300 + 100  # every query (and the dev labelling) was charged
    for f in ("summary.json", "config.yaml", "queries.json", "model.safetensors", "report.html",
              "curve/budget-60/summary.json"):
        assert (tmp_path / "copy" / f).is_file(), f
    assert "key: '***'" in (tmp_path / "copy" / "config.yaml").read_text()  # the API key is not written
    recorded = json.loads((tmp_path / "copy" / "summary.json").read_text())["provenance"]["command_line"]
    assert key not in recorded and "hunter2" not in recorded
    assert "--key '***'" in recorded or "--key ***" in recorded
    assert not any(key in f.read_text(errors="ignore") for f in (tmp_path / "copy").rglob("*") if f.is_file()
                   and f.suffix in (".json", ".yaml", ".md", ".html", ".jsonl"))


def test_label_only_policy_gives_hard_labels(victim, tmp_path):
    store = open_store(str(tmp_path / "home"))
    key = store.create_key("thief")
    with serve_in_thread(create_app(str(victim), ServeConfig(detector=False, output_policy="label"), store)) as url:
        s = run_extract(_cfg(victim, tmp_path / "copy", budget=200, epochs=2, victim_run=str(victim)),
                        VictimClient(url, key))
    assert not s["soft_labels"] and s["policy"] == "label" and s["eval_queries"] == 0
    assert 0.5 <= s["agreement"] <= 1.0


def test_detector_flags_the_random_query_key(victim, tmp_path):
    store = open_store(str(tmp_path / "home"))
    thief, user = store.create_key("thief"), store.create_key("user")
    rng = random.Random(0)
    with open(victim.parent / "data" / "dev.csv") as f:
        real = [r["text"] for r in csv.DictReader(f)][:60]
    train = Split(real, None, None)
    fake, _ = make_queries("random", 60, train, 0, pair=False)
    with serve_in_thread(create_app(str(victim), ServeConfig(), store)) as url:
        VictimClient(url, thief).query(fake)
        VictimClient(url, user).query(rng.sample(real, len(real)))
    rows = {r["name"]: r for r in flag_keys(store, min_queries=20)}
    assert rows["thief"]["flagged"] and not rows["user"]["flagged"]
    assert rows["thief"]["mean_score"] > 0.5 > rows["user"]["mean_score"]


def test_watermark_is_recorded_and_verified(victim, tmp_path):
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    store = open_store(str(tmp_path / "home"))
    key = store.create_key("thief")
    train = Split(["a"], None, None)
    texts, _ = make_queries("random", 400, train, 0, pair=False)
    texts = [t + " " + w for t, w in zip(texts, ["great", "awful"] * 200, strict=True)]
    with serve_in_thread(create_app(str(victim), ServeConfig(detector=False, watermark_rate=0.1), store)) as url:
        answers = VictimClient(url, key).query(texts)
    marks = [r for r in store.watermarks() if r.kind == "mark"]
    assert 20 <= len(marks) <= 70 and all(r.given_label != r.true_label for r in marks)
    by_hash = {text_hash(t): label for t, label in zip(texts, answers.labels, strict=True)}
    assert all(by_hash[r.query_hash] == r.given_label for r in marks)  # the API really answered the wrong label
    raw = b"".join(p.read_bytes() for p in store.home.glob("state.db*"))
    assert not any(t.encode() in raw for t in texts)  # only hashes of the queries are stored
    clean = verify_watermark(str(victim), store, texts)
    assert not clean["watermarked"] and clean["mark_match_rate"] < 0.2
    # a model that memorised the API's answers on these queries (marks included) is caught
    names = answers.label_names
    data = tmp_path / "stolen.csv"
    with open(data, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        records = {r.query_hash: r for r in store.watermarks()}
        w.writerows([t, names[records[text_hash(t)].given_label]] for t in texts if text_hash(t) in records)
    run_finetune(FinetuneConfig(model="tiny", task="stolen", train_file=str(data), dev_file=str(data), epochs=40,
                                batch_size=16, lr=3e-3, max_length=32, output=str(tmp_path / "stolen"), seed=0,
                                logging_steps=100, eval_steps=10_000, test=False, precision="fp32"))
    caught = verify_watermark(str(tmp_path / "stolen"), store, texts)
    assert caught["watermarked"] and caught["p_value"] < 0.01 and caught["mark_match_rate"] > 0.5, caught


def test_extract_cli_errors_are_one_line(tmp_path):
    assert_clean_error(run_cli("extract", "--task", "sst2", "--output", str(tmp_path / "o")), "--victim")
    assert_clean_error(run_cli("extract", "verify-watermark", str(tmp_path), env={"PTMLAB_HOME": str(tmp_path)}),
                       "--queries")
    (tmp_path / "q.txt").write_text("one query\n")
    assert_clean_error(run_cli("extract", "verify-watermark", str(tmp_path), "--queries", str(tmp_path / "q.txt"),
                               env={"PTMLAB_HOME": str(tmp_path)}), "watermark")


def test_study_reports_adaptive_attacks_and_false_alarms(victim, tmp_path):
    import json

    from ptmlab.studies.extraction import run as run_study

    data = victim.parent / "data"
    out = tmp_path / "study"
    rc = run_study(["--victim", str(victim), "--task", "synthetic", "--train-file",
                    str(data / "train.csv"), "--dev-file", str(data / "dev.csv"), "--model", "tiny",
                    "--budgets", "90", "--strategies", "random", "--epochs", "1", "--max-eval", "50",
                    "--max-length", "32", "--defences", "vote,padded,false-alarms",
                    "--false-alarm-texts", "60", "--output", str(out)])
    assert rc == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    by = {(r["strategy"], r["defence"]): r for r in rows}
    assert by[("random", "none")]["agreement"] is not None
    vote = by[("vote x3 variants", "watermark 10%")]["cost_to_users"]
    marked = int(vote.split("/")[1].split()[0])
    assert marked > 0 and vote.startswith(f"{marked}/{marked} marks survive")  # the vote removes no mark
    assert by[("padded", "detector (block)")]["cost_to_users"].startswith("blocked after")
    legit = [r for r in rows if r["strategy"].startswith("legitimate")]
    assert "legitimate tweets" in {r["strategy"] for r in legit}
    assert all("key flagged: False" in r["cost_to_users"] for r in legit)  # no legitimate key is flagged


def test_study_scores_agreement_on_the_unlabelled_test_split_too(victim, tmp_path):
    import json

    from ptmlab.extraction.extract import run_labels
    from ptmlab.studies.extraction import run as run_study

    data = victim.parent / "data"
    with open(data / "dev.csv", newline="") as f:
        texts = [r["text"] for r in csv.DictReader(f)]
    test_file = tmp_path / "test.csv"
    with open(test_file, "w", newline="") as f:  # no label column: agreement needs none
        w = csv.writer(f)
        w.writerow(["text"])
        w.writerows([[t[::-1]] for t in texts[:40]])
    out = tmp_path / "study"
    args = ["--victim", str(victim), "--task", "synthetic", "--train-file", str(data / "train.csv"), "--dev-file",
            str(data / "dev.csv"), "--test-file", str(test_file), "--model", "tiny", "--budgets", "60",
            "--strategies", "random", "--epochs", "1", "--max-eval", "30", "--max-length", "32", "--defences", "",
            "--agreement-on", "dev,test", "--output", str(out)]
    assert run_study(args) == 0
    record = json.loads((out / "results.json").read_text())
    assert record["agreement_examples"] == {"dev": 30, "test": 40}
    pred = json.loads((out / "random-60" / "predictions_test.json").read_text())
    assert len(pred["victim"]) == len(pred["copy"]) == 40
    from ptmlab.data.loaders import load_task
    test = load_task("synthetic", None, str(data / "train.csv"), None, str(test_file)).splits["test"]
    assert pred["victim"] == run_labels(str(victim), test, 32, 64)  # the victim's own labels of those sentences
    dev = json.loads((out / "random-60" / "predictions_dev.json").read_text())
    both = [float(c == v) for c, v in zip(dev["copy"] + pred["copy"], dev["victim"] + pred["victim"], strict=True)]
    assert record["estimate"]["value"] == pytest.approx(sum(both) / 70)
    assert record["reason"].startswith("dev+test agreement of the RANDOM copy")
    for splits, test_args in (("dev,train", ["--test-file", str(test_file)]), ("test", ["--test-file", str(test_file)]),
                              ("dev,test", [])):  # an unknown split, no dev, a task without a test split
        bad = [x for x in args if x not in ("--test-file", str(test_file))][:-4] + test_args + [
            "--agreement-on", splits, "--output", str(tmp_path / "bad")]
        with pytest.raises(PtmlabError, match="--agreement-on"):
            run_study(bad)
        assert not (tmp_path / "bad").exists()  # refused before anything was trained or written
