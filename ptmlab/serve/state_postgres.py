"""The shared state store: PostgreSQL, for several ``ptmlab serve`` replicas charging the same keys.

Every admission and settlement locks the key's row (``SELECT ... FOR UPDATE``), so replicas take a key's budget and
rate-limit tokens one at a time and never overspend; other keys are not blocked. ``lock_timeout`` and
``statement_timeout`` bound every wait (``StoreBusy`` -> 503); a broken connection is reopened on the next call.
"""

from __future__ import annotations

import threading
from urllib.parse import urlsplit, urlunsplit

from ptmlab.core.errors import PtmlabError
from ptmlab.serve.excerpt import excerpt
from ptmlab.serve.state import Store, StoreBusy

SCHEMA = [
    "CREATE TABLE IF NOT EXISTS keys (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, key_hash TEXT NOT NULL UNIQUE, "
    "created DOUBLE PRECISION NOT NULL, revoked DOUBLE PRECISION, rate DOUBLE PRECISION NOT NULL, "
    "burst DOUBLE PRECISION NOT NULL, daily_budget BIGINT NOT NULL)",
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
            try:
                conn = self.psycopg.connect(self.dsn, autocommit=True, connect_timeout=max(1, round(self.busy_timeout)),
                                            options=f"-c lock_timeout={ms} -c statement_timeout={ms * 2}")
            except self.psycopg.OperationalError as e:
                why = str(e).strip().splitlines()[-1][:200] if str(e).strip() else type(e).__name__
                raise StoreBusy(f"the PostgreSQL state at {self.where} is unreachable ({why}): retry in a moment") \
                    from None
            self.local.conn = conn
            with self.conns_lock:
                self.conns.append(conn)
        return conn

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
            self.local.conn = None
            return StoreBusy(f"the PostgreSQL state at {self.where} is unreachable ({type(e).__name__}): retry in a "
                             f"moment")
        return None

    def close(self) -> None:
        with self.conns_lock:
            for c in self.conns:
                c.close()
            self.conns.clear()
        self.local = threading.local()
