"""Bounded loopback load test and a SIGKILL-during-load restart test against `ptmlab serve` subprocesses."""

from __future__ import annotations

import statistics
import threading
import time

import httpx

from ptmlab.serve.state import open_store
from tests.test_serve_support import free_port, start_server_process, train_victim

CLIENTS = 16


def _client_loop(url: str, key: str, texts: list[str], stop: threading.Event, n: int | None, out: dict) -> None:
    with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        i = 0
        while not stop.is_set() and (n is None or i < n):
            t0 = time.perf_counter()
            try:
                r = http.post(f"{url}/v1/predict", json={"texts": [texts[i % len(texts)]]})
            except httpx.HTTPError:
                out["errors"] += 1
                if n is None:
                    return  # the server was killed
                continue
            out["latency"].append(time.perf_counter() - t0)
            out["ok" if r.status_code == 200 else "errors"] += 1
            i += 1


def _run_clients(url, key, per_client: int | None, stop: threading.Event) -> list[dict]:
    texts = ["the film was great", "boring plot and poor actors", "a really delightful story", "awful music"]
    outs = [{"ok": 0, "errors": 0, "latency": []} for _ in range(CLIENTS)]
    threads = [threading.Thread(target=_client_loop, args=(url, key, texts, stop, per_client, o)) for o in outs]
    for t in threads:
        t.start()
    return outs, threads


def test_load_16_clients_zero_errors(tmp_path):
    victim = train_victim()
    home = tmp_path / "home"
    key = open_store(str(home)).create_key("load", rate=10_000, burst=10_000)
    port = free_port()
    proc = start_server_process(victim, home, port, "--max-batch", "32", "--max-wait-ms", "5")
    try:
        t0 = time.perf_counter()
        outs, threads = _run_clients(f"http://127.0.0.1:{port}", key, 1000 // CLIENTS, threading.Event())
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    lat = sorted(x for o in outs for x in o["latency"])
    ok = sum(o["ok"] for o in outs)
    assert sum(o["errors"] for o in outs) == 0
    assert ok == (1000 // CLIENTS) * CLIENTS
    p50, p99 = statistics.quantiles(lat, n=100)[49], statistics.quantiles(lat, n=100)[98]
    print(f"\nload: {ok} requests from {CLIENTS} clients in {wall:.1f}s = {ok / wall:.1f} req/s, "
          f"p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms")
    assert p50 <= p99
    store = open_store(str(home))
    kid = store.resolve_key("load").id
    assert store.usage(kid)[kid] == {"queries": ok, "requests": ok, "audit_rows": ok}


def test_sigkill_during_load_loses_no_accounting_of_answered_requests(tmp_path):
    victim = train_victim()
    home = tmp_path / "home"
    key = open_store(str(home)).create_key("kill", rate=10_000, burst=10_000)
    port = free_port()
    proc = start_server_process(victim, home, port)
    stop = threading.Event()
    outs, threads = _run_clients(f"http://127.0.0.1:{port}", key, None, stop)
    time.sleep(3.0)
    proc.kill()  # SIGKILL while 16 clients are mid-request
    proc.wait(timeout=30)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    answered = sum(o["ok"] for o in outs)
    assert answered > 0
    proc = start_server_process(victim, home, port)  # restart on the same state
    try:
        store = open_store(str(home))
        kid = store.resolve_key("kill").id
        before = store.usage(kid)[kid]
        # every answered request was charged and logged; at most the CLIENTS in flight were charged unanswered
        assert answered <= before["audit_rows"] == before["queries"] == before["requests"] <= answered + CLIENTS
        r = httpx.post(f"http://127.0.0.1:{port}/v1/predict", json={"texts": ["great"]},
                       headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert r.status_code == 200
        assert store.usage(kid)[kid]["queries"] == before["queries"] + 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
