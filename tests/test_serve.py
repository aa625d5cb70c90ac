"""The inference API in-process on 127.0.0.1: policies, batching, keys, limits, quotas, audit, metrics."""

from __future__ import annotations

import concurrent.futures as cf
import csv
import sqlite3

import httpx
import pytest

from ptmlab.core.errors import PtmlabError
from ptmlab.serve.app import create_app
from ptmlab.serve.config import ServeConfig
from ptmlab.serve.server import serve_in_thread
from ptmlab.serve.state import hash_key, open_store
from tests.conftest import assert_clean_error, run_cli


def dev_rows(victim) -> tuple[list[str], list[int]]:
    with open(victim.parent / "data" / "dev.csv") as f:
        rows = list(csv.DictReader(f))
    return [r["text"] for r in rows], [1 if r["label"] == "pos" else 0 for r in rows]


def serve(victim, store, **kw):
    cfg = ServeConfig(**{"detector": False, **kw})
    return serve_in_thread(create_app(str(victim), cfg, store))


def post(url, key, body, **kw):
    return httpx.post(f"{url}/v1/predict", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30, **kw)


def test_policies_answer_with_the_real_model(victim, store):
    key = store.create_key("alice")
    texts, gold = dev_rows(victim)
    names = None
    for policy in ("probs", "label", "rounded:2"):
        with serve(victim, store, output_policy=policy) as url:
            r = post(url, key, {"texts": texts[:40]})
        assert r.status_code == 200, r.text
        body = r.json()
        names = body["label_names"]
        preds = body["predictions"]
        assert len(preds) == 40 and body["policy"] == policy
        correct = sum(names[p["label_id"]] == ("pos" if g else "neg") for p, g in zip(preds, gold[:40], strict=True))
        assert correct >= 36  # the served tiny victim is accurate on the synthetic task
        if policy == "label":
            assert all(p["probs"] is None for p in preds)
        else:
            for p in preds:
                assert abs(sum(p["probs"]) - 1) < 0.02
                assert p["label_id"] == max(range(2), key=p["probs"].__getitem__)
                if policy == "rounded:2":
                    assert all(round(x, 2) == x for x in p["probs"])
    assert sorted(names) == ["neg", "pos"]


def test_dynamic_batching_merges_clients_and_matches_single_requests(victim, store):
    key = store.create_key("batch", rate=1000, burst=1000)
    texts, _ = dev_rows(victim)
    texts = texts[:32]
    with serve(victim, store, max_batch=16, max_wait_ms=50) as url:
        single = [post(url, key, {"texts": [t]}).json()["predictions"][0]["probs"] for t in texts[:8]]
        with cf.ThreadPoolExecutor(16) as pool:
            together = list(pool.map(lambda t: post(url, key, {"texts": [t]}).json()["predictions"][0]["probs"],
                                     texts))
        admin = store.create_key("ops", scopes="admin")
        metrics = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {admin}"}).text
    for a, b in zip(single, together[:8], strict=True):  # padding inside a shared batch changes nothing
        assert a == pytest.approx(b, abs=1e-4)
    counts = {}
    for line in metrics.splitlines():
        if line.startswith("ptmlab_batch_size_bucket"):
            counts[line.split('"')[1]] = int(line.split()[-1])
        if line.startswith("ptmlab_batch_size_count"):
            forward_passes = int(line.split()[-1])
    assert forward_passes < 8 + 32  # 32 concurrent single-text requests shared forward passes
    assert counts["+Inf"] - counts["1"] >= 1  # at least one pass held more than one text
    assert 'ptmlab_requests_total{status="200"} 40' in metrics


def test_unknown_missing_and_revoked_keys_get_401(victim, store):
    key = store.create_key("bob")
    with serve(victim, store) as url:
        assert post(url, key, {"texts": ["great film"]}).status_code == 200
        for headers in ({}, {"Authorization": "Bearer ptm_nope"}, {"Authorization": f"Basic {key}"}):
            r = httpx.post(f"{url}/v1/predict", json={"texts": ["x"]}, headers=headers)
            assert r.status_code == 401 and "key" in r.json()["error"]
        store.revoke(store.resolve_key("bob").id)
        r = post(url, key, {"texts": ["great film"]})
        assert r.status_code == 401


