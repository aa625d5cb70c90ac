"""Multi-label tasks (a list of labels per text) across the toolkit, and integer labels as class ids.

A label column of lists (a JSON list in csv) is read as the task kind ``multi-label``: the classes are the union of
the lists, the head a sigmoid per class trained with binary cross-entropy (the one loop's per-example loss), scored
with micro-F1, macro-F1 and subset accuracy at a decision threshold chosen on dev and saved in the model's config,
which predict, evaluate, serve, distill, prune and export read. Paths that cannot support it refuse in one line.
"""

from __future__ import annotations

import csv
import json
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

import ptmlab
from ptmlab.core.errors import PtmlabError
from ptmlab.data.labels import MULTI_LABEL, THRESHOLD_KEY
from ptmlab.data.loaders import load_source, load_task
from ptmlab.data.metrics import THRESHOLD_GRID, best_threshold, compute_metrics, macro_f1, micro_f1, subset_accuracy
from ptmlab.data.tasks import TASKS
from tests.conftest import GLUE, assert_clean_error, needs_glue, run_cli, run_without_ptmlab

KEYWORDS = {"sport": ["goal", "match", "team", "coach"], "money": ["bank", "price", "market", "loan"],
            "food": ["pizza", "bread", "soup", "cheese"]}
FILLER = ["the", "a", "today", "we", "saw", "news", "about", "it", "was", "big", "small", "people", "said", "then"]
TRAIN_OPTS = dict(max_length=16, batch_size=16, lr=3e-3, epochs=6, seed=0)


def keyword_rows(n: int, seed: int) -> list[dict]:
    """Texts whose labels are the topics of the keywords they hold (each topic with probability 0.4)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        labels = [k for k in KEYWORDS if rng.random() < 0.4]
        words = rng.choices(FILLER, k=rng.randint(3, 6)) + [rng.choice(KEYWORDS[k]) for k in labels]
        rng.shuffle(words)
        rows.append({"text": " ".join(words), "label": labels})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def most_frequent_set_f1(train: list[list[str]], dev: list[list[str]], names: list[str]) -> float:
    """micro-F1 on dev of always predicting the training data's most frequent label set."""
    common = set(Counter(tuple(sorted(x)) for x in train).most_common(1)[0][0])
    pred = [[int(n in common) for n in names] for _ in dev]
    gold = [[int(n in x) for n in names] for x in dev]
    return micro_f1(np.array(pred), np.array(gold))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("topics")
    train, dev = keyword_rows(320, 0), keyword_rows(100, 1)
    return {"train": write_jsonl(folder / "train.jsonl", train), "dev": write_jsonl(folder / "dev.jsonl", dev),
            "train_rows": train, "dev_rows": dev, "folder": folder}


@pytest.fixture(scope="module")
def run(files, tmp_path_factory) -> ptmlab.Run:
    out = tmp_path_factory.mktemp("runs") / "topics"
    return ptmlab.finetune("tiny", task="topics", train_file=files["train"], dev_file=files["dev"], output=str(out),
                           **TRAIN_OPTS)


