"""Serving that holds: one bad request harms no other, model resolution never guesses, a locked store
answers 503 without stalling the event loop, authentication comes before the body, defences resist adaptive
attackers, and the smaller faults of point 6."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import shutil
import socket
import sqlite3
import stat
import time

import httpx
import pytest
from safetensors.torch import load_file, save_file

from ptmlab.core.errors import PtmlabError
from ptmlab.data.wordlists import pad_with_function_words, random_words
from ptmlab.models.zoo import ZOO, resolve
from ptmlab.serve.app import create_app
from ptmlab.serve.config import ServeConfig
from ptmlab.serve.server import serve_in_thread
from ptmlab.serve.state import check_limits, open_store, text_hash
from tests.conftest import assert_clean_error, run_cli

NORMAL = ["the film was great", "boring plot and poor actors", "a really delightful story", "awful music"]
VOCAB_KEPT = 27_000


def post(url, key, body):
    return httpx.post(f"{url}/v1/predict", content=json.dumps(body), timeout=60,  # json.dumps: escapes lone surrogates
                      headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})


def broken_model(victim, folder):
    """The victim with its word embeddings cut to the first 27,000 rows: a real model that raises (IndexError)
    on any text holding a rarer token, and answers every other text as before."""
    shutil.copytree(victim, folder)
    weights = load_file(folder / "model.safetensors")
    name = next(k for k in weights if k.endswith("word_embeddings.weight"))
    weights[name] = weights[name][:VOCAB_KEPT].clone()
    save_file(weights, folder / "model.safetensors")
    config = json.loads((folder / "config.json").read_text())
    config["vocab_size"] = VOCAB_KEPT
    (folder / "config.json").write_text(json.dumps(config))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    rare = next(t for i, t in sorted((i, t) for t, i in tok.get_vocab().items()) if i > 28_000 and t.isalpha())
    assert all(max(tok(t)["input_ids"]) < VOCAB_KEPT for t in NORMAL)
    return folder, f"the film was {rare}"


def test_bad_requests_fail_alone_with_4xx_charged_and_audited(victim, store, tmp_path):
    folder, bad_model_text = broken_model(victim, tmp_path / "broken")
    good, bad = store.create_key("good", rate=1e4, burst=1e4), store.create_key("bad", rate=1e4, burst=1e4)
    bodies = [(bad, {"texts": [bad_model_text]}), (bad, {"texts": ["fine", "\ud800 lone surrogate"]}),
              (bad, {"texts": [NORMAL[0], bad_model_text]})]
    with serve_in_thread(create_app(str(folder), ServeConfig(detector=False, max_wait_ms=50), store)) as url:
        alone = {t: post(url, good, {"texts": [t]}).json()["predictions"][0]["probs"] for t in NORMAL}
        jobs = [(good, {"texts": [t]}) for _ in range(10) for t in NORMAL] + bodies * 5
        with cf.ThreadPoolExecutor(16) as pool:
            results = list(pool.map(lambda kb: post(url, *kb), jobs))
        assert httpx.get(f"{url}/healthz").json()["status"] == "ok"
    for (key, body), r in zip(jobs, results, strict=True):
        if key == good:  # every normal request answered, with its own answer
            assert r.status_code == 200, r.text
            assert r.json()["predictions"][0]["probs"] == pytest.approx(alone[body["texts"][0]], abs=1e-4)
        else:
            assert r.status_code == 422, r.text
            assert "cannot" in r.json()["error"]
    assert "text 1 cannot be tokenized" in results[-2].json()["error"]
    bid = store.resolve_key("bad").id
    assert store.used_today(bid) == 25 and store.usage(bid)[bid]["audit_rows"] == 25  # charged and audited
    assert store.audit_outcomes(bid) == {"model_error": 15, "invalid": 10}
    with pytest.raises(PtmlabError, match="positions"):
        create_app(str(victim), ServeConfig(max_length=1000, detector=False), store)


def test_a_run_directory_named_like_a_zoo_model_is_served_as_itself(victim, store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    key = store.create_key("k")
    for name in ZOO.names():
        shutil.copytree(victim, tmp_path / name)
        assert resolve(name) == (name, None)  # the directory wins over the zoo name
        with serve_in_thread(create_app(name, ServeConfig(detector=False, public_metrics=True), store)) as url:
            health = httpx.get(f"{url}/healthz").json()
            answer = post(url, key, {"texts": ["great"]}).json()
        assert health["labels"] == ["neg", "pos"] and health["task"] == "synthetic"  # the run, not the zoo model
        assert health["model"] == str(tmp_path / name) and answer["label_names"] == ["neg", "pos"]
    assert resolve("zoo:tiny")[1] is ZOO.get("tiny")  # the zoo stays reachable explicitly
    (tmp_path / "empty").mkdir()
    with pytest.raises(PtmlabError, match="config.json"):
        resolve("empty")


def test_a_locked_store_answers_503_and_never_stalls_health(victim, store):
    key = store.create_key("k")
    with serve_in_thread(create_app(str(victim), ServeConfig(detector=False, state_timeout=0.5), store)) as url:
        assert post(url, key, {"texts": ["great"]}).status_code == 200
        other = sqlite3.connect(store.path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another writer (a replica, a `keys` command) holds the write lock
        try:
            with cf.ThreadPoolExecutor(4) as pool:
                slow = [pool.submit(post, url, key, {"texts": ["great"]}) for _ in range(3)]
                t0 = time.perf_counter()
                for _ in range(5):
                    assert httpx.get(f"{url}/healthz").status_code == 200
                health_seconds = (time.perf_counter() - t0) / 5
                answers = [f.result() for f in slow]
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert post(url, key, {"texts": ["great"]}).status_code == 200
    assert health_seconds < 0.3
    for r in answers:
        assert r.status_code == 503 and r.headers["retry-after"] == "1" and "busy" in r.json()["error"]


def _raw(url: str, head: str) -> str:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(head.encode())  # headers only: the announced body never comes
        return s.recv(4096).decode(errors="replace")


def test_authentication_comes_before_the_body(victim, store):
    key = store.create_key("k")
    head = "POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500000\r\n"
    with serve_in_thread(create_app(str(victim), ServeConfig(detector=False, max_body=1000), store)) as url:
        assert _raw(url, head + "\r\n").startswith("HTTP/1.1 401")  # answered without waiting for the body
        assert _raw(url, head + f"Authorization: Bearer {key}\r\n\r\n").startswith("HTTP/1.1 413")
        anonymous = httpx.post(f"{url}/v1/predict", json={"texts": [1], "extra": True})
        known = post(url, key, {"texts": [1], "extra": True})
    assert anonymous.status_code == 401 and "texts" not in anonymous.text  # no validation details for strangers
    assert known.status_code == 422 and "texts" in known.json()["error"]


def test_timed_out_and_over_budget_work_is_not_computed(victim, store, monkeypatch):
    key = store.create_key("k", daily_budget=3)
    # a batcher slower than the timeout: refused as a setting, so the check is lifted to stand in for a slow batch
    monkeypatch.setattr(ServeConfig, "validate", lambda self: None)
    slow = ServeConfig(detector=False, max_wait_ms=1500, timeout=0.3)
    with serve_in_thread(create_app(str(victim), slow, store)) as url:
        r = post(url, key, {"texts": ["great"]})
        assert r.status_code == 408
        time.sleep(2.0)  # the batcher reached the request after its client stopped waiting
        assert post(url, key, {"texts": ["a", "b", "c", "d"]}).status_code == 429  # over budget: refused up front
        admin = store.create_key("ops", scopes="admin")
        metrics = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {admin}"}).text
    assert "ptmlab_batch_size_count 0" in metrics  # no forward pass ran for either
    kid = store.resolve_key("k").id
    assert store.used_today(kid) == 0 and store.usage(kid) == {}


def test_detector_survives_padding_and_acts(victim, store):
    import random

    rng = random.Random(0)
    queries = [pad_with_function_words(t, rng) for t in random_words(60, [12, 18, 25], rng)]  # the adaptive attack
    thief, user = (store.create_key(n, rate=1e4, burst=1e4) for n in ("thief", "user"))
    real = NORMAL * 3 + ["I loved this movie so much, the actors were wonderful",
                         "Der Film war wirklich sehr gut und spannend"]
    cfg = ServeConfig(detector_action="block", detector_min_queries=20)
    with serve_in_thread(create_app(str(victim), cfg, store)) as url:
        assert post(url, thief, {"texts": queries[:30]}).status_code == 200
        blocked = post(url, thief, {"texts": queries[30:31]})
        for _ in range(4):
            assert post(url, user, {"texts": real}).status_code == 200
    assert blocked.status_code == 403 and "extraction" in blocked.json()["error"]
    scored, score = store.key_score(store.resolve_key("thief").id)
    assert scored == 30 and score > 0.9
    assert store.key_score(store.resolve_key("user").id)[1] < 0.5
    cfg = ServeConfig(detector_action="throttle", detector_min_queries=20)
    slow = store.create_key("slow", rate=10, burst=40)
    with serve_in_thread(create_app(str(victim), cfg, store)) as url:
        assert post(url, slow, {"texts": queries[:30]}).status_code == 200
        time.sleep(1.0)  # unflagged, 10 texts/s would refill the 15 texts asked next; flagged, it refills 1/s
        r = post(url, slow, {"texts": queries[30:45]})
    assert r.status_code == 429 and "throttled" in r.json()["error"]


def test_watermark_survives_variant_voting(victim, store):
    import random

    rng = random.Random(1)
    key = store.create_key("voter", rate=1e4, burst=1e4)
    texts = random_words(150, [6, 9], rng)

    def variants(t: str) -> list[str]:
        return [t, t.upper(), "  " + t.replace(" ", "   ") + " ", t + " !!", "the " + t + " of it."]

    with serve_in_thread(create_app(str(victim), ServeConfig(detector=False, watermark_rate=0.2), store)) as url:
        answers = {}
        for s in range(0, len(texts), 10):
            batch = [v for t in texts[s:s + 10] for v in variants(t)]
            for v, p in zip(batch, post(url, key, {"texts": batch}).json()["predictions"], strict=True):
                answers[v] = p["label_id"]
    records = {r.query_hash: r for r in store.watermarks()}
    marked = [t for t in texts if text_hash(t) in records and records[text_hash(t)].kind == "mark"]
    assert len(marked) >= 10
    for t in marked:  # every variant carries the same mark: the vote keeps the wrong label
        votes = [answers[v] for v in variants(t)]
        assert max(set(votes), key=votes.count) == records[text_hash(t)].given_label


def test_state_files_are_private_and_point6_inputs_fail_cleanly(victim, tmp_path):
    home = tmp_path / "h"
    env = {"PTMLAB_HOME": str(home)}
    open_store(str(home)).create_key("x")
    for p in home.glob("state.db*"):
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
    assert_clean_error(run_cli("keys", "create", "--name", "y", "--rate", "nan", env=env), "limits")
    assert_clean_error(run_cli("serve", str(victim), "--timeout", "nan", env=env), "timeout")
    for limits in ((float("inf"), 10, 10), (10, float("nan"), 10), (-1, 10, 10), (10, 10, 0)):
        with pytest.raises(PtmlabError, match="finite and positive"):
            check_limits(*limits)
    for bad in ({"timeout": float("inf")}, {"state_timeout": float("nan")}, {"detector_action": "shoot"},
                {"detector_threshold": 1.5}, {"max_wait_ms": float("nan")}):
        with pytest.raises(PtmlabError, match=next(iter(bad)).replace("_", "-")):
            ServeConfig(**bad).validate()
    listed = tmp_path / "listed"
    shutil.copytree(victim, listed)
    (listed / "config.yaml").write_text("- a\n- list\n")
    with pytest.raises(PtmlabError, match="mapping of option: value, not a list"):
        create_app(str(listed), ServeConfig(detector=False), open_store(str(home)))
    (tmp_path / "file.txt").write_text("not a directory")
    with pytest.raises(PtmlabError, match="state"):
        open_store(str(tmp_path / "file.txt" / "x"))
