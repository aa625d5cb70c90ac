"""Benchmark: throughput of `ptmlab serve` (dynamic batching) against a naive FastAPI endpoint that calls a
transformers ``pipeline`` once per request, both on 127.0.0.1, under the same 16 concurrent clients, in one run.

Each request carries one SST-2 dev sentence. `ptmlab serve` runs at its default precision (auto: bf16 on CPUs
with AVX512-BF16/AMX) and again with --precision fp32, to separate what dynamic batching alone gives.
The servers run one after the other (never at once), each in its
own process with the same torch thread count. Writes benchmarks/results/serve.MACHINE.json and prints a table.

The `limits` case measures what a client that pushes the connection limits costs a normal one: `ptmlab serve` with
its default limits (32 KiB request head, 1 MB body) answers one normal client (one keyed SST-2 sentence per request,
one request at a time) alone, and again while another client, in a process of its own, sends requests with the
largest head and body the limits allow back to back: without a key (answered 401 from the head, the body discarded
unread) and with a key and a body that is valid JSON but not a request (read whole and parsed, answered 422). The
three conditions alternate for ``--rounds`` rounds in one server's life; the normal client's p99 under each hostile
client over its p99 alone is the ratio reported (target <= 2). Writes benchmarks/results/serve_limits.MACHINE.json.

    python benchmarks/serve.py --run RUN_DIR [--requests 400] [--clients 16]
    python benchmarks/serve.py --run RUN_DIR --case limits [--limit-requests 300] [--rounds 2]
"""

# isort: off
from _env import ROOT, machine_info, portable, result_path  # first: offline defaults
# isort: on

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def naive_app(run_dir: str):
    """The baseline: one pipeline, called per request (FastAPI runs sync endpoints in its thread pool)."""
    from fastapi import FastAPI
    from pydantic import create_model
    from transformers import pipeline

    clf = pipeline("text-classification", model=run_dir, tokenizer=run_dir, device=-1)
    app = FastAPI()
    # the request body model; this file has no `from __future__ import annotations`, so FastAPI can resolve it
    req_model = create_model("Req", texts=(list[str], ...))

    @app.post("/v1/predict")
    def predict(req: req_model) -> dict:  # type: ignore[valid-type]
        return {"predictions": clf(req.texts, top_k=None)}

    return app


def wait_ready(url: str, proc) -> None:
    import httpx

    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.5)
    raise SystemExit("server did not start")


def load(url: str, key: str | None, texts: list[str], n: int, clients: int) -> dict:
    import httpx

    lat: list[float] = []
    errors = [0]
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {key}"} if key else {}

    def client(c: int) -> None:
        with httpx.Client(headers=headers, timeout=120) as http:
            for i in range(c, n, clients):
                t0 = time.perf_counter()
                r = http.post(url, json={"texts": [texts[i % len(texts)]]})
                with lock:
                    lat.append(time.perf_counter() - t0)
                    errors[0] += r.status_code != 200

    httpx.post(url, json={"texts": [texts[0]]}, headers=headers, timeout=120)  # warm-up
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    q = statistics.quantiles(lat, n=100)
    return {"requests": n, "errors": errors[0], "seconds": round(wall, 2), "req_per_s": round(n / wall, 2),
            "p50_ms": round(q[49] * 1000, 1), "p99_ms": round(q[98] * 1000, 1)}


HEAD_LIMIT, BODY_LIMIT = 32_768, 1_000_000  # `ptmlab serve`'s defaults (--max-header-bytes, --max-body)


def hostile_client(port: int, key: str, connections: int) -> None:
    """Requests with the largest head and body the default limits allow, back to back on ``connections`` keep-alive
    connections, until SIGTERM; then prints what was sent (JSON) and exits. ``key`` empty: no key (401)."""
    import signal
    import socket

    auth = f"Authorization: Bearer {key}\r\n".encode() if key else b""
    body = b'{"texts": "' + b"x" * (BODY_LIMIT - 13) + b'"}'  # valid JSON, not a request: 422 once read whole
    assert len(body) == BODY_LIMIT
    start = (b"POST /v1/predict HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n" + auth
             + b"Content-Length: " + str(BODY_LIMIT).encode() + b"\r\nX-Pad: ")
    head = start + b"p" * (HEAD_LIMIT - len(start) - 64) + b"\r\n\r\n"  # just under the head limit
    stats = {"requests": 0, "bytes": 0, "statuses": {}, "reconnects": 0}
    lock, stop = threading.Lock(), threading.Event()

    def one_connection() -> None:
        s = None
        while not stop.is_set():
            try:
                if s is None:
                    s = socket.create_connection(("127.0.0.1", port), timeout=30)
                s.sendall(head + body)
                raw = b""
                while b"\r\n\r\n" not in raw:
                    chunk = s.recv(65536)
                    if not chunk:
                        raise ConnectionError
                    raw += chunk
                top, _, rest = raw.partition(b"\r\n\r\n")
                length = next(int(x.split(b":")[1]) for x in top.split(b"\r\n") if x.lower().startswith(
                    b"content-length"))
                while len(rest) < length:
                    rest += s.recv(65536)
                status = top.split(b" ")[1].decode()
                with lock:
                    stats["requests"] += 1
                    stats["bytes"] += len(head) + len(body)
                    stats["statuses"][status] = stats["statuses"].get(status, 0) + 1
                if b"connection: close" in top.lower():
                    s.close()
                    s = None
            except (OSError, ConnectionError, StopIteration):
                if s is not None:
                    s.close()
                s = None
                with lock:
                    stats["reconnects"] += 1
                time.sleep(0.01)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one_connection, daemon=True) for _ in range(connections)]
    for t in threads:
        t.start()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    seconds = time.perf_counter() - t0
    with lock:
        out = {**stats, "seconds": round(seconds, 2), "mb_per_s": round(stats["bytes"] / seconds / 1e6, 1),
               "head_bytes": len(head), "body_bytes": len(body)}
    print(json.dumps(out), flush=True)
    os._exit(0)


