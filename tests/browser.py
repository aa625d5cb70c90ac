"""A page opened in a real headless Chromium (Debian's package), driven over the DevTools protocol.

``open_page(path, shots)`` starts Chromium with a private profile, loads the file, waits for its load event and
returns a ``Page``: JavaScript results (``evaluate``), the console errors and exceptions seen while loading, and a
full-page screenshot. No browser is downloaded: without a ``chromium`` on PATH the caller skips.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if path := shutil.which(name):
            return path
    return None


@dataclass
class Page:
    ws: object
    errors: list[str] = field(default_factory=list)
    _id: int = 0

    def call(self, method: str, params: dict | None = None, timeout: float = 30) -> dict:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params or {}}))
        deadline = time.time() + timeout
        while time.time() < deadline:
            msg = self._receive(deadline)
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
        raise TimeoutError(f"no answer to {method} in {timeout}s")

    def wait_for(self, event: str, timeout: float = 30) -> dict:
        deadline = time.time() + timeout
        while time.time() < deadline:
            msg = self._receive(deadline)
            if msg.get("method") == event:
                return msg.get("params", {})
        raise TimeoutError(f"no {event} in {timeout}s")

    def _receive(self, deadline: float) -> dict:
        self.ws.settimeout(max(0.1, deadline - time.time()))
        msg = json.loads(self.ws.recv())
        self._note(msg)
        return msg

    def _note(self, msg: dict) -> None:
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                       for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            self.errors.append("exception: " + str(params.get("exceptionDetails", {}).get("text", "")))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"log: {entry.get('text', '')} {entry.get('url', '')}".strip())

    def evaluate(self, expression: str):
        res = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in res:
            raise RuntimeError(f"page script failed: {res['exceptionDetails'].get('text')}")
        return res["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def settle(self, seconds: float = 0.5) -> None:
        """Read the events that arrive for ``seconds`` (late console errors, image failures)."""
        deadline = time.time() + seconds
        with contextlib.suppress(Exception):
            while time.time() < deadline:
                self._receive(deadline)


@contextlib.contextmanager
def open_page(html_file: Path, profile: Path, width: int = 1600, height: int = 1000):
    """Chromium headless on ``html_file``; yields a ``Page`` after the load event, stops the browser after."""
    import websocket

    exe = find_chromium()
    if exe is None:
        raise FileNotFoundError("chromium")
    profile.mkdir(parents=True, exist_ok=True)
    args = [exe, "--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--remote-debugging-port=0",
            f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"]
    if os.geteuid() == 0:
        args.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
    log = profile / "chromium.log"  # a file, not a pipe: a full pipe would stall the browser
    with open(log, "wb") as err:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.time() + 60
        while not (port_file.is_file() and port_file.read_text().strip()):
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"chromium did not start: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            targets = json.loads(r.read())
        target = next(t for t in targets if t.get("type") == "page")
        ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        page = Page(ws)
        for domain in ("Page", "Runtime", "Log"):
            page.call(f"{domain}.enable")
        page.call("Page.navigate", {"url": Path(html_file).resolve().as_uri()})
        page.wait_for("Page.loadEventFired")
        page.settle()
        try:
            yield page
        finally:
            ws.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