# ---------------------------------------------------------------------------------------------------- data layer
def test_lists_are_read_as_multi_label_with_the_union_of_their_labels(tmp_path):
    rows = [{"text": f"t{i}", "label": [["pos", "film"], ["neg"], [], ["book", "pos"]][i % 4]} for i in range(12)]
    data = load_source(rows)
    assert data.spec.kind == MULTI_LABEL and data.spec.labels == ("book", "film", "neg", "pos")
    assert data.spec.metrics == ("micro_f1", "macro_f1", "subset_accuracy") and data.spec.num_labels == 4
    labels = data.splits["train"].label
    assert sorted(map(tuple, labels)) == sorted([(0, 1, 0, 1), (0, 0, 1, 0), (0, 0, 0, 0), (1, 0, 0, 1)] * 3)
    # csv holds a label set as a JSON list; the same set whatever the order or repetition
    with open(tmp_path / "train.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        for i in range(12):
            w.writerow([f"t{i}", json.dumps([["a", "b"], ["b", "b"], []][i % 3])])
    from_csv = load_task("csv-topics", train_file=str(tmp_path / "train.csv"))
    assert from_csv.spec.kind == MULTI_LABEL and from_csv.spec.labels == ("a", "b")
    # single labels under --label-kind multi-label are sets of one
    single = load_source([{"text": f"t{i}", "label": "xy"[i % 2]} for i in range(12)], label_kind=MULTI_LABEL)
    assert single.spec.labels == ("x", "y") and single.splits["train"].label[:2] == [[1, 0], [0, 1]]
    # lists are never silently classes; a mix of lists and single labels asks; an unknown dev label names its line
    with pytest.raises(PtmlabError, match="holds lists of labels .*--label-kind multi-label"):
        load_source(rows, label_kind="classification")
    mixed = rows + [{"text": "x", "label": "pos"}]
    with pytest.raises(PtmlabError, match="mixes lists of labels and single labels"):
        load_source(mixed)
    write_jsonl(tmp_path / "tr.jsonl", rows)
    write_jsonl(tmp_path / "dev.jsonl", [{"text": "a", "label": ["pos"]}, {"text": "b", "label": ["tv"]}])
    with pytest.raises(PtmlabError, match=r"dev.jsonl:2: label 'tv' is not in the label set"):
        load_task("t", train_file=str(tmp_path / "tr.jsonl"), dev_file=str(tmp_path / "dev.jsonl"))


def test_integer_labels_keep_their_values_as_class_ids(tmp_path):
    data = load_source([{"text": f"t{i}", "label": [0, 2][i % 2]} for i in range(20)])
    assert data.spec.kind == "classification" and data.spec.labels == ("0", "1", "2")
    assert set(data.splits["train"].label) == {0, 2}  # "2" is class 2, not class 1
    (tmp_path / "ints.csv").write_text("text,label\n" + "".join(f"t{i},{[1, 3][i % 2]}\n" for i in range(20)))
    from_csv = load_task("ints", train_file=str(tmp_path / "ints.csv"))
    assert from_csv.spec.labels == ("0", "1", "2", "3") and set(from_csv.splits["train"].label) == {1, 3}
    # names keep their sorted order, negative integers their numeric order, ClassLabel names their own
    assert load_source([{"text": f"t{i}", "label": "ba"[i % 2]} for i in range(20)]).spec.labels == ("a", "b")
    assert load_source([{"text": f"t{i}", "label": [-1, 1][i % 2]} for i in range(20)]).spec.labels == ("-1", "1")
    with pytest.raises(PtmlabError, match="class ids up to 20000"):
        load_source([{"text": f"t{i}", "label": [0, 20000][i % 2]} for i in range(20)])
    with pytest.raises(PtmlabError, match="1 distinct label"):  # one class in training data is still refused
        load_source([{"text": f"t{i}", "label": 2} for i in range(20)])
    # the GLUE tasks' label names come from their specs, unchanged
    assert TASKS.get("sst2").labels == ("0", "1") and TASKS.get("rte").labels == ("entailment", "not_entailment")


@needs_glue
def test_glue_label_ids_are_unchanged():
    for task, names in (("sst2", ("0", "1")), ("rte", ("entailment", "not_entailment"))):
        data = load_task(task, str(GLUE))
        assert data.spec.labels == names and set(data.splits["dev"].label) == {0, 1}


def test_integer_classes_train_with_their_ids(tmp_path):
    rows = [{"text": ("good fine" if i % 2 else "awful bad") + f" {i}", "label": [0, 2][i % 2]} for i in range(40)]
    run = ptmlab.finetune("tiny", rows, output=str(tmp_path / "ints"), max_steps=4, max_length=16, batch_size=8)
    config = json.loads((run.path / "config.json").read_text())
    assert len(config["id2label"]) == 3 and config["id2label"] == {"0": "0", "1": "1", "2": "2"}
    preds = json.loads((run.path / "predictions_dev.json").read_text())
    assert preds["labels"] == ["0", "1", "2"] and set(preds["gold"]) <= {0, 2}


# ------------------------------------------------------------------------------------------ metrics and losses
def test_metrics_and_the_dev_threshold():
    gold = np.array([[1, 0, 1], [0, 1, 0], [0, 0, 0], [1, 1, 0]])
    pred = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]])
    assert micro_f1(pred, gold) == pytest.approx(2 * 4 / (2 * 4 + 1 + 1))  # TP 4, FP 1, FN 1
    assert macro_f1(pred, gold) == pytest.approx((1 + 1 + 0) / 3)
    assert subset_accuracy(pred, gold) == pytest.approx(2 / 4)
    assert compute_metrics(("micro_f1", "subset_accuracy"), pred, gold) == {
        "micro_f1": pytest.approx(0.8), "subset_accuracy": 0.5}
    probs = np.array([[0.9, 0.1, 0.3], [0.2, 0.6, 0.1], [0.1, 0.1, 0.2], [0.7, 0.8, 0.05]])
    # only thresholds in (0.2, 0.3] get every decision right; of 0.25 and 0.3 the one nearer 0.5 is taken
    assert best_threshold(probs, gold) == 0.3 and 0.3 in THRESHOLD_GRID
    assert micro_f1((probs >= 0.3).astype(int), gold) == 1.0 and micro_f1((probs >= 0.5).astype(int), gold) < 1


