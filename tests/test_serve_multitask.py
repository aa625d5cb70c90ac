"""``ptmlab serve`` on a multi-task run: every head answers by name with its own labels (a score from the
STS-B head), the answers are the model's own head outputs and score as ``ptmlab evaluate`` scores each task, the
batcher never mixes tasks in one forward pass, an unknown task is a 422 naming the tasks, and a single-task server
accepts only its own task."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf

import pytest
import torch
from fastapi.testclient import TestClient

from ptmlab.core.config import build_config
from ptmlab.serve.app import create_app
from ptmlab.serve.config import ServeConfig
from tests.conftest import needs_glue

pytestmark = needs_glue  # the run's mrpc and stsb heads are trained on GLUE subsets

SMALL = dict(model="tiny", max_train=48, max_eval=24, max_length=32, batch_size=16, epochs=1.0, eval_batch_size=64,
             seed=3)
TASKS = ["tweets", "mrpc", "stsb"]


@pytest.fixture(scope="module")
def mt_run(tmp_path_factory):
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    out = tmp_path_factory.mktemp("mt") / "run"
    run_finetune(build_config(FinetuneConfig, {**SMALL, "tasks": TASKS, "output": str(out)}))
    return out


@pytest.fixture
def served(mt_run, store):
    """(client, key) of the multi-task run served in-process at fp32 (so answers equal a plain forward pass)."""
    key = store.create_key("mt", rate=1000, burst=1000)
    app = create_app(str(mt_run), ServeConfig(detector=False, precision="fp32", max_wait_ms=50), store)
    with TestClient(app) as client:
        yield client, key


def post(client, key, body):
    return client.post("/v1/predict", json=body, headers={"Authorization": f"Bearer {key}"})


def dev(task: str):
    """The dev examples ``ptmlab evaluate RUN --task TASK --max-eval 24 --seed 3`` scores."""
    import dataclasses

    from ptmlab.commands.evaluate import EvaluateConfig
    from ptmlab.data.taskdata import load_task_data

    # fp32 as the server runs: evaluate's 'auto' is bf16 on AMX/AVX512-BF16 CPUs (as on CI), which moves the
    # near-constant STS-B scores of a barely trained tiny head enough to change their correlation
    cfg = build_config(EvaluateConfig, {"max_eval": 24, "max_length": 32, "seed": 3, "precision": "fp32"})
    return cfg, load_task_data(dataclasses.replace(cfg, task=task), need_train=False)


def head_outputs(run, task: str, texts: list[str], pairs: list[str] | None) -> torch.Tensor:
    """The model's own ``task`` head on the texts, one at a time (no padding): logits."""
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.multitask import set_task

    model, tok = load_model(str(run)), load_tokenizer(str(run))
    model.eval()
    set_task(model, task)
    rows = []
    with torch.inference_mode():
        for i, t in enumerate(texts):
            enc = tok(t, pairs[i] if pairs else None, truncation=True, max_length=32, return_tensors="pt")
            rows.append(model(**enc).logits[0].float())
    return torch.stack(rows)


def test_healthz_lists_every_task_with_its_own_labels(served):
    client, _ = served
    health = client.get("/healthz").json()
    assert [t["name"] for t in health["tasks"]] == TASKS and health["task"] == "tweets"
    by = {t["name"]: t for t in health["tasks"]}
    assert by["tweets"]["labels"] == ["negative", "neutral", "positive"] and by["tweets"]["pair"] is False
    assert by["mrpc"]["labels"] == ["0", "1"] and by["mrpc"]["pair"] is True
    assert by["stsb"]["kind"] == "regression" and by["stsb"]["labels"] == [] and by["stsb"]["pair"] is True
    assert "tweets, mrpc, stsb" in client.get("/openapi.json").json()["info"]["description"]


