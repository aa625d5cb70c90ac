"""Benchmark: throughput of `ptmlab serve` (dynamic batching) against a naive FastAPI endpoint that calls a
transformers ``pipeline`` once per request, both on 127.0.0.1, under the same 16 concurrent clients, in one run.

Each request carries one SST-2 dev sentence. `ptmlab serve` runs at its default precision (auto: bf16 on CPUs
with AVX512-BF16/AMX) and again with --precision fp32, to separate what dynamic batching alone gives.
The servers run one after the other (never at once), each in its
own process with the same torch thread count. Writes benchmarks/results/serve.MACHINE.json and prints a table.

    python benchmarks/serve.py --run RUN_DIR [--requests 400] [--clients 16]
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, help="run directory of a fine-tuned classifier (e.g. minilm on SST-2)")
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--naive-server", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
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
    key = open_store(str(home)).create_key("bench", rate=1e6, burst=1e6, daily_budget=10**9)
    env = {**os.environ, "PTMLAB_HOME": home}
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
