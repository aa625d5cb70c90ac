"""The shared state store: PostgreSQL, for several ``ptmlab serve`` replicas charging the same keys.

Every admission and settlement locks the key's row (``SELECT ... FOR UPDATE``), so replicas take a key's budget and
rate-limit tokens one at a time and never overspend; other keys are not blocked. ``lock_timeout`` and
``statement_timeout`` bound every wait on the server (``StoreBusy`` -> 503); a broken connection is reopened on the
next call.

A server that stops answering (stopped, frozen, behind a dead network path) is bounded on the client too: connecting
gives up after ``connect_timeout``, TCP keepalives and ``tcp_user_timeout`` notice a dead peer, and a watchdog shuts
the socket of any call still waiting ``2 * busy_timeout + 1`` seconds after it began (longer than the server's own
``statement_timeout``, so a live but busy server answers "locked" first), so no thread waits on it for ever. The app
waits ``--state-timeout`` for each call and answers 503 meanwhile.
"""

from __future__ import annotations

import heapq
import itertools
import os
import socket
import threading
import time
from urllib.parse import urlsplit, urlunsplit

from ptmlab.core.errors import PtmlabError
from ptmlab.serve.excerpt import excerpt
from ptmlab.serve.state import Store, StoreBusy

SCHEMA = [
    "CREATE TABLE IF NOT EXISTS keys (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, key_hash TEXT NOT NULL UNIQUE, "
    "created DOUBLE PRECISION NOT NULL, revoked DOUBLE PRECISION, rate DOUBLE PRECISION NOT NULL, "
    "burst DOUBLE PRECISION NOT NULL, daily_budget BIGINT NOT NULL, scopes TEXT NOT NULL DEFAULT 'predict')",
    "ALTER TABLE keys ADD COLUMN IF NOT EXISTS scopes TEXT NOT NULL DEFAULT 'predict'",  # keys of older versions
    "CREATE TABLE IF NOT EXISTS usage (key_id BIGINT NOT NULL, day TEXT NOT NULL, queries BIGINT NOT NULL, "
    "requests BIGINT NOT NULL, PRIMARY KEY (key_id, day))",
    "CREATE TABLE IF NOT EXISTS holds (id BIGSERIAL PRIMARY KEY, key_id BIGINT NOT NULL, day TEXT NOT NULL, "
    "n BIGINT NOT NULL, expires DOUBLE PRECISION NOT NULL)",
    "CREATE INDEX IF NOT EXISTS holds_key ON holds (key_id)",
    "CREATE TABLE IF NOT EXISTS buckets (key_id BIGINT PRIMARY KEY, tokens DOUBLE PRECISION NOT NULL, "
    "updated DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE IF NOT EXISTS audit (id BIGSERIAL PRIMARY KEY, key_id BIGINT NOT NULL, ts DOUBLE PRECISION NOT NULL, "
    "text_hash TEXT NOT NULL, length BIGINT NOT NULL, score DOUBLE PRECISION, outcome TEXT NOT NULL DEFAULT 'ok')",
    "CREATE INDEX IF NOT EXISTS audit_key ON audit (key_id)",
    "CREATE TABLE IF NOT EXISTS key_scores (key_id BIGINT PRIMARY KEY, scored BIGINT NOT NULL, "
    "score DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE IF NOT EXISTS marks (id BIGSERIAL PRIMARY KEY, key_id BIGINT NOT NULL, kind TEXT NOT NULL, "
    "query_hash TEXT NOT NULL, true_label BIGINT NOT NULL, given_label BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS secrets (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
]
SCHEMA_LOCK = 72_057_001  # advisory lock: replicas starting together create the schema one at a time


def _printable(dsn: str) -> str:
    parts = urlsplit(dsn)
    host = parts.hostname or ""
    netloc = (f"{parts.username}@" if parts.username else "") + host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class Watchdog:
    """Shuts down the socket of a connection whose call outlives its deadline (one daemon thread for all calls): the
    call's blocked read then fails at once instead of waiting for a server that does not answer."""

    def __init__(self):
        self.cond = threading.Condition()
        self.calls: dict[int, tuple[float, int]] = {}  # token -> (deadline, socket fd)
        self.heap: list[tuple[float, int]] = []
        self.killed: set[int] = set()
        self.tokens = itertools.count()
        self.thread: threading.Thread | None = None

    def arm(self, fd: int, seconds: float) -> int:
        with self.cond:
            token = next(self.tokens)
            deadline = time.monotonic() + seconds
            self.calls[token] = (deadline, fd)
            heapq.heappush(self.heap, (deadline, token))
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="ptmlab-pg-watchdog", daemon=True)
                self.thread.start()
            self.cond.notify()
            return token

    def disarm(self, token: int) -> bool:
        """Whether the call's socket was shut down (the connection is then unusable)."""
        with self.cond:
            self.calls.pop(token, None)
            if token in self.killed:
                self.killed.discard(token)
                return True
            return False

    def _run(self) -> None:
        with self.cond:
            while True:
                now = time.monotonic()
                while self.heap and (self.heap[0][1] not in self.calls or self.heap[0][0] <= now):
                    _, token = heapq.heappop(self.heap)
                    call = self.calls.pop(token, None)
                    if call is not None:
                        self.killed.add(token)
                        _shutdown(call[1])
                self.cond.wait(self.heap[0][0] - now if self.heap else None)