@pytest.mark.parametrize("task", TASKS)
def test_each_head_answers_as_the_model_head_does(mt_run, served, task):
    client, key = served
    _, data = dev(task)
    split = data.split("dev")
    texts, pairs = split.text[:6], split.text_pair[:6] if split.text_pair else None
    r = post(client, key, {"texts": texts, **({"text_pairs": pairs} if pairs else {}), "task": task})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["task"] == task and len(body["predictions"]) == 6
    logits = head_outputs(mt_run, task, texts, pairs)
    if task == "stsb":
        assert body["label_names"] == []
        got = torch.tensor([p["score"] for p in body["predictions"]])
        assert torch.allclose(got, logits[:, 0], atol=1e-4)
        assert got.std() > 0  # a score per pair, not a constant
        return
    names = {"tweets": ["negative", "neutral", "positive"], "mrpc": ["0", "1"]}[task]
    assert body["label_names"] == names
    probs = torch.tensor([p["probs"] for p in body["predictions"]])
    assert probs.shape == (6, len(names))
    assert torch.allclose(probs, torch.softmax(logits, -1), atol=1e-4)
    assert [p["label"] for p in body["predictions"]] == [names[i] for i in logits.argmax(-1).tolist()]


def test_served_answers_score_as_ptmlab_evaluate_scores_each_task(mt_run, served):
    """Serve each task's whole dev subset and score the answers with the task's metrics: the numbers equal
    ``ptmlab evaluate``'s for that head (evaluate_tasks is what the command runs on a multi-task run)."""
    from ptmlab.data.metrics import compute_metrics
    from ptmlab.train.multitask import evaluate_tasks

    client, key = served
    cfg, _ = dev("tweets")
    evaluated = evaluate_tasks(str(mt_run), cfg, None)["tasks"]
    for task in TASKS:
        _, data = dev(task)
        split = data.split("dev")
        r = post(client, key, {"texts": split.text, "task": task,
                               **({"text_pairs": split.text_pair} if split.text_pair else {})})
        assert r.status_code == 200, r.text
        preds = r.json()["predictions"]
        answers = [p["score"] for p in preds] if task == "stsb" else [p["label_id"] for p in preds]
        metrics = compute_metrics(data.spec.metrics, torch.tensor(answers).numpy(), torch.tensor(split.label).numpy())
        assert metrics == pytest.approx(evaluated[task]["metrics"], abs=1e-5)


def test_without_a_task_the_first_head_answers_and_says_so(served):
    client, key = served
    texts = ["what a lovely morning", "this is awful"]
    plain, named = post(client, key, {"texts": texts}), post(client, key, {"texts": texts, "task": "tweets"})
    assert plain.status_code == named.status_code == 200
    assert plain.json()["task"] == "tweets" and plain.json()["label_names"] == ["negative", "neutral", "positive"]
    assert plain.json()["predictions"] == named.json()["predictions"]


def test_unknown_task_and_mismatched_fields_are_422_and_not_charged(served, store):
    client, key = served
    cases = [({"texts": ["x"], "task": "rte"}, "unknown task 'rte'"),
             ({"texts": ["x"], "task": ""}, "tweets, mrpc, stsb"),
             ({"texts": ["x"], "task": "mrpc"}, "task 'mrpc' takes sentence pairs"),
             ({"texts": ["x"], "text_pairs": ["y"], "task": "tweets"}, "task 'tweets' takes single sentences"),
             ({"texts": ["x"], "task": ["mrpc"]}, "'task'")]
    for body, needle in cases:
        r = post(client, key, body)
        assert r.status_code == 422 and needle in r.json()["error"], (body, r.text)
    assert "tweets, mrpc, stsb" in post(client, key, {"texts": ["x"], "task": "rte"}).json()["error"]
    assert store.used_today(store.resolve_key("mt").id) == 0  # refused before admission: nothing charged
    assert post(client, key, {"texts": ["x"], "text_pairs": ["y"], "task": "stsb"}).status_code == 200
    assert store.used_today(store.resolve_key("mt").id) == 1
    admin = store.create_key("ops", scopes="admin")
    metrics = client.get("/metrics", headers={"Authorization": f"Bearer {admin}"}).text
    assert 'ptmlab_rejects_total{reason="invalid"} 6' in metrics


def test_concurrent_requests_for_different_tasks_match_single_requests(served):
    client, key = served
    reqs = [{"texts": [f"sentence number {i}"], "task": "tweets"} if i % 3 == 0 else
            {"texts": [f"sentence number {i}"], "text_pairs": [f"another one {i}"], "task": TASKS[i % 3]}
            for i in range(18)]
    alone = [post(client, key, r).json()["predictions"] for r in reqs]
    with cf.ThreadPoolExecutor(9) as pool:
        together = list(pool.map(lambda r: post(client, key, r).json()["predictions"], reqs))
    for a, b, r in zip(alone, together, reqs, strict=True):
        field = "score" if r["task"] == "stsb" else "probs"
        assert a[0][field] == pytest.approx(b[0][field], abs=1e-4), r