def test_malformed_and_oversized_requests_get_4xx_json(victim, store):
    key = store.create_key("carol")
    cases = [
        ({"texts": []}, 422), ({"texts": "not a list"}, 422), ({"texts": [1, 2]}, 422), ({}, 422),
        ({"texts": ["a"], "extra": 1}, 422), ({"texts": ["a"] * 9}, 422), ({"texts": ["a" * 101]}, 422),
        ({"texts": ["a", "b"], "text_pairs": ["c", "d"]}, 200), ({"texts": ["a"], "text_pairs": ["c", "d"]}, 422),
        ({"texts": ["a" * 90] * 8}, 413),
    ]
    with serve(victim, store, max_texts=8, max_chars=100, max_body=600) as url:
        for body, status in cases:
            r = post(url, key, body)
            assert r.status_code == status, (body, r.text)
            if status != 200:
                assert isinstance(r.json()["error"], str)
        for raw in (b"{not json", b"\xff\xfe", b"null", b"[]"):
            r = httpx.post(f"{url}/v1/predict", content=raw, headers={"Authorization": f"Bearer {key}",
                                                                      "Content-Type": "application/json"})
            assert r.status_code == 422 and "error" in r.json()
        r = httpx.post(f"{url}/v1/predict", content=b"x" * 5000, headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 413
        assert httpx.get(f"{url}/healthz").json()["status"] == "ok"  # nothing crashed


def test_rate_limit_and_daily_budget_answer_429_with_retry_after(victim, store):
    fast = store.create_key("bursty", rate=0.5, burst=2)
    small = store.create_key("small", daily_budget=5)
    with serve(victim, store) as url:
        codes = [post(url, fast, {"texts": ["good"]}).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        r = post(url, fast, {"texts": ["good"]})
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1 and "rate" in r.json()["error"]
        assert post(url, small, {"texts": ["a", "b", "c"]}).status_code == 200
        r = post(url, small, {"texts": ["a", "b", "c"]})
        assert r.status_code == 429 and "budget" in r.json()["error"]
        assert 0 < int(r.headers["retry-after"]) <= 86400
        assert post(url, small, {"texts": ["a", "b"]}).status_code == 200  # exactly up to the budget
        admin = store.create_key("ops", scopes="admin")
        metrics = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {admin}"}).text
    small_id = store.resolve_key("small").id
    assert store.used_today(small_id) == 5
    assert store.usage(small_id)[small_id]["audit_rows"] == 5
    assert 'ptmlab_rejects_total{reason="rate"} 2' in metrics
    assert 'ptmlab_rejects_total{reason="budget"} 1' in metrics


def test_audit_logs_hashes_and_lengths_never_texts_or_keys(victim, store):
    key = store.create_key("dave")
    secret_text = "a very distinctive sentence about marmalade"
    with serve(victim, store, detector=True) as url:
        assert post(url, key, {"texts": [secret_text, "plot"]}).status_code == 200
    with sqlite3.connect(store.path) as db:
        rows = db.execute("SELECT text_hash, length, score FROM audit").fetchall()
    assert [r[1] for r in rows] == [len(secret_text), 4]
    assert len(rows[0][0]) == 64 and 0 <= rows[0][2] <= 1
    assert rows[1][2] is None  # one word: too short for the detector to judge, so it is not scored
    raw = b"".join(p.read_bytes() for p in store.home.glob("state.db*"))
    assert secret_text.encode() not in raw
    assert key.encode() not in raw and hash_key(key).encode() in raw


def test_metrics_healthz_and_openapi(victim, store):
    with serve(victim, store) as url:
        health = httpx.get(f"{url}/healthz").json()
        spec = httpx.get(f"{url}/openapi.json").json()
        admin = store.create_key("m", scopes="admin")
        metrics = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {admin}"})
    assert health["status"] == "ok" and health["labels"] == ["neg", "pos"]
    assert "/v1/predict" in spec["paths"] and "401" in spec["paths"]["/v1/predict"]["post"]["responses"]
    assert metrics.headers["content-type"].startswith("text/plain")
    for name in ("ptmlab_request_seconds_bucket", "ptmlab_batch_size_count", "ptmlab_queries_total"):
        assert name in metrics.text


def test_keys_cli_prints_the_key_once_and_stores_its_hash(tmp_path, victim, store):
    env = {"PTMLAB_HOME": str(tmp_path / "h")}
    out = run_cli("keys", "create", "--name", "erin", "--daily-budget", "7", env=env)
    assert out.returncode == 0, out.stderr
    key = out.stdout.strip().splitlines()[-1]
    assert key.startswith("ptm_") and len(key) > 40
    listed = run_cli("keys", "list", env=env)
    assert "erin" in listed.stdout and key not in listed.stdout
    store = open_store(str(tmp_path / "h"))
    assert store.find_key(key).daily_budget == 7
    assert run_cli("keys", "revoke", "erin", env=env).returncode == 0
    assert store.find_key(key) is None
    assert_clean_error(run_cli("keys", "revoke", "nobody", env=env), "nobody")
    assert_clean_error(run_cli("serve", str(victim), "--output-policy", "rounded:x", env=env), "rounded")
    with pytest.raises(PtmlabError, match="missing"):
        create_app(str(tmp_path / "missing"), ServeConfig(), store)
    with pytest.raises(PtmlabError, match="top"):
        create_app(str(victim), ServeConfig(output_policy="top"), store)