def test_the_loop_loss_is_binary_cross_entropy_on_sigmoids():
    from ptmlab.data.batching import collate
    from ptmlab.data.encode import encode_split
    from ptmlab.distill.losses import LossContext, load_losses
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.loop import task_loss

    data = load_source(keyword_rows(20, 3))
    tok = load_tokenizer("tiny")
    torch.manual_seed(0)
    model = load_model("tiny", num_labels=3, multi_label=True, label_names=list(data.spec.labels)).eval()
    assert model.config.problem_type == "multi_label_classification"
    batch = collate(encode_split(tok, data.splits["train"], 16), list(range(6)), tok.pad_token_id)
    assert batch["labels"].dtype == torch.float and batch["labels"].shape == (6, 3)
    with torch.no_grad():
        per_example = task_loss()(model, batch)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    p, y = torch.sigmoid(logits), batch["labels"]
    by_hand = -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean(-1)
    assert per_example.shape == (6,) and torch.allclose(per_example, by_hand, atol=1e-5)
    # distillation: the teacher's sigmoid probabilities are the soft targets (binary KL, T^2-scaled)
    soft_ce = load_losses().get("soft_ce").fn
    t = torch.tensor([[2.0, -1.0, 0.5]])
    s = torch.tensor([[0.0, 1.0, 0.5]])
    ctx = LossContext(torch.ones(1, 4), None, temperature=2.0, multi_label=True)
    assert soft_ce(t, t, ctx).abs().max() < 1e-6
    pt, ps = torch.sigmoid(t / 2), torch.sigmoid(s / 2)
    kl = (pt * torch.log(pt / ps) + (1 - pt) * torch.log((1 - pt) / (1 - ps))).mean(-1) * 4
    assert torch.allclose(soft_ce(s, t, ctx), kl, atol=1e-5)
    hard = LossContext(torch.ones(1, 4), torch.tensor([[1.0, 0.0, 1.0]]), temperature=2.0, alpha=0.0,
                       multi_label=True)
    assert torch.allclose(soft_ce(s, t, hard), torch.nn.functional.binary_cross_entropy_with_logits(
        s, hard.labels, reduction="none").mean(-1))