def test_batcher_runs_one_head_per_forward_pass(mt_run):
    """Jobs of three tasks collected into one batch: each task's jobs form their own pass through their own head,
    and every job gets the answer it gets alone."""
    from ptmlab.serve.batcher import Batcher
    from ptmlab.serve.predictor import Predictor

    predictor = Predictor(mt_run, precision="fp32")
    calls: list[tuple[str | None, int]] = []

    def forward(encs, task=None):
        calls.append((task, len(encs)))
        return predictor.forward(encs, task)

    jobs = [(TASKS[i % 3], predictor.encode([f"text {i}"], None if i % 3 == 0 else [f"pair {i}"])) for i in range(9)]

    async def run_all():
        batcher = Batcher(forward, max_batch=32, max_wait=0.5)
        try:
            return await asyncio.gather(*(batcher.submit(encs, task) for task, encs in jobs))
        finally:
            batcher.close()

    answers = asyncio.run(run_all())
    assert sorted(calls) == [("mrpc", 3), ("stsb", 3), ("tweets", 3)]  # one pass per task, nothing mixed
    for (task, encs), got in zip(jobs, answers, strict=True):
        assert got[0] == pytest.approx(predictor.forward(encs, task)[0], abs=1e-5)
        assert len(got[0]) == {"tweets": 3, "mrpc": 2, "stsb": 1}[task]


def test_single_task_server_accepts_only_its_own_task(store):
    from tests.test_serve_support import train_victim

    victim = train_victim()
    key = store.create_key("single")
    with TestClient(create_app(str(victim), ServeConfig(detector=False), store)) as client:
        plain = post(client, key, {"texts": ["great film"]})
        same = post(client, key, {"texts": ["great film"], "task": "synthetic"})
        other = post(client, key, {"texts": ["great film"], "task": "mrpc"})
        health = client.get("/healthz").json()
    assert plain.status_code == same.status_code == 200
    assert plain.json()["predictions"] == same.json()["predictions"] and plain.json()["task"] == "synthetic"
    assert other.status_code == 422 and "task 'synthetic' only" in other.json()["error"]
    assert health["tasks"] == [{"name": "synthetic", "kind": "classification", "labels": ["neg", "pos"],
                                "pair": None}]


def test_watermark_records_are_kept_per_head(mt_run, store):
    """On a multi-task server each head's watermark records are its own: the same text asked of two heads leaves
    two records (hashed with the head's name), and verification names the head the queries went to."""
    from ptmlab.core.errors import PtmlabError
    from ptmlab.serve.defences import verify_watermark
    from ptmlab.serve.state import text_hash

    key = store.create_key("wm", rate=1000, burst=1000)
    app = create_app(str(mt_run), ServeConfig(detector=False, precision="fp32", max_wait_ms=50, watermark_rate=0.2),
                     store)
    things = ("food", "film", "staff", "room", "song", "show", "book", "hotel", "game", "talk", "meal", "trip", "bar",
              "park", "class")
    words = ("great", "awful", "fine", "dull", "superb", "poor", "lovely", "bad")
    texts = [f"the {w} was {v}" for w in things for v in words]  # 120 texts: about 24 marks and 24 controls
    with TestClient(app) as client:
        for task in (None, "tweets"):  # the default head is tweets: records under its name either way
            for part in (texts[:60], texts[60:]):
                r = post(client, key, {"texts": part, **({"task": task} if task else {})})
                assert r.status_code == 200, r.text
    rows = store.watermarks()
    assert rows and all(r.query_hash in {text_hash(t, None, "tweets") for t in texts} for r in rows)
    assert not {r.query_hash for r in rows} & {text_hash(t) for t in texts}  # not the single-task hash
    assert len(rows) == 2 * len({r.query_hash for r in rows})  # asked twice of one head: the same records twice
    marks = sum(r.kind == "mark" for r in rows) // 2
    res = verify_watermark(str(mt_run), store, texts, task="tweets")
    assert res["marks"] == marks and res["controls"] == len(rows) // 2 - marks
    assert res["mark_match_rate"] == 0.0 and not res["watermarked"]  # the victim itself gives the true labels
    with pytest.raises(PtmlabError, match="name it"):
        verify_watermark(str(mt_run), store, texts)  # records of a head, looked for without one