def latency(url: str, key: str, texts: list[str], n: int, offset: int) -> list[float]:
    """One normal client: ``n`` single-sentence requests, one at a time, on one keep-alive connection."""
    import httpx

    out = []
    with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
        for i in range(n):
            t0 = time.perf_counter()
            r = http.post(url, json={"texts": [texts[(offset + i) % len(texts)]]})
            out.append(time.perf_counter() - t0)
            if r.status_code != 200:
                raise SystemExit(f"the normal client got {r.status_code}: {r.text[:200]}")
    return out


def summary(lat: list[float]) -> dict:
    q = statistics.quantiles(lat, n=100)
    return {"requests": len(lat), "p50_ms": round(q[49] * 1000, 2), "p99_ms": round(q[98] * 1000, 2),
            "mean_ms": round(statistics.fmean(lat) * 1000, 2)}


def limits_case(args, texts: list[str], env: dict, key: str, hostile_key: str) -> None:
    import signal

    base = f"http://127.0.0.1:{args.port}"
    cmd = [sys.executable, "-m", "ptmlab", "serve", args.run, "--port", str(args.port)]  # default limits
    server = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    conditions = {"alone": None, "no key, largest head and body": "", "keyed, largest head and body": hostile_key}
    lat: dict[str, list[float]] = {c: [] for c in conditions}
    hostile: dict[str, list[dict]] = {c: [] for c in conditions if conditions[c] is not None}
    try:
        wait_ready(base + "/healthz", server)
        latency(base + "/v1/predict", key, texts, 20, 0)  # warm-up
        for r in range(args.rounds):
            for c, hkey in conditions.items():
                attacker = None
                if hkey is not None:
                    attacker = subprocess.Popen([sys.executable, __file__, "--run", args.run, "--port", str(args.port),
                                                 "--hostile-client", hkey or "-", "--hostile-connections",
                                                 str(args.hostile_connections)], stdout=subprocess.PIPE, text=True,
                                                cwd=ROOT)
                    time.sleep(1.0)  # the attack is under way before the first measured request
                lat[c] += latency(base + "/v1/predict", key, texts, args.limit_requests, r * args.limit_requests)
                if attacker is not None:
                    attacker.send_signal(signal.SIGTERM)
                    out, _ = attacker.communicate(timeout=60)
                    hostile[c].append(json.loads(out.strip().splitlines()[-1]))
        rss = next(int(x.split()[1]) for x in open(f"/proc/{server.pid}/status") if x.startswith("VmRSS:")) / 1024
    finally:
        server.terminate()
        server.wait(timeout=60)
    results = {c: summary(v) for c, v in lat.items()}
    alone = results["alone"]["p99_ms"]
    for c in hostile:
        results[c]["p99_ratio_vs_alone"] = round(results[c]["p99_ms"] / alone, 2)
        results[c]["hostile_client"] = hostile[c]
    worst = max(results[c]["p99_ratio_vs_alone"] for c in hostile)
    out = {"machine": machine_info(), "run": portable(args.run), "limits": {"max_header_bytes": HEAD_LIMIT,
                                                                           "max_body": BODY_LIMIT},
           "rounds": args.rounds, "requests_per_round": args.limit_requests,
           "hostile_connections": args.hostile_connections, "results": results, "worst_p99_ratio": worst,
           "target_p99_ratio": 2.0, "server_rss_mb_after": round(rss, 1), "cpus": len(os.sched_getaffinity(0)),
           "load_average": os.getloadavg()}
    path = result_path("serve_limits")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"{'normal client':32} {'p50 ms':>8} {'p99 ms':>8} {'p99 / alone':>12} {'hostile MB/s':>13}")
    for c, r in results.items():
        mbs = statistics.fmean(h["mb_per_s"] for h in hostile[c]) if c in hostile else None
        print(f"{c:32} {r['p50_ms']:>8} {r['p99_ms']:>8} {r.get('p99_ratio_vs_alone', 1.0):>12} "
              f"{'' if mbs is None else round(mbs, 1):>13}")
    print(f"worst p99 ratio {worst:.2f} (target <= 2); written to {path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, help="run directory of a fine-tuned classifier (e.g. minilm on SST-2)")
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--case", choices=("throughput", "limits", "all"), default="all",
                   help="throughput: ptmlab serve against the naive baseline; limits: a normal client's latency "
                        "beside a client at the connection limits; all: both")
    p.add_argument("--limit-requests", type=int, default=300, help="normal requests per condition and round (limits)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the three conditions (limits)")
    p.add_argument("--hostile-connections", type=int, default=1, help="connections of the hostile client (limits)")
    p.add_argument("--naive-server", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--hostile-client", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.hostile_client is not None:
        hostile_client(args.port, "" if args.hostile_client == "-" else args.hostile_client, args.hostile_connections)
        return
    if args.naive_server:
        import uvicorn

        from ptmlab.core.seed import configure_threads

        configure_threads()
        uvicorn.run(naive_app(args.run), host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
        return
    from ptmlab.data.loaders import load_task
    from ptmlab.serve.state import open_store

    texts = load_task("sst2").splits["dev"].text
    home = tempfile.mkdtemp(prefix="ptmlab-bench-")
    store = open_store(str(home))
    key = store.create_key("bench", rate=1e6, burst=1e6, daily_budget=10**9)
    hostile_key = store.create_key("hostile", rate=1e6, burst=1e6, daily_budget=10**9)
    store.close()
    env = {**os.environ, "PTMLAB_HOME": home}
    if args.case in ("limits", "all"):
        limits_case(args, texts, env, key, hostile_key)
    if args.case == "limits":
        return
    results = {}
    servers = {
        "ptmlab serve": [sys.executable, "-m", "ptmlab", "serve", args.run, "--port", str(args.port),
                         "--max-batch", "32", "--max-wait-ms", "5"],
        "ptmlab serve fp32": [sys.executable, "-m", "ptmlab", "serve", args.run, "--port", str(args.port),
                              "--max-batch", "32", "--max-wait-ms", "5", "--precision", "fp32"],
        "naive pipeline": [sys.executable, __file__, "--run", args.run, "--port", str(args.port), "--naive-server"],
    }
    for name, cmd in servers.items():
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            base = f"http://127.0.0.1:{args.port}"
            wait_ready(base + "/openapi.json", proc)
            results[name] = load(base + "/v1/predict", key if name.startswith("ptmlab") else None, texts,
                                 args.requests, args.clients)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    ratio = results["ptmlab serve"]["req_per_s"] / results["naive pipeline"]["req_per_s"]
    ratio_fp32 = results["ptmlab serve fp32"]["req_per_s"] / results["naive pipeline"]["req_per_s"]
    out = {"machine": machine_info(), "run": portable(args.run), "clients": args.clients, "requests": args.requests,
           "results": results,
           "throughput_ratio": round(ratio, 2), "throughput_ratio_fp32": round(ratio_fp32, 2), "target_ratio": 3.0,
           "bf16_label_agreement_with_fp32": bf16_agreement(args.run, texts), "cpus": len(os.sched_getaffinity(0)),
           "load_average": os.getloadavg()}
    path = result_path("serve")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"{'server':16} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
    for name, r in results.items():
        print(f"{name:16} {r['req_per_s']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8} {r['errors']:>7}")
    print(f"throughput ratio {ratio:.2f}x (target >= 3x; fp32, dynamic batching alone: {ratio_fp32:.2f}x); bf16 "
          f"labels agree with fp32 on {out['bf16_label_agreement_with_fp32']:.4f} of SST-2 dev; written to {path}")


def bf16_agreement(run: str, texts: list[str]) -> float:
    """Share of texts whose label is the same under the served default precision (auto) and fp32."""
    from ptmlab.serve.predictor import Predictor

    auto, fp32 = Predictor(run, precision="auto", chunk=8), Predictor(run, precision="fp32")
    same = 0
    for s in range(0, len(texts), 64):
        a, b = auto.predict(texts[s:s + 64]), fp32.predict(texts[s:s + 64])
        same += sum(max(range(len(x)), key=x.__getitem__) == max(range(len(y)), key=y.__getitem__)
                    for x, y in zip(a, b, strict=True))
    return round(same / len(texts), 4)


if __name__ == "__main__":
    main()