# ------------------------------------------------------------------------------------------- fine-tune, predict
def test_finetune_learns_label_sets_and_saves_its_dev_threshold(run, files):
    config = json.loads((run.path / "config.json").read_text())
    names = [config["id2label"][str(i)] for i in range(len(config["id2label"]))]
    assert config["problem_type"] == "multi_label_classification" and names == ["food", "money", "sport"]
    threshold = config[THRESHOLD_KEY]
    assert threshold in THRESHOLD_GRID and run.summary["threshold"] == threshold == run.metrics["threshold"]
    assert set(run.metrics) == {"micro_f1", "macro_f1", "subset_accuracy", "threshold"}
    assert run.summary["main_metric"] == "micro_f1"
    baseline = most_frequent_set_f1([r["label"] for r in files["train_rows"]],
                                    [r["label"] for r in files["dev_rows"]], names)
    assert run.metrics["micro_f1"] > baseline + 0.25, (run.metrics, baseline)
    # the saved threshold is the grid's best micro-F1 on dev, and the dev metrics are measured at it
    out = run.predict([r["text"] for r in files["dev_rows"]])
    probs = np.array([[p["scores"][n] for n in names] for p in out])
    gold = np.array([[int(n in r["label"]) for n in names] for r in files["dev_rows"]])
    assert best_threshold(probs, gold) == threshold
    assert micro_f1((probs >= threshold).astype(int), gold) == pytest.approx(run.metrics["micro_f1"], abs=1e-6)
    saved = json.loads((run.path / "predictions_dev.json").read_text())
    assert saved["kind"] == MULTI_LABEL and saved["gold"] == gold.tolist()
    assert saved["pred"] == (probs >= threshold).astype(int).tolist()
    assert "Per-label scores" in (run.path / "report.html").read_text()


def test_predict_returns_label_sets_with_scores(run, files, tmp_path):
    threshold = run.summary["threshold"]
    out = run.predict(["the goal of the team was a loan", "we saw it"])
    for p in out:
        assert set(p) == {"labels", "scores"} and list(p["scores"]) == ["food", "money", "sport"]
        assert p["labels"] == [n for n, s in p["scores"].items() if s >= threshold]
    assert out[0]["labels"] == ["money", "sport"] and out[1]["labels"] == []
    texts = [r["text"] for r in files["dev_rows"][:12]]
    expected = run.predict(texts)
    assert len({tuple(p["labels"]) for p in expected}) > 2  # several different label sets
    inp = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    for fmt in ("jsonl", "csv"):
        proc = run_cli("predict", str(run.path), "--input", inp, "--output", str(tmp_path / fmt), "--format", fmt)
        assert proc.returncode == 0, proc.stderr[-2000:]
        text = (tmp_path / fmt / f"predictions.{fmt}").read_text()
        if fmt == "jsonl":
            rows = [json.loads(line) for line in text.splitlines()]
            assert [r["labels"] for r in rows] == [p["labels"] for p in expected]
            assert [r["scores"] for r in rows] == [pytest.approx(p["scores"], abs=1e-5) for p in expected]
        else:
            rows = list(csv.DictReader(text.splitlines()))
            assert [json.loads(r["labels"]) for r in rows] == [p["labels"] for p in expected]
            assert [float(r["prob_food"]) for r in rows] == pytest.approx([p["scores"]["food"] for p in expected],
                                                                         abs=1e-5)