def _shutdown(fd: int) -> None:
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        s.close()  # the duplicate only: the connection's own descriptor stays open, unusable, until it is closed


class PostgresStore(Store):
    def __init__(self, dsn: str, busy_timeout: float = 2.0):
        try:
            import psycopg
        except ImportError:
            raise PtmlabError("--state postgresql://... needs psycopg: pip install 'ptmlab[serve]'") from None
        self.psycopg = psycopg
        self.dsn = dsn
        try:
            self.where = excerpt(_printable(dsn), 200)
        except ValueError as e:  # a bracket left open, a port that is not a number, ...
            raise PtmlabError(f"--state is not a valid postgresql:// URL ({e}): pass "
                              f"postgresql://USER@HOST:PORT/DB") from None
        self.busy_timeout = busy_timeout
        self.call_deadline = 2 * busy_timeout + 1  # past the server's statement_timeout (2 * busy_timeout)
        self.watchdog = Watchdog()
        self.local = threading.local()
        self.conns: list = []
        self.conns_lock = threading.Lock()
        try:
            conn = self._conn()
            with conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK,))
                try:
                    for stmt in SCHEMA:
                        cur.execute(stmt)
                finally:
                    cur.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK,))
        except (psycopg.Error, StoreBusy, ValueError) as e:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise PtmlabError(f"cannot open the PostgreSQL state at {self.where} ({msg}): check --state or "
                              f"PTMLAB_STATE") from None

    def _conn(self):
        conn = getattr(self.local, "conn", None)
        if conn is not None and conn.closed:
            conn = None
        if conn is None:
            ms = int(self.busy_timeout * 1000)
            try:  # connect_timeout: libpq waits at least 2 s; keepalives and tcp_user_timeout notice a dead peer
                conn = self.psycopg.connect(self.dsn, autocommit=True, connect_timeout=max(2, round(self.busy_timeout)),
                                            options=f"-c lock_timeout={ms} -c statement_timeout={ms * 2}",
                                            keepalives=1, keepalives_idle=max(1, round(self.busy_timeout)),
                                            keepalives_interval=1, keepalives_count=3,
                                            tcp_user_timeout=int(self.call_deadline * 1000))
            except self.psycopg.OperationalError as e:
                why = str(e).strip().splitlines()[-1][:200] if str(e).strip() else type(e).__name__
                raise StoreBusy(f"the PostgreSQL state at {self.where} is unreachable ({why}): retry in a moment") \
                    from None
            self.local.conn = conn
            with self.conns_lock:
                self.conns.append(conn)
        return conn

    def _read(self, sql: str, params: tuple = ()) -> list[tuple]:
        return self._guarded(lambda: Store._read(self, sql, params))

    def _write(self, fn):
        return self._guarded(lambda: Store._write(self, fn))

    def _guarded(self, call):
        """``call()`` on this thread's connection, cut off by the watchdog ``call_deadline`` seconds from now."""
        conn = self._conn()
        try:
            token = self.watchdog.arm(conn.pgconn.socket, self.call_deadline)
        except self.psycopg.Error:
            self._drop(conn)
            raise StoreBusy(f"the PostgreSQL state at {self.where} is unreachable (connection lost): retry in a "
                            f"moment") from None
        try:
            out = call()
        except BaseException:
            if self.watchdog.disarm(token):
                self._drop(conn)
                raise StoreBusy(f"the PostgreSQL state at {self.where} did not answer within "
                                f"{self.call_deadline:g}s: retry in a moment") from None
            raise
        if self.watchdog.disarm(token):  # cut just as it answered: the connection is unusable now
            self._drop(conn)
        return out

    def _drop(self, conn) -> None:
        """Forget and close a connection that is broken (the next call on this thread opens a new one)."""
        if getattr(self.local, "conn", None) is conn:
            self.local.conn = None
        with self.conns_lock:
            if conn in self.conns:
                self.conns.remove(conn)
        try:
            conn.close()
        except Exception:  # noqa: BLE001 (a broken socket may fail to say goodbye)
            pass

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s")

    def _begin(self, cur) -> None:
        cur.execute("BEGIN")

    def _lock_key(self, cur, key_id: int) -> None:
        cur.execute("SELECT id FROM keys WHERE id = %s FOR UPDATE", (key_id,))

    def _insert_id(self, cur, sql: str, params: tuple) -> int:
        return int(cur.execute(self._sql(sql) + " RETURNING id", params).fetchone()[0])

    def _translate(self, e: Exception) -> Exception | None:
        errors = self.psycopg.errors
        if isinstance(e, errors.LockNotAvailable | errors.QueryCanceled | errors.SerializationFailure |
                      errors.DeadlockDetected):
            return StoreBusy(f"the PostgreSQL state at {self.where} is locked ({type(e).__name__}): retry in a moment")
        if isinstance(e, self.psycopg.OperationalError | self.psycopg.InterfaceError):
            conn = getattr(self.local, "conn", None)
            if conn is not None:
                self._drop(conn)
            return StoreBusy(f"the PostgreSQL state at {self.where} is unreachable ({type(e).__name__}): retry in a "
                             f"moment")
        return None

    def close(self) -> None:
        with self.conns_lock:
            for c in self.conns:
                c.close()
            self.conns.clear()
        self.local = threading.local()
