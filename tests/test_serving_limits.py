"""Connection limits of `ptmlab serve` on loopback, against a server process whose memory and sockets the tests read
from /proc: a header that never ends, bodies without a key, more connections than allowed, idle, slow-header and
slow-body clients; the admin scope of /metrics and a request with two Authorization headers; a PostgreSQL store that
stops answering (SIGSTOP) and comes back (SIGCONT)."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import signal
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from ptmlab.core.errors import PtmlabError
from ptmlab.serve.config import ServeConfig
from ptmlab.serve.server import LINGER_SECONDS
from ptmlab.serve.state import open_store
from tests.conftest import assert_clean_error, run_cli
from tests.pg_support import pg_bin, postgres_server
from tests.test_serve_support import free_port, start_server_process, train_victim

HEADER_LIMIT, READ_TIMEOUT, KEEP_ALIVE, MAX_CONNECTIONS = 16_384, 2.0, 1.0, 16
MARGIN = 1.5  # seconds a deadline may be late on two busy cores (the event loop wakes on a timer)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def open_sockets(pid: int) -> int:
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_until_closed(s: socket.socket, limit: float = 30) -> bytes:
    """Everything the server sends until it closes the connection (a reset counts as closed)."""
    s.settimeout(limit)
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return out


def status_of(raw: bytes) -> int | None:
    return int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1 ") else None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    victim = train_victim()
    home = tmp_path_factory.mktemp("home")
    store = open_store(str(home))
    key, admin = store.create_key("user", rate=1e4, burst=1e4), store.create_key("ops", scopes="admin")
    store.close()
    port = free_port()
    log = tmp_path_factory.mktemp("log") / "serve.log"
    proc = start_server_process(victim, home, port, "--no-detector", "--max-header-bytes", str(HEADER_LIMIT),
                                "--read-timeout", str(READ_TIMEOUT), "--keep-alive-timeout", str(KEEP_ALIVE),
                                "--max-connections", str(MAX_CONNECTIONS), "--limit-concurrency",
                                str(MAX_CONNECTIONS), "--max-body", "1000000", log=log)
    try:
        yield SimpleNamespace(url=f"http://127.0.0.1:{port}", port=port, pid=proc.pid, key=key, admin=admin, log=log)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "Traceback" not in log.read_text(errors="replace")


def predict_ok(server) -> bool:
    r = httpx.post(f"{server.url}/v1/predict", json={"texts": ["a good film"]}, timeout=30,
                   headers={"Authorization": f"Bearer {server.key}"})
    return r.status_code == 200


def endless_header(port: int, chunks: int = 200, size: int = 1 << 20) -> tuple[int, float]:
    """A request whose header never ends (``chunks`` x ``size`` bytes of one header value): bytes the server let in
    before it closed the connection, and how long that took."""
    s = connect(port)
    t0, sent = time.monotonic(), 0
    pad = b"a" * size
    try:
        s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nX-Pad: ")
        for _ in range(chunks):
            s.sendall(pad)
            sent += size
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        pass
    finally:
        s.close()
    return sent, time.monotonic() - t0


def unkeyed_bodies(port: int, n: int, body: int = 1_000_000) -> list[int]:
    """``n`` requests, one connection each, with the largest head and body the limits allow and no key: each is
    answered 401 without its body being read (the server drops 256 KiB of it, then closes half a second later: the
    next request waits for that, so that the connection cap does not refuse it)."""
    head = (b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Pad: "
            + b"p" * (HEADER_LIMIT - 200) + b"\r\nContent-Length: " + str(body).encode() + b"\r\n\r\n")
    payload = b'{"texts": ["' + b"x" * (body - 15) + b'"]}'
    assert len(payload) == body
    codes = []
    for _ in range(n):
        s = connect(port)
        try:
            with contextlib.suppress(OSError):  # the server stops reading a body it answered without: it may close
                s.sendall(head + payload)
                s.shutdown(socket.SHUT_WR)
            codes.append(status_of(read_until_closed(s, 15)) or -1)
        finally:
            s.close()
        time.sleep(LINGER_SECONDS + 0.1)
    return codes


def test_a_client_without_a_key_cannot_grow_the_servers_memory(server):
    # a header over the limit, sent at once: 431, and the connection is closed
    s = connect(server.port)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (HEADER_LIMIT + 100) + b"\r\n\r\n")
    assert status_of(read_until_closed(s)) == 431
    s.close()
    s = connect(server.port)  # one just under the limit is served
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: " + b"a" * (HEADER_LIMIT - 200)
              + b"\r\n\r\n")
    assert status_of(read_until_closed(s)) == 200
    s.close()

    for _ in range(3):  # the allocator's steady state before the baseline
        endless_header(server.port, chunks=8)
    unkeyed_bodies(server.port, 3)
    before = rss_mb(server.pid)
    peak, stop = [before], threading.Event()

    def watch():
        while not stop.is_set():
            peak.append(rss_mb(server.pid))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        t0 = time.monotonic()
        with cf.ThreadPoolExecutor(2) as pool:  # two endless headers at once, the review's worst case
            endless = list(pool.map(lambda _: endless_header(server.port), range(2)))
        endless_seconds = time.monotonic() - t0
        with cf.ThreadPoolExecutor(4) as pool:  # and 40 of the largest bodies the limits allow, without a key
            codes = [c for batch in pool.map(lambda _: unkeyed_bodies(server.port, 10), range(4)) for c in batch]
    finally:
        stop.set()
        watcher.join()
    after = rss_mb(server.pid)
    print(f"RSS before {before:.1f} MB, peak {max(peak):.1f}, after {after:.1f}; endless headers {endless}; "
          f"{len(codes)} unkeyed bodies, in {time.monotonic() - t0:.1f}s in all")
    for sent, seconds in endless:  # cut early: the kernel's socket buffers hold at most a few MB, not 200 MB
        assert sent < 32 << 20 and seconds < 10, (sent, seconds)
    assert endless_seconds < 15
    assert codes == [401] * 40, codes
    assert max(peak) - before < 8 and after - before < 4, (before, max(peak), after)
    assert predict_ok(server)


def test_no_client_holds_more_connections_than_the_cap(server):
    time.sleep(KEEP_ALIVE + 0.5)  # connections of earlier tests are gone
    base = open_sockets(server.pid)
    held = [connect(server.port) for _ in range(MAX_CONNECTIONS + 8)]
    try:
        time.sleep(0.3)
        assert open_sockets(server.pid) <= base + MAX_CONNECTIONS
        refused = 0
        for s in held[MAX_CONNECTIONS:]:  # the ones past the cap: 503 (or closed) at once, without a request
            raw = read_until_closed(s, 5)
            assert status_of(raw) in (503, None), raw[:200]
            refused += 1
        assert refused == 8
        t0 = time.monotonic()
        while open_sockets(server.pid) > base and time.monotonic() - t0 < KEEP_ALIVE + MARGIN + 1:
            time.sleep(0.05)  # the held ones, idle, are closed after --keep-alive-timeout
        assert open_sockets(server.pid) <= base, (open_sockets(server.pid), base)
    finally:
        for s in held:
            s.close()
    assert predict_ok(server)


def test_idle_slow_header_and_slow_body_connections_are_closed_within_their_deadlines(server):
    def trickle(first: bytes, drip: bytes, every: float = 0.25) -> tuple[float, int | None]:
        """Send ``first``, then ``drip`` a byte at a time; seconds until the server closed, and its status."""
        s = connect(server.port)
        t0 = time.monotonic()
        got = b""
        try:
            s.sendall(first)
            s.settimeout(every)
            for i in range(len(drip)):
                try:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    got += chunk
                except TimeoutError:
                    pass
                s.sendall(drip[i:i + 1])
            got += read_until_closed(s, 30)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            s.close()
        return time.monotonic() - t0, status_of(got)

    keyed = f"Authorization: Bearer {server.key}\r\n".encode()
    body_head = b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 400\r\n"
    cases = {
        "idle": (b"", b""),
        "blank lines": (b"", b"\r\n" * 200),  # bytes that start no request do not keep it open
        "slow header": (b"POST /v1/predict HTTP/1.1\r\n", b"X-Slow: " + b"a" * 200),
        "slow body, keyed": (body_head + keyed + b"\r\n", b'{"texts": ["' + b"a" * 300),
        "slow body, no key": (body_head + b"\r\n", b'{"texts": ["' + b"a" * 300),
    }
    with cf.ThreadPoolExecutor(len(cases)) as pool:
        out = dict(zip(cases, pool.map(lambda c: trickle(*c), cases.values()), strict=True))
    for name in ("idle", "blank lines"):
        assert KEEP_ALIVE - 0.1 <= out[name][0] <= KEEP_ALIVE + MARGIN, (name, out[name])
    for name in ("slow header", "slow body, keyed", "slow body, no key"):
        assert READ_TIMEOUT - 0.1 <= out[name][0] <= READ_TIMEOUT + MARGIN, (name, out[name])
    assert out["slow header"][1] == 408 and out["slow body, keyed"][1] == 408
    assert out["slow body, no key"][1] == 401  # answered at once; the rest of its body then had the same deadline
    s = connect(server.port)  # a keep-alive connection is closed after --keep-alive-timeout without a next request
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    t0 = time.monotonic()
    raw = read_until_closed(s)
    assert status_of(raw) == 200 and time.monotonic() - t0 <= KEEP_ALIVE + MARGIN
    s.close()
    assert predict_ok(server)


def test_metrics_need_the_admin_scope_and_two_authorization_headers_are_refused(server):
    url, key, admin = server.url, server.key, server.admin
    assert httpx.get(f"{url}/metrics").status_code == 401
    assert httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {key}"}).status_code == 403
    ok = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {admin}"})
    assert ok.status_code == 200 and "ptmlab_requests_total" in ok.text
    r = httpx.post(f"{url}/v1/predict", json={"texts": ["a"]}, headers={"Authorization": f"Bearer {admin}"})
    assert r.status_code == 403 and "predict" in r.json()["error"]  # an admin-only key cannot spend a budget
    two = [("Authorization", f"Bearer {key}"), ("Authorization", f"Bearer {admin}")]
    for path, method in (("/v1/predict", "POST"), ("/metrics", "GET")):
        r = httpx.request(method, f"{url}{path}", headers=two, json={"texts": ["a"]})
        assert r.status_code == 400 and "Authorization" in r.json()["error"], (path, r.text)


def test_scopes_and_connection_limits_are_checked_options(tmp_path):
    env = {"PTMLAB_HOME": str(tmp_path / "h")}
    out = run_cli("keys", "create", "--name", "ops", "--scopes", "admin", env=env)
    assert out.returncode == 0, out.stderr
    assert "scopes admin" in out.stdout and "admin" in run_cli("keys", "list", env=env).stdout
    assert_clean_error(run_cli("keys", "create", "--name", "x", "--scopes", "root", env=env), "scope", "admin")
    assert open_store(str(tmp_path / "h")).find_key(out.stdout.strip().splitlines()[-1]).scopes == ("admin",)
    for bad, needle in (({"max_header_bytes": 10}, "max-header-bytes"), ({"max_header_bytes": 10**9}, "at most"),
                        ({"read_timeout": 0}, "read-timeout"), ({"read_timeout": float("nan")}, "finite"),
                        ({"keep_alive_timeout": -1}, "keep-alive-timeout"), ({"max_connections": 0}, "connections"),
                        ({"limit_concurrency": 600}, "limit-concurrency"), ({"max_connections": 10**7}, "at most")):
        with pytest.raises(PtmlabError, match=needle):
            ServeConfig(**bad)
    assert_clean_error(run_cli("serve", str(tmp_path), "--max-connections", "10", "--limit-concurrency", "20"),
                       "--limit-concurrency")


# -- a PostgreSQL store that stops answering --------------------------------------------------------------------

def cluster_pids(port: int) -> list[int]:
    """The postmaster listening on ``port`` and every process it started (its backends and helpers)."""
    procs = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
                ppid = int(next(x for x in Path(f"/proc/{d}/status").read_text().splitlines()
                                if x.startswith("PPid:")).split()[1])
            except (OSError, StopIteration):
                continue
            procs[int(d)] = (cmd, ppid)
    roots = [p for p, (cmd, _) in procs.items()
             if cmd and cmd[0].endswith(b"postgres") and str(port).encode() in cmd and b"-p" in cmd]
    assert len(roots) == 1, roots
    return roots + [p for p, (_, ppid) in procs.items() if ppid == roots[0]]


@pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get "
                                              "install postgresql (scripts/setup.sh --test does)")
def test_a_stopped_postgres_gets_503_within_the_store_timeout_and_service_resumes(tmp_path):
    victim = train_victim()
    timeout = 1.0
    with postgres_server() as pg_url:
        key = open_store(pg_url).create_key("user", rate=1e4, burst=1e4)
        port = free_port()
        proc = start_server_process(victim, tmp_path / "home", port, "--state", pg_url, "--no-detector",
                                    "--state-timeout", str(timeout), log=tmp_path / "serve.log")
        url, auth = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {key}"}
        pg_port, pids = int(pg_url.rsplit(":", 1)[1].split("/")[0]), []
        try:
            assert httpx.post(f"{url}/v1/predict", json={"texts": ["good"]}, headers=auth, timeout=30).status_code \
                == 200
            assert httpx.get(f"{url}/healthz", timeout=30).json()["store"] == "ok"
            try:
                pids = cluster_pids(pg_port)[:1]  # now: the server's connections have their backends
                os.kill(pids[0], signal.SIGSTOP)  # the postmaster first: it forks no backend after this
                pids += cluster_pids(pg_port)[1:]
                for p in pids[1:]:
                    os.kill(p, signal.SIGSTOP)
                for _ in range(3):  # each request: 503 with Retry-After within the timeout (not after 20 s and more)
                    t0 = time.monotonic()
                    r = httpx.post(f"{url}/v1/predict", json={"texts": ["good"]}, headers=auth, timeout=30)
                    took = time.monotonic() - t0
                    assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
                    assert took <= timeout + MARGIN, took
                    print(f"503 after {took:.2f}s")
                time.sleep(1.1)  # past the health check's one-second memory
                t0 = time.monotonic()
                h = httpx.get(f"{url}/healthz", timeout=30)
                assert h.status_code == 503 and h.json()["store"] == "unreachable", h.text
                assert time.monotonic() - t0 <= timeout + MARGIN
            finally:
                for p in pids:
                    os.kill(p, signal.SIGCONT)
            deadline, codes = time.monotonic() + 3 * timeout + 10, []
            while time.monotonic() < deadline:  # the database is back: so is the service
                codes.append(httpx.post(f"{url}/v1/predict", json={"texts": ["good"]}, headers=auth,
                                        timeout=30).status_code)
                if codes[-1] == 200:
                    break
                time.sleep(0.2)
            assert codes[-1] == 200, codes
            print(f"after SIGCONT: {codes}")
            time.sleep(1.1)
            assert httpx.get(f"{url}/healthz", timeout=30).json()["store"] == "ok"
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    assert "Traceback" not in (tmp_path / "serve.log").read_text(errors="replace")