def test_evaluate_scores_at_the_saved_threshold(run, files, tmp_path):
    result = ptmlab.evaluate(run)  # the run's own dev file
    assert result["metrics"] == pytest.approx(run.metrics)
    # a dev csv whose label sets name the labels in another order (and one label not at all) reads in the model's
    rows = files["dev_rows"]
    with open(tmp_path / "dev.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        for r in rows:
            w.writerow([r["text"], json.dumps([x for x in reversed(r["label"]) if x != "food"])])
    other = ptmlab.evaluate(run, dev_file=str(tmp_path / "dev.csv"))
    names = ["food", "money", "sport"]
    out = run.predict([r["text"] for r in rows])
    pred = np.array([[int(n in p["labels"]) for n in names] for p in out])
    gold = np.array([[int(n in r["label"] and n != "food") for n in names] for r in rows])
    assert other["metrics"]["micro_f1"] == pytest.approx(micro_f1(pred, gold))


# --------------------------------------------------------------------------------- distill, prune, export, serve
def test_distill_learns_the_teachers_sigmoid_probabilities(run, files, tmp_path):
    student = ptmlab.distill(run, task="topics", train_file=files["train"], dev_file=files["dev"],
                             student="layers:1", output=str(tmp_path / "student"), alpha=0.5, **TRAIN_OPTS)
    config = json.loads((student.path / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification" and len(config["id2label"]) == 3
    assert config[THRESHOLD_KEY] == student.summary["threshold"] == student.metrics["threshold"]
    assert student.summary["teacher_metrics"]["micro_f1"] == pytest.approx(run.metrics["micro_f1"])
    assert student.summary["final_losses"]["soft_ce"] >= 0
    # agreement counts whole label sets (the teacher's side read from its cached fp16 logits: a set at the threshold
    # may differ from the fp32 one)
    names = ["food", "money", "sport"]
    texts = [r["text"] for r in files["dev_rows"]]
    same = [a["labels"] == b["labels"] for a, b in zip(run.predict(texts), student.predict(texts), strict=True)]
    assert student.summary["agreement_with_teacher"] == pytest.approx(np.mean(same), abs=0.021)
    baseline = most_frequent_set_f1([r["label"] for r in files["train_rows"]],
                                    [r["label"] for r in files["dev_rows"]], names)
    assert student.metrics["micro_f1"] > baseline + 0.2


def test_prune_recovers_with_the_multi_label_loss(run, files, tmp_path):
    pruned = ptmlab.prune(run, task="topics", train_file=files["train"], dev_file=files["dev"], heads=0.25,
                          recover_epochs=1, distill_alpha=0.5, output=str(tmp_path / "pruned"), max_length=16,
                          batch_size=16)
    config = json.loads((pruned.path / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification" and THRESHOLD_KEY in config
    assert pruned.summary["heads"] < pruned.summary["heads_before"]
    assert set(pruned.summary["dev_unpruned"]) == set(run.metrics)
    assert pruned.summary["dev_unpruned"]["micro_f1"] == pytest.approx(run.metrics["micro_f1"])
    assert pruned.metrics["micro_f1"] > 0.5 and "soft_ce" in pruned.summary["recovery_loss"]


def test_export_loads_in_a_stock_pipeline_with_sigmoid(run, files, tmp_path):
    out = ptmlab.export(run, str(tmp_path / "hf"), task="topics", dev_file=files["dev"])
    config = json.loads((Path(out) / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification"
    assert config[THRESHOLD_KEY] == run.summary["threshold"]
    parity = json.loads((Path(out) / "parity.json").read_text())
    assert parity["label_agreement"] == 1.0 and parity["max_abs_logit_diff"] < 1e-4
    texts = ["pizza and a bank", "the match", "we saw it"]
    code = (f"from transformers import pipeline\n"
            f"pipe = pipeline('text-classification', model={str(out)!r}, function_to_apply='sigmoid', top_k=None)\n"
            f"print(json.dumps({{'out': pipe({texts!r})}}))\n")
    got = run_without_ptmlab(code, tmp_path)["out"]
    for mine, theirs in zip(run.predict(texts), got, strict=True):
        scores = {d["label"]: d["score"] for d in theirs}
        assert scores == pytest.approx(mine["scores"], abs=1e-4)


def test_serve_answers_the_label_set(run, store):
    import httpx

    from ptmlab.serve.app import create_app
    from ptmlab.serve.config import ServeConfig
    from ptmlab.serve.server import serve_in_thread

    key = store.create_key("alice")
    texts = ["pizza and a bank", "the match", "we saw it"]
    expected = run.predict(texts)
    for policy in ("probs", "label"):
        cfg = ServeConfig(detector=False, output_policy=policy, precision="fp32")
        with serve_in_thread(create_app(str(run.path), cfg, store)) as url:
            r = httpx.post(f"{url}/v1/predict", json={"texts": texts}, headers={"Authorization": f"Bearer {key}"},
                           timeout=30)
            health = httpx.get(f"{url}/healthz").json()
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["label_names"] == ["food", "money", "sport"]
        assert [p["labels"] for p in body["predictions"]] == [p["labels"] for p in expected]
        for p, mine in zip(body["predictions"], expected, strict=True):
            assert p["label_ids"] == [body["label_names"].index(n) for n in p["labels"]]
            if policy == "probs":  # each label's own sigmoid probability
                assert p["probs"] == pytest.approx([mine["scores"][n] for n in body["label_names"]], abs=2e-3)
            else:
                assert p["probs"] is None
        assert health["tasks"][0]["kind"] == MULTI_LABEL and health["tasks"][0]["threshold"] == run.summary["threshold"]


# ------------------------------------------------------------------------------------------ single-label paths
def test_single_label_paths_refuse_multi_label_in_one_line(run, files, tmp_path):
    proc = run_cli("finetune", "--model", "tiny", "--task", "topics", "--train-file", files["train"], "--dev-file",
                   files["dev"], "--long-strategy", "chunk", "--output", str(tmp_path / "long"))
    assert_clean_error(proc, "multi-label tasks are not supported by --long-strategy chunk")
    assert not (tmp_path / "long").exists()
    from ptmlab.extraction.extract import ExtractConfig, run_extract

    with pytest.raises(PtmlabError, match="multi-label tasks are not supported by extraction"):
        run_extract(ExtractConfig(victim="http://127.0.0.1:9", key="k", task="topics", train_file=files["train"],
                                  dev_file=files["dev"], output=str(tmp_path / "x")))
    proc = run_cli("analyze", "layers", str(run.path), "--task", "topics", "--train-file", files["train"],
                   "--dev-file", files["dev"], "--output", str(tmp_path / "an"))
    assert_clean_error(proc, "multi-label tasks are not supported by the analyses")
    # a single-label teacher for a multi-label task, and a multi-label model on single-label data
    single = [{"text": r["text"], "label": (r["label"] or ["none"])[0]} for r in files["train_rows"]]
    names3 = [r for r in single if r["label"] in ("food", "money", "sport")]
    one = ptmlab.finetune("tiny", names3, output=str(tmp_path / "single"), max_steps=2, max_length=16)
    with pytest.raises(PtmlabError, match="single-label classifier but task 'topics' is multi-label"):
        ptmlab.distill(one, task="topics", train_file=files["train"], dev_file=files["dev"], student="layers:1",
                       output=str(tmp_path / "d"), max_steps=1)
    with pytest.raises(PtmlabError, match="answers label sets per text but task .* is classification"):
        ptmlab.evaluate(run, names3)


# -------------------------------------------------------------------------------------------------- real data
DOMAINS = GLUE.parent / "domains"
# each review's label set: its kind of product (film for the dvd and imdb reviews) and "positive" when it is one
DOMAIN_TAGS = {"books": "books", "dvd": "film", "imdb": "film", "electronics": "electronics", "airline": "travel"}


def domain_rows(per_domain: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for name, tag in DOMAIN_TAGS.items():
        with open(DOMAINS / f"{name}.tsv", newline="", encoding="utf-8") as f:
            reviews = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        rows += [{"text": r["text"], "label": [tag] + (["positive"] if r["label"] == "1" else [])}
                 for r in rng.sample(reviews, per_domain)]
    rng.shuffle(rows)
    return rows


@pytest.mark.slow
@pytest.mark.skipif(not all((DOMAINS / f"{d}.tsv").is_file() for d in DOMAIN_TAGS),
                    reason=f"the shared domain reviews are not at {DOMAINS}")
def test_minilm_learns_review_label_sets_well_above_the_most_frequent_set(tmp_path):
    rows = domain_rows(48, 0)
    dev, train = rows[:60], rows[60:]
    run = ptmlab.finetune("minilm", {"train": train, "dev": dev}, output=str(tmp_path / "reviews"), max_length=48,
                          batch_size=16, lr=2e-4, epochs=2, seed=0)
    names = run.summary["labels"]
    assert names == ["books", "electronics", "film", "positive", "travel"]
    baseline = most_frequent_set_f1([r["label"] for r in train], [r["label"] for r in dev], names)
    assert baseline < 0.45 and run.metrics["micro_f1"] > baseline + 0.25, (run.metrics, baseline)
    common = Counter(tuple(sorted(r["label"])) for r in train).most_common(1)[0][0]
    assert run.metrics["subset_accuracy"] > np.mean([tuple(sorted(r["label"])) == common for r in dev])
