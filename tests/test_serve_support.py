"""Helpers (no tests) for the serving and extraction tests: a tiny model fine-tuned on the synthetic task."""

from __future__ import annotations

import atexit
import contextlib
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from tests.synthetic import write_task

_VICTIM: list[Path] = []


def train_victim() -> Path:
    """A tiny classifier fine-tuned on the synthetic task (dev accuracy ~1.0), trained once per test session."""
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    if _VICTIM:
        return _VICTIM[0]
    folder = Path(tempfile.mkdtemp(prefix="ptmlab-victim-"))
    atexit.register(shutil.rmtree, folder, True)
    files = write_task(folder / "data", n_train=400, n_dev=100)
    out = folder / "victim"
    run_finetune(FinetuneConfig(model="tiny", task="synthetic", train_file=files["train"], dev_file=files["dev"],
                                epochs=3, batch_size=16, lr=1e-3, max_length=32, output=str(out), seed=0,
                                logging_steps=50, test=False))
    _VICTIM.append(out)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server_process(run_dir: Path, home: Path, port: int, *extra: str, log: Path | None = None):
    """``python -m ptmlab serve`` in a subprocess; returns the process once /healthz answers."""
    env = {**os.environ, "PTMLAB_HOME": str(home), "PTMLAB_PROGRESS": "0"}
    out = open(log, "ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "-m", "ptmlab", "serve", str(run_dir), "--port", str(port), *extra],
                            env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start")


class HostileVictim(http.server.BaseHTTPRequestHandler):
    """A victim that answers every request with the answer named by the server's ``mode``: Retry-After headers no
    client should trust, bodies that are not JSON or not a prediction, label ids and probabilities out of range."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        n = len(json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))["texts"])
        two = {"label_names": ["a", "b"], "policy": "probs"}
        status, headers, body = {
            "date": (429, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, b"{}"),
            "future-date": (429, {"Retry-After": "Wed, 21 Oct 2099 07:28:00 GMT"}, b"{}"),
            "negative": (429, {"Retry-After": "-5"}, b"{}"), "huge": (429, {"Retry-After": "1e308"}, b"{}"),
            "html": (200, {}, b"<html>hi</html>"),
            "list": (200, {}, b"[1, 2]"),
            "no-names": (200, {}, json.dumps({"predictions": [{"label_id": 0}] * n, "policy": "probs"}).encode()),
            "short": (200, {}, json.dumps({**two, "predictions": [], "policy": "p"}).encode()),
            "bad-label": (200, {}, json.dumps({**two, "predictions": [{"label_id": "0"}] * n}).encode()),
            "label-out": (200, {}, json.dumps({**two, "predictions": [{"label_id": 7}] * n}).encode()),
            "nan": (200, {}, json.dumps({**two, "predictions": [{"label_id": 0, "probs": [float("nan"), 1]}] * n}
                                        ).encode()),
            "inf-probs": (200, {}, json.dumps({**two, "predictions": [{"label_id": 0, "probs": [1e309, 0]}] * n}
                                              ).encode()),
            "error-500": (500, {}, b"\x1b[2J" * 1000),
        }[self.server.mode]
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def hostile_victim(mode: str):
    """A :class:`HostileVictim` on a free loopback port for the ``with`` block; yields its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HostileVictim)
    server.mode = mode
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
