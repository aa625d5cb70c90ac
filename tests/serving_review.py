"""A hostile review of `ptmlab serve`, `ptmlab keys` and `ptmlab extract`, against a real server on loopback.

Run: ``.venv/bin/python -m tests.serving_review [--out FILE] [--seed N] [--held-out N]`` (about 3-5 minutes on two
cores). It fine-tunes the tiny test victim, starts ``python -m ptmlab serve`` in a subprocess and runs five suites:

* poison: hand-written hostile requests (bodies, headers, protocol abuse) and a seeded, generated held-out set of
  invalid bodies, sent while four other clients send normal requests; every hostile request must get a 4xx (valid
  but strange texts may get 200), every normal request 200, and the server must stay up (``/healthz`` "ok", no 500
  in ``/metrics``);
* auth: missing, malformed, unknown, oversized and revoked keys, and ``/metrics`` without a key: 401;
* quota: a burst on a small token bucket and a small daily budget are exact, and the budget survives a restart;
* lock: with the state store's write lock held by another process, predictions get 503 + Retry-After and
  ``/healthz`` stays fast;
* cli: hostile ``serve``, ``keys``, ``extract`` and ``evaluate`` arguments, a symlinked state file, a world-writable
  state folder, a pickle-only model folder, a bad run config, a hostile victim: every one exits 2 with one line.

It prints a table and writes the counts as JSON (``--out``). Exit status 0 when everything held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("PTMLAB_PROGRESS", "0")

from tests.test_serve_support import free_port, hostile_victim, start_server_process, train_victim  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NORMAL = ["the film was great", "boring plot and poor actors", "a really delightful story", "awful music",
          "i loved every minute", "the worst evening in years"]
MAX_TEXTS, MAX_CHARS, MAX_BODY = 16, 500, 200_000


# -- the hostile requests ------------------------------------------------------------------------------------------

def hand_written() -> list[tuple[str, bytes, dict]]:
    """(name, body, extra headers): each must be answered 4xx."""
    deep = b'{"texts":' + b"[" * 100_000
    out = [
        ("deep nesting", deep, {}), ("deep object", b'{"a":' * 50_000 + b"1" + b"}" * 50_000, {}),
        ("lone surrogate in task", b'{"texts": ["a"], "task": "\\ud800"}', {}),
        ("lone surrogate key", b'{"texts": ["a"], "\\udfff": 1}', {}),
        ("huge field name", b'{"texts": ["a"], "' + b"k" * 190_000 + b'": 1}', {}),
        ("huge task", json.dumps({"texts": ["a"], "task": "t" * 190_000}).encode(), {}),
        ("escape codes in task", b'{"texts": ["a"], "task": "\\u001b[2J\\r\\nHTTP/1.1 200 OK"}', {}),
        ("duplicate texts", b'{"texts": ["a"], "texts": ["b"]}', {}),
        ("duplicate task", b'{"texts": ["a"], "task": null, "task": "x"}', {}),
        ("empty body", b"", {}), ("null", b"null", {}), ("array", b"[]", {}), ("string", b'"texts"', {}),
        ("number", b"1e999999", {}), ("huge int", b"1" * 10_000, {}), ("NaN", b"NaN", {}),
        ("texts NaN", b'{"texts": NaN}', {}), ("texts null", b'{"texts": null}', {}),
        ("texts empty", b'{"texts": []}', {}), ("texts ints", b'{"texts": [1, 2]}', {}),
        ("texts nested", b'{"texts": [["a"]]}', {}), ("texts object", b'{"texts": {"a": 1}}', {}),
        ("texts bool", b'{"texts": [true]}', {}), ("too many texts", json.dumps({"texts": ["a"] * 17}).encode(), {}),
        ("too long text", json.dumps({"texts": ["a" * 501]}).encode(), {}),
        ("too long pair", json.dumps({"texts": ["a"], "text_pairs": ["b" * 501]}).encode(), {}),
        ("pairs mismatch", json.dumps({"texts": ["a"], "text_pairs": ["b", "c"]}).encode(), {}),
        ("pairs not list", b'{"texts": ["a"], "text_pairs": "b"}', {}),
        ("unknown task", b'{"texts": ["a"], "task": "mnli"}', {}),
        ("task number", b'{"texts": ["a"], "task": 5}', {}), ("extra field", b'{"texts": ["a"], "x": 1}', {}),
        ("over max body", json.dumps({"texts": ["a" * 400] * 500}).encode(), {}),
        ("not utf-8", b"\xff\xfe\xfd{", {}), ("utf-16 json", '{"texts": ["a"]}'.encode("utf-16"), {}),
        ("bom + garbage", b"\xef\xbb\xbf{{", {}), ("truncated", b'{"texts": ["a"', {}),
        ("trailing garbage", b'{"texts": ["a"]} x', {}), ("null bytes", b'{"texts": ["a"]}\x00', {}),
        ("content-length lies short", b'{"texts": ["a"]}', {"Content-Length": "3"}),
        ("content-length not a number", b'{"texts": ["a"]}', {"Content-Length-Override": "abc"}),
        ("content-length huge", b'{"texts": ["a"]}', {"Content-Length-Override": str(10**30)}),
        ("content-length negative", b'{"texts": ["a"]}', {"Content-Length-Override": "-1"}),
    ]
    return out


def generated(n: int, seed: int) -> list[tuple[str, bytes, dict]]:
    """A seeded held-out set of invalid bodies: random bytes, wrong types, random nesting, random field names,
    random unknown tasks, random duplicate keys, limits exceeded by random amounts."""
    rng = random.Random(seed)

    def rand_text(k: int) -> str:
        return "".join(chr(rng.choice([rng.randint(0x20, 0x7e), rng.randint(0xa0, 0xd7ff), rng.randint(0xe000,
                                                                                                         0x10ffff)]))
                       for _ in range(k))

    def wrong_value(depth: int = 0):
        kinds = [lambda: None, lambda: rng.randint(-10**6, 10**6), rng.random, lambda: rng.choice([True, False]),
                 lambda: {rand_text(3): 1}, lambda: [wrong_value(depth + 1)], lambda: {"texts": wrong_value(depth + 1)}]
        return kinds[rng.randrange(7 if depth < 3 else 5)]()

    out = []
    for i in range(n):
        kind = i % 9
        if kind == 0:
            body = bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
            if body.strip()[:1] in (b"{",):
                body = b"\x00" + body
        elif kind == 1:
            body = json.dumps({"texts": wrong_value()}).encode()
        elif kind == 2:
            d = rng.randint(2, 200_000)
            body = b'{"texts": ' + b"[" * d + b'"a"' + b"]" * d + b"}"
        elif kind == 3:
            body = json.dumps({"texts": ["good film"], rand_text(rng.randint(1, 5000)): wrong_value()}).encode()
        elif kind == 4:
            body = json.dumps({"texts": ["good film"], "task": rand_text(rng.randint(1, 20_000))}).encode()
        elif kind == 5:
            body = b'{"texts": ["a"], "texts": ' + json.dumps([rand_text(5)]).encode() + b"}"
        elif kind == 6:
            body = json.dumps({"texts": [rand_text(5)] * rng.randint(MAX_TEXTS + 1, 200)}).encode()
        elif kind == 7:
            body = json.dumps({"texts": [rand_text(rng.randint(MAX_CHARS + 1, 5000))]}).encode()
        else:
            s = json.dumps({"texts": ["good film"], "task": "x"}).encode()
            cut = rng.randint(1, len(s) - 1)
            body = s[:cut] + bytes([rng.randrange(256)]) + s[cut + 1:] if rng.random() < 0.5 else s[:cut]
            with contextlib.suppress(ValueError, UnicodeDecodeError):
                json.loads(body)
                body = body + b"}"  # a mutation that stayed valid JSON: make it invalid
        out.append((f"held-out {i} ({kind})", body, {}))
    return out


def strange_but_valid(seed: int) -> list[bytes]:
    """Valid requests with poison texts: each may be answered 200 or 422, never 5xx."""
    rng = random.Random(seed)
    texts = ["", " ", "\x00", "\ud800", "\U0001f600" * 200, "\u202e" * 100, "a\u0301" * 200, "\ufdfa" * 400,
             "\u200b" * 400, "ﷺ" * 100, "\t\n\r" * 100, "x" * MAX_CHARS, "[CLS] [SEP] [MASK] [PAD] [UNK]" * 10,
             "<script>alert(1)</script>", "'; DROP TABLE keys; --", "%s%s%n" * 50]
    texts += ["".join(chr(rng.randint(1, 0x10ffff)) for _ in range(rng.randint(1, 200))) for _ in range(24)]
    return [json.dumps({"texts": [t]}).encode() for t in texts]


# -- helpers ----------------------------------------------------------------------------------------------------

def send(url: str, key: str | None, body: bytes, headers: dict | None = None) -> int:
    headers = dict(headers or {})
    override = headers.pop("Content-Length-Override", None)
    h = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {}), **headers}
    if override is not None or "Content-Length" in headers:  # raw: httpx would correct the header
        length = override if override is not None else headers["Content-Length"]
        host, port = url.removeprefix("http://").split(":")
        head = "".join(f"{k}: {v}\r\n" for k, v in h.items() if k != "Content-Length")
        raw = (f"POST /v1/predict HTTP/1.1\r\nHost: x\r\n{head}Content-Length: {length}\r\nConnection: close\r\n\r\n"
               ).encode() + body
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(raw)  # the write side stays open: a closed one reads as a client that left
            answer = s.recv(4096).decode("latin-1")
        return int(answer.split()[1]) if answer.startswith("HTTP/1.1") else 0
    return httpx.post(f"{url}/v1/predict", content=body, headers=h, timeout=60).status_code


def raw_attacks(url: str, key: str) -> list[tuple[str, int]]:
    """Protocol-level abuse: methods, paths, huge headers, chunked bodies over the limit, a client that leaves."""
    out = []
    for method in ("GET", "PUT", "DELETE", "PATCH"):
        out.append((f"{method} /v1/predict", httpx.request(method, f"{url}/v1/predict", timeout=30).status_code))
    for path in ("/admin", "/v1/predict%00", "/v1/predict/", "/" + "a" * 5000):
        out.append((f"GET {path[:30]}", httpx.get(f"{url}{path}", timeout=30).status_code))
    out.append(("huge header", httpx.post(f"{url}/v1/predict", content=b'{"texts": ["a"]}', timeout=30,
                                          headers={"X-Pad": "a" * 60_000}
                                          ).status_code))

    def chunks():
        for _ in range(50):
            yield b"a" * 10_000

    out.append(("chunked over max body", httpx.post(f"{url}/v1/predict", content=chunks(), timeout=30,
                                                    headers={"Authorization": f"Bearer {key}"}).status_code))
    host, port = url.removeprefix("http://").split(":")
    for _ in range(5):  # clients that leave mid-body: no answer to check, but /metrics must count no 500
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(f"POST /v1/predict HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Length: "
                      f"1000\r\n\r\n{{\"texts\": [".encode())
            time.sleep(0.1)
    return out


def poison_suite(url: str, key: str, normal_key: str, held_out: int, seed: int) -> dict:
    stop = threading.Event()
    normal: Counter = Counter()

    def normal_client(i: int):
        rng = random.Random(i)
        while not stop.is_set():
            r = httpx.post(f"{url}/v1/predict", json={"texts": rng.sample(NORMAL, 3)}, timeout=60,
                           headers={"Authorization": f"Bearer {normal_key}"})
            normal[r.status_code] += 1

    hostile = hand_written() + generated(held_out, seed)
    results: dict[str, Counter] = {"hand-written": Counter(), "held-out": Counter(), "strange-valid": Counter(),
                                   "protocol": Counter()}
    failures = []
    with cf.ThreadPoolExecutor(4) as normals:
        for i in range(4):
            normals.submit(normal_client, i)
        with cf.ThreadPoolExecutor(4) as pool:
            codes = list(pool.map(lambda h: send(url, key, h[1], h[2]), hostile))
        for (name, _, _), code in zip(hostile, codes, strict=True):
            group = "held-out" if name.startswith("held-out") else "hand-written"
            results[group][code] += 1
            if not 400 <= code < 500:
                failures.append((name, code))
        for body in strange_but_valid(seed):
            code = send(url, key, body)
            results["strange-valid"][code] += 1
            if code not in (200, 422):
                failures.append((f"strange {body[:30]!r}", code))
        for name, code in raw_attacks(url, key):
            results["protocol"][code] += 1
            if not 400 <= code < 500:
                failures.append((name, code))
        time.sleep(1.0)
        stop.set()
    health = httpx.get(f"{url}/healthz", timeout=10).json()
    metrics = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=10).text
    return {"hostile": {k: dict(v) for k, v in results.items()}, "normal": dict(normal), "failures": failures,
            "health": health["status"], "server_errors_in_metrics": 'status="500"' in metrics,
            "held": not failures and set(normal) == {200} and health["status"] == "ok"
            and 'status="500"' not in metrics}


def auth_suite(url: str, revoked_key: str) -> dict:
    cases = [{}, {"Authorization": ""}, {"Authorization": "Bearer"}, {"Authorization": "Bearer "},
             {"Authorization": "Basic dXNlcjpwYXNz"}, {"Authorization": "Bearer ptm_nope"},
             {"Authorization": "Bearer " + "k" * 100_00}, {"Authorization": "bearer ptm_" + "\u00e9" * 10},
             {"Authorization": "Bearer ptm_x, Bearer ptm_y"}, {"Authorization": f"Bearer {revoked_key}"},
             {"Authorization": f"Bearer {revoked_key} "}, {"Authorization": f"Token {revoked_key}"}]
    codes = Counter()
    host, port = url.removeprefix("http://").split(":")
    body = b'{"texts": ["a"]}'
    for h in cases:  # raw: httpx refuses to send some of these headers
        head = b"".join(k.encode() + b": " + v.encode("utf-8") + b"\r\n" for k, v in h.items())
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + head +
                      b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
                      + body)
            answer = s.recv(4096).decode("latin-1")
        codes[int(answer.split()[1]) if answer.startswith("HTTP/1.1") else 0] += 1
    codes[httpx.get(f"{url}/metrics", timeout=30).status_code] += 1
    return {"requests": sum(codes.values()), "codes": dict(codes), "held": set(codes) == {401}}


def quota_suite(url: str, bucket_key: str, budget_key: str) -> dict:
    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(12) as pool:
        codes = list(pool.map(lambda _: httpx.post(f"{url}/v1/predict", json={"texts": ["a"]}, timeout=30,
                                                   headers={"Authorization": f"Bearer {bucket_key}"}).status_code,
                              range(12)))
    elapsed = time.monotonic() - t0
    ok = codes.count(200)
    budget = [httpx.post(f"{url}/v1/predict", json={"texts": ["a"]}, timeout=30,
                         headers={"Authorization": f"Bearer {budget_key}"}).status_code for _ in range(30)]
    return {"burst": {"requests": 12, "ok": ok, "refused_429": codes.count(429), "seconds": round(elapsed, 2)},
            "budget": {"requests": 30, "ok": budget.count(200), "refused_429": budget.count(429)},
            "held": 5 <= ok <= 5 + int(2 * elapsed) + 1 and codes.count(429) == 12 - ok
            and budget.count(200) == 20 and budget[20:] == [429] * 10}


def lock_suite(url: str, key: str, db: Path) -> dict:
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with cf.ThreadPoolExecutor(3) as pool:
            slow = [pool.submit(httpx.post, f"{url}/v1/predict", json={"texts": ["a"]}, timeout=30,
                                headers={"Authorization": f"Bearer {key}"}) for _ in range(3)]
            t0 = time.perf_counter()
            health = [httpx.get(f"{url}/healthz", timeout=10).status_code for _ in range(5)]
            health_s = (time.perf_counter() - t0) / 5
            answers = [f.result() for f in slow]
    finally:
        other.execute("ROLLBACK")
        other.close()
    after = httpx.post(f"{url}/v1/predict", json={"texts": ["a"]}, headers={"Authorization": f"Bearer {key}"},
                       timeout=30).status_code
    codes = [r.status_code for r in answers]
    return {"locked_requests": codes, "retry_after": [r.headers.get("retry-after") for r in answers],
            "healthz": health, "healthz_seconds": round(health_s, 3), "after_release": after,
            "held": codes == [503] * 3 and all(r.headers.get("retry-after") == "1" for r in answers)
            and health == [200] * 5 and health_s < 0.3 and after == 200}


# -- the CLI suite ------------------------------------------------------------------------------------------------

def cli(args: list[str], env: dict) -> tuple[int, list[str]]:
    p = subprocess.run([sys.executable, "-m", "ptmlab", *args], capture_output=True, text=True, timeout=300,
                       cwd=ROOT, env={**os.environ, **env})
    return p.returncode, [line for line in p.stderr.strip().splitlines() if line.strip()]


def cli_suite(victim: Path, work: Path) -> dict:
    home = work / "cli-home"
    env = {"PTMLAB_HOME": str(home)}
    data = victim.parent / "data"
    task = ["--task", "synthetic", "--train-file", str(data / "train.csv"), "--dev-file", str(data / "dev.csv")]
    huge = "99999999999999999999999"
    pickled = work / "pickled"
    shutil.copytree(victim, pickled)
    import torch
    from safetensors.torch import load_file

    torch.save(load_file(pickled / "model.safetensors"), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    bad_len = work / "bad-length"
    shutil.copytree(victim, bad_len)
    (bad_len / "config.yaml").write_text((victim / "config.yaml").read_text().replace("max_length: 32",
                                                                                      "max_length: -5"))
    linked = work / "linked"
    linked.mkdir(mode=0o700)
    (work / "target").write_text("x")
    (linked / "state.db").symlink_to(work / "target")
    open_dir = work / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    queries = work / "q.txt"
    queries.write_text("a\nb\n")
    port = ["--port", "1"]  # never reached: every case fails before listening
    cases = [
        ["serve", str(victim), "--max-wait-ms", "1e13"], ["serve", str(victim), "--host", ""],
        ["serve", str(victim), "--port", "0"], ["serve", str(victim), "--port", huge],
        ["serve", str(victim), "--max-batch", huge], ["serve", str(victim), "--timeout", "1e300"],
        ["serve", str(victim), "--state-timeout", "inf"], ["serve", str(victim), "--max-body", "-1"],
        ["serve", str(victim), "--max-queue", "1e9"], ["serve", str(victim), "--chunk", huge],
        ["serve", str(victim), "--max-length", huge], ["serve", str(victim), "--output-policy", "rounded:99"],
        ["serve", str(victim), "--watermark-rate", "nan"], ["serve", str(victim), "--detector-action", "x"],
        ["serve", str(victim), "--state", "postgresql://%zz@[::1", *port], ["serve", str(victim), "--state",
                                                                            str(linked), *port],
        ["serve", str(victim), "--state", str(open_dir), *port], ["serve", str(pickled), *port],
        ["serve", str(bad_len), *port], ["serve", str(work / "missing"), *port],
        ["serve", str(queries), *port], ["serve", str(victim), "--state", str(work / "nul\x01\x7f"), "--no-detector",
                                         "--max-length", "100000", *port],
        ["keys", "create", "--name", "a", "--daily-budget", huge], ["keys", "create", "--name", "a", "--rate", "1e300"],
        ["keys", "create", "--name", "a", "--burst", "-1"], ["keys", "create", "--name", "a", "--rate", "nan"],
        ["keys", "create", "--name", "\x1b[2Jroot\n   1  admin"], ["keys", "create", "--name", "n" * 65],
        ["keys", "create", "--name", "  "], ["keys", "flagged", "--last", huge],
        ["keys", "flagged", "--threshold", "nan"], ["keys", "flagged", "--min-queries", "-1"],
        ["keys", "list", "--state", "postgresql://%zz@[::1"], ["keys", "list", "--state", "postgresql://u@h:99999/d"],
        ["keys", "list", "--state", str(linked)], ["keys", "list", "--state", str(open_dir)],
        ["keys", "revoke", "\x1b[31mnobody"],
        ["evaluate", str(pickled), *task], ["extract", "verify-watermark", str(pickled), "--queries", str(queries)],
        ["extract", "verify-watermark", str(victim), "--queries", str(queries), "--alpha", "nan"],
        ["extract", "--victim", "http://[::1", "--key", "k", "--model", "tiny", *task, "--budget", "4",
         "--output", str(work / "x1")],
        ["extract", "--victim", "ftp://x", "--key", "k", "--model", "tiny", *task, "--output", str(work / "x2")],
        ["extract", "--victim", "http://127.0.0.1:1", "--key", "k", "--model", "tiny", *task, "--budget", huge,
         "--output", str(work / "x3")],
    ]
    victims = ["date", "future-date", "negative", "huge", "html", "no-names", "short", "bad-label", "inf-probs",
               "error-500"]
    results, failures = [], []

    def one(args):
        code, lines = cli(args, env)
        return args, code, lines

    with cf.ThreadPoolExecutor(2) as pool:
        done = list(pool.map(one, cases))
    for mode in victims:
        out = work / f"extract-{mode}"
        with hostile_victim(mode) as url:
            args = ["extract", "--victim", url, "--key", "k", "--model", "tiny", *task, "--budget", "4",
                    "--max-wait", "2", "--output", str(out)]
            args_, code, lines = one(args)
            left = out.exists()
        done.append((args_, code, lines + (["(left an output folder)"] if left else [])))
    for args, code, lines in done:
        ok = code == 2 and len(lines) == 1 and lines[0].startswith("error:")
        results.append({"args": [a[:60] for a in args[:4]], "exit": code, "line": (lines or [""])[-1][:200]})
        if not ok:
            failures.append(results[-1])
    target_mode = oct(os.stat(work / "target").st_mode & 0o777)
    return {"inputs": len(done), "exit_2_one_line": len(done) - len(failures), "failures": failures,
            "symlink_target_mode": target_mode, "held": not failures and target_mode == "0o644"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--seed", type=int, default=20261204)
    ap.add_argument("--held-out", type=int, default=300, help="generated invalid bodies")
    a = ap.parse_args()
    from ptmlab.serve.state import open_store

    victim = train_victim()
    work = Path(tempfile.mkdtemp(prefix="ptmlab-review-"))
    os.umask(0o022)
    home = work / "home"
    store = open_store(str(home))
    keys = {name: store.create_key(name, rate=rate, burst=burst, daily_budget=budget,  # hostile also reads /metrics
                                   scopes="predict,admin" if name == "hostile" else "predict")
            for name, rate, burst, budget in
            (("hostile", 1e4, 1e4, 10**9), ("normal", 1e4, 1e4, 10**9), ("bucket", 2, 5, 10**9),
             ("budget", 1e4, 1e4, 20), ("revoked", 1e4, 1e4, 10**9), ("lock", 1e4, 1e4, 10**9))}
    store.revoke(store.resolve_key("revoked").id)
    store.close()
    port = free_port()
    extra = ["--max-texts", str(MAX_TEXTS), "--max-chars", str(MAX_CHARS), "--max-body", str(MAX_BODY),
             "--state-timeout", "0.5"]
    log = work / "server.log"
    proc = start_server_process(victim, home, port, *extra, log=log)
    url = f"http://127.0.0.1:{port}"
    report: dict = {}
    try:
        t0 = time.monotonic()
        report["poison"] = poison_suite(url, keys["hostile"], keys["normal"], a.held_out, a.seed)
        print("poison:", json.dumps(report["poison"], default=str)[:3000], flush=True)
        report["auth"] = auth_suite(url, keys["revoked"])
        report["quota"] = quota_suite(url, keys["bucket"], keys["budget"])
        report["lock"] = lock_suite(url, keys["lock"], home / "state.db")
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        proc = start_server_process(victim, home, port, *extra, log=log)  # a restart keeps the spent budget
        after = httpx.post(f"{url}/v1/predict", json={"texts": ["a"]}, timeout=30,
                           headers={"Authorization": f"Bearer {keys['budget']}"}).status_code
        report["quota"]["after_restart"] = after
        report["quota"]["held"] = report["quota"]["held"] and after == 429
        report["server_alive"] = proc.poll() is None
        report["server_seconds"] = round(time.monotonic() - t0, 1)
    finally:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
    report["server_log_tracebacks"] = log.read_text(errors="replace").count("Traceback")
    report["cli"] = cli_suite(victim, work)
    shutil.rmtree(work, ignore_errors=True)
    held = all(report[s]["held"] for s in ("poison", "auth", "quota", "lock", "cli")) and report["server_alive"]
    report["held"] = held
    p = report["poison"]
    hostile = sum(sum(v.values()) for k, v in p["hostile"].items() if k != "strange-valid")
    print(f"{'suite':8} {'inputs':>7}  outcome")
    print(f"{'poison':8} {hostile:>7}  {p['hostile']} (strange-valid: 200/422 only); normal {p['normal']}; "
          f"{len(p['failures'])} failures; healthz {p['health']}")
    print(f"{'auth':8} {report['auth']['requests']:>7}  {report['auth']['codes']}")
    q = report["quota"]
    print(f"{'quota':8} {42:>7}  burst {q['burst']}; budget {q['budget']}; after restart {q['after_restart']}")
    lk = report["lock"]
    print(f"{'lock':8} {3:>7}  {lk['locked_requests']} Retry-After {lk['retry_after']}; healthz {lk['healthz']} "
          f"in {lk['healthz_seconds']}s; after release {lk['after_release']}")
    c = report["cli"]
    print(f"{'cli':8} {c['inputs']:>7}  {c['exit_2_one_line']} exit 2 with one line; symlink target "
          f"{c['symlink_target_mode']}; failures {c['failures']}")
    print(f"held: {held}; server tracebacks in its log: {report['server_log_tracebacks']}")
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
