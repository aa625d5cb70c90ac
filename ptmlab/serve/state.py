"""Server state behind one interface: keys, daily budgets, per-text rate limits, the audit log, watermark records.

Two back-ends share every statement: SQLite, the embedded default (``$PTMLAB_HOME/state.db``, or ``--state DIR``),
and PostgreSQL (``--state postgresql://...`` or ``PTMLAB_STATE``) for several replicas that must share one key's
budget and rate. Accounting is two-phase so that no work is done for a request that may not be paid for:

* ``admit`` takes the request's texts from the key's token bucket and holds as many texts of its daily budget, in
  one transaction, before any tokenization or forward pass;
* ``settle`` turns the hold into usage and writes the audit rows (and watermark records) in one transaction that
  commits before the answer is sent; ``release`` drops a hold when the server, not the client, failed.

A hold of a killed server expires, so nothing is charged for answers that were never sent. Keys are stored as
SHA-256 hashes only, queries as SHA-256 hashes only (marked ones included). Every call may block (another writer,
the network), so the app runs them in threads; a store that stays locked past ``busy_timeout`` raises
``StoreBusy``, which the app answers with 503 and ``Retry-After``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.errors import PtmlabError

KEY_PREFIX = "ptm_"
SCOPES = ("predict", "admin")  # predict: POST /v1/predict; admin: GET /metrics (every key's counts)
DEFAULT_SCOPES = ("predict",)


class StoreBusy(PtmlabError):
    """The state store is locked or unreachable for longer than its busy timeout: the server answers 503 with
    Retry-After; the CLI prints the one line of any ``PtmlabError`` (exit 2) saying to retry."""


def state_home() -> Path:
    """``$PTMLAB_HOME`` or ``~/.ptmlab``."""
    return Path(os.environ.get("PTMLAB_HOME") or Path.home() / ".ptmlab").expanduser()


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def text_hash(text: str, pair: str | None = None, task: str | None = None) -> str:
    """SHA-256 of a query as sent; ``task``: the head of a multi-task server that answered it (None on a
    single-task server), so one text asked of two heads keeps two records."""
    h = hashlib.sha256(text.encode("utf-8", "surrogatepass"))
    if pair is not None:
        h.update(b"\x00" + pair.encode("utf-8", "surrogatepass"))
    if task is not None:
        h.update(b"\x01" + task.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def today() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")


@dataclass(frozen=True)
class KeyInfo:
    id: int
    name: str
    created: float
    revoked: float | None
    rate: float  # texts per second refilled into the key's bucket
    burst: float  # texts the bucket holds
    daily_budget: int  # texts per UTC day
    scopes: tuple[str, ...] = DEFAULT_SCOPES  # what the key may do (SCOPES)


@dataclass(frozen=True)
class AuditRow:
    text_hash: str
    length: int
    score: float | None = None


@dataclass(frozen=True)
class WatermarkRow:
    kind: str  # "mark": answered with a wrong label; "control": answered truthfully (the null rate)
    query_hash: str  # text_hash of the query as sent; the text itself is never stored
    true_label: int
    given_label: int


@dataclass(frozen=True)
class DetectorPolicy:
    """What the query detector does to a key whose recent queries score above ``threshold`` on average."""

    action: str = "record"  # record | throttle | block
    threshold: float = 0.5
    min_scored: int = 20  # scored queries before a key can be flagged
    window: int = 200  # the key's score is an exponential moving average over about this many queries
    throttle: float = 10.0  # throttle: the key's rate is divided by this


@dataclass(frozen=True)
class Admission:
    ok: bool
    hold: int | None = None
    reason: str | None = None  # "rate", "budget" or "blocked" when refused
    retry_after: float = 0.0
    flagged: bool = False


MAX_RATE = 1e9  # texts per second, and texts a bucket holds
MIN_RATE = 1e-6  # texts per second: one text every 11.6 days refills; slower is a typo (and overflows a wait)
MAX_BUDGET = 10**15  # texts per day (SQLite and PostgreSQL integers hold 2**63)
MAX_NAME = 64


def check_limits(rate: float, burst: float, daily_budget: int) -> None:
    if not (math.isfinite(rate) and math.isfinite(burst)) or rate <= 0 or burst < 1 or daily_budget < 1:
        raise PtmlabError(f"limits must be finite and positive (rate {rate:.6g}, burst {burst:.6g}, daily budget "
                          f"{daily_budget:.6g}): pass --rate > 0, --burst >= 1, --daily-budget >= 1")
    if rate < MIN_RATE:
        raise PtmlabError(f"--rate {rate:.6g} is below {MIN_RATE:g} texts per second: pass a larger rate (revoke a "
                          f"key instead of starving it)")
    if rate > MAX_RATE or burst > MAX_RATE or daily_budget > MAX_BUDGET:
        raise PtmlabError(f"limits too large (rate {rate:.6g}, burst {burst:.6g}, daily budget {daily_budget:.6g}): "
                          f"pass --rate and --burst <= {MAX_RATE:g}, --daily-budget <= {MAX_BUDGET:g}")


def check_scopes(scopes) -> tuple[str, ...]:
    """Scopes as stored: known, each once, in ``SCOPES`` order; a comma-separated string or a sequence."""
    from ptmlab.serve.excerpt import excerpt

    given = [x.strip() for x in (scopes.split(",") if isinstance(scopes, str) else scopes) if x.strip()]
    bad = [x for x in given if x not in SCOPES]
    if bad or not given:
        raise PtmlabError(f"unknown or no key scope '{excerpt(','.join(bad))}': pass --scopes with one or more of "
                          f"{', '.join(SCOPES)} (e.g. --scopes predict,admin)")
    return tuple(x for x in SCOPES if x in given)


def check_name(name: str) -> str:
    """A key name as stored: stripped, printable (no escape sequences or line breaks), at most ``MAX_NAME`` long."""
    from ptmlab.serve.excerpt import excerpt

    name = (name or "").strip()
    if not name:
        raise PtmlabError("key name is empty: pass --name NAME")
    if not name.isprintable() or any(0xD800 <= ord(c) <= 0xDFFF for c in name) or len(name) > MAX_NAME:
        raise PtmlabError(f"key name '{excerpt(name)}' must be at most {MAX_NAME} printable characters (no control "
                          f"codes or line breaks): pass another --name")
    return name


def printable_name(name: str) -> str:
    """A stored key name as it may be printed (names stored before names were checked are escaped)."""
    from ptmlab.serve.excerpt import excerpt

    return excerpt(name, MAX_NAME)


class Store:
    """The state interface; SQL common to both back-ends (written with ``?`` placeholders)."""

    where: str  # printable location (no password)
    busy_timeout: float

    # -- back-end hooks -------------------------------------------------------------------------------------------
    def _conn(self):
        raise NotImplementedError

    def _sql(self, sql: str) -> str:
        return sql

    def _begin(self, cur) -> None:
        raise NotImplementedError

    def _lock_key(self, cur, key_id: int) -> None:
        """Serialise writers of one key (SQLite: BEGIN IMMEDIATE already serialises every writer)."""

    def _translate(self, e: Exception) -> Exception | None:
        """StoreBusy for lock/timeout/connection errors of the back-end, None for others."""
        raise NotImplementedError

    def _insert_id(self, cur, sql: str, params: tuple) -> int:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # -- plumbing ---------------------------------------------------------------------------------------------------
    def _read(self, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            cur = self._conn().cursor()
            return list(cur.execute(self._sql(sql), params).fetchall())
        except Exception as e:
            raise self._translate(e) or e from None

    def _write(self, fn):
        """Run ``fn(cursor)`` in one transaction; commit unless it returns with ``cur.rollback_wanted`` set."""
        conn = self._conn()
        cur = conn.cursor()
        try:
            self._begin(cur)
            try:
                out = fn(cur)
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")
            return out
        except Exception as e:
            raise self._translate(e) or e from None

    def _x(self, cur, sql: str, params: tuple = ()):
        return cur.execute(self._sql(sql), params)

    # -- keys -------------------------------------------------------------------------------------------------------
    def create_key(self, name: str, rate: float = 50.0, burst: float = 100.0, daily_budget: int = 100_000,
                   scopes=DEFAULT_SCOPES) -> str:
        """A new key (returned once, never stored in clear); ``scopes``: what it may do (``SCOPES``)."""
        name = check_name(name)
        check_limits(rate, burst, daily_budget)
        scopes = check_scopes(scopes)
        self._refuse_lookalike(name)
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        self._write(lambda cur: self._x(cur, "INSERT INTO keys (name, key_hash, created, rate, burst, daily_budget, "
                                             "scopes) VALUES (?, ?, ?, ?, ?, ?, ?)",
                                        (name, hash_key(key), time.time(), rate, burst, daily_budget,
                                         ",".join(scopes))))
        return key

    def _refuse_lookalike(self, name: str) -> None:
        """A name that looks like another key's but is spelt otherwise (Cyrillic "а" for Latin "a", a full-width
        letter, a zero-width space) would be mistaken for it in every listing and log: refused."""
        from ptmlab.serve.confusables import skeleton

        seen = skeleton(name)
        for k in self.list_keys():
            if k.name != name and skeleton(k.name) == seen:
                raise PtmlabError(f"key name '{printable_name(name)}' looks like the name of key {k.id} "
                                  f"('{printable_name(k.name)}') but is spelt with other characters: pass a name "
                                  f"that reads differently")

    _KEY_COLS = "id, name, created, revoked, rate, burst, daily_budget, scopes"

    @staticmethod
    def _key_info(row) -> KeyInfo:
        return KeyInfo(*row[:-1], scopes=tuple(x for x in str(row[-1] or "").split(",") if x in SCOPES))

    def list_keys(self) -> list[KeyInfo]:
        return [self._key_info(r) for r in self._read(f"SELECT {self._KEY_COLS} FROM keys ORDER BY id")]

    def find_key(self, key: str) -> KeyInfo | None:
        """The key's record if it exists and is not revoked (a read: never waits for the write lock)."""
        rows = self._read(f"SELECT {self._KEY_COLS} FROM keys WHERE key_hash = ?", (hash_key(key),))
        if not rows or rows[0][3] is not None:
            return None
        return self._key_info(rows[0])

    def resolve_key(self, ref: str) -> KeyInfo:
        """A key by id or name (for the CLI)."""
        keys = self.list_keys()
        hits = [k for k in keys if str(k.id) == ref or k.name == ref]
        if not hits:
            from ptmlab.serve.excerpt import excerpt

            names = ", ".join(f"{k.id}:{printable_name(k.name)}" for k in keys[:20]) or "none exist"
            more = ", ..." if len(keys) > 20 else ""
            raise PtmlabError(f"no key with id or name '{excerpt(ref)}' (keys: {names}{more}): see `ptmlab keys list`")
        if len(hits) > 1:
            raise PtmlabError(f"several keys are named '{printable_name(ref)}': pass the key id instead (see "
                              f"`ptmlab keys list`)")
        return hits[0]

    def revoke(self, key_id: int) -> None:
        self._write(lambda cur: self._x(cur, "UPDATE keys SET revoked = ? WHERE id = ? AND revoked IS NULL",
                                        (time.time(), key_id)))

    def ping(self) -> None:
        """One round trip to the store (``/healthz``): ``StoreBusy`` (or the back-end's error) when it fails."""
        self._read("SELECT 1")

    # -- admission and accounting -----------------------------------------------------------------------------------
    def admit(self, key_id: int, n: int, hold_seconds: float, policy: DetectorPolicy | None = None) -> Admission:
        """Take ``n`` texts from the key's bucket and hold ``n`` texts of its daily budget, atomically."""

        def tx(cur) -> Admission:
            now, day = time.time(), today()
            self._lock_key(cur, key_id)
            row = self._x(cur, "SELECT rate, burst, daily_budget, revoked FROM keys WHERE id = ?", (key_id,)).fetchone()
            if row is None or row[3] is not None:
                return Admission(False, reason="revoked")
            rate, burst, budget = float(row[0]), float(row[1]), int(row[2])
            flagged = False
            if policy is not None and policy.action != "record":
                s = self._x(cur, "SELECT scored, score FROM key_scores WHERE key_id = ?", (key_id,)).fetchone()
                flagged = bool(s) and s[0] >= policy.min_scored and s[1] > policy.threshold
                if flagged and policy.action == "block":
                    return Admission(False, reason="blocked", flagged=True)
                if flagged:
                    rate /= policy.throttle
            b = self._x(cur, "SELECT tokens, updated FROM buckets WHERE key_id = ?", (key_id,)).fetchone()
            tokens = burst if b is None else min(burst, float(b[0]) + max(0.0, now - float(b[1])) * rate)
            if tokens < n:
                self._put_bucket(cur, key_id, tokens, now)
                return Admission(False, reason="rate", retry_after=(n - tokens) / rate, flagged=flagged)
            self._x(cur, "DELETE FROM holds WHERE key_id = ? AND expires < ?", (key_id, now))
            if self._used_and_held(cur, key_id, day) + n > budget:
                return Admission(False, reason="budget", flagged=flagged)
            self._put_bucket(cur, key_id, tokens - n, now)
            hold = self._insert_id(cur, "INSERT INTO holds (key_id, day, n, expires) VALUES (?, ?, ?, ?)",
                                   (key_id, day, n, now + hold_seconds))
            return Admission(True, hold=hold, flagged=flagged)

        return self._write(tx)

    def _put_bucket(self, cur, key_id: int, tokens: float, now: float) -> None:
        self._x(cur, "INSERT INTO buckets (key_id, tokens, updated) VALUES (?, ?, ?) ON CONFLICT (key_id) DO UPDATE "
                     "SET tokens = excluded.tokens, updated = excluded.updated", (key_id, tokens, now))

    def _used_and_held(self, cur, key_id: int, day: str) -> int:
        used = self._x(cur, "SELECT queries FROM usage WHERE key_id = ? AND day = ?", (key_id, day)).fetchone()
        held = self._x(cur, "SELECT COALESCE(SUM(n), 0) FROM holds WHERE key_id = ? AND day = ?",
                       (key_id, day)).fetchone()
        return (int(used[0]) if used else 0) + int(held[0])

    def settle(self, key_id: int, hold: int | None, rows: list[AuditRow], marks: list[WatermarkRow] = (),
               outcome: str = "ok", policy: DetectorPolicy | None = None) -> bool:
        """Charge ``len(rows)`` texts and log them (hold -> usage), in one committed transaction.

        False when the hold had expired and the budget no longer has room (nothing is then charged)."""
        window = (policy or DetectorPolicy()).window

        def tx(cur) -> bool:
            now, day = time.time(), today()
            self._lock_key(cur, key_id)
            held = None
            if hold is not None:
                held = self._x(cur, "SELECT n FROM holds WHERE id = ?", (hold,)).fetchone()
                self._x(cur, "DELETE FROM holds WHERE id = ?", (hold,))
            if held is None:  # expired (or never taken): charge only if the budget still has room
                budget = self._x(cur, "SELECT daily_budget FROM keys WHERE id = ?", (key_id,)).fetchone()
                if budget is None or self._used_and_held(cur, key_id, day) + len(rows) > int(budget[0]):
                    return False
            self._x(cur, "INSERT INTO usage (key_id, day, queries, requests) VALUES (?, ?, ?, 1) "
                         "ON CONFLICT (key_id, day) DO UPDATE SET queries = usage.queries + excluded.queries, "
                         "requests = usage.requests + 1", (key_id, day, len(rows)))
            for r in rows:
                self._x(cur, "INSERT INTO audit (key_id, ts, text_hash, length, score, outcome) "
                             "VALUES (?, ?, ?, ?, ?, ?)", (key_id, now, r.text_hash, r.length, r.score, outcome))
            for m in marks:
                self._x(cur, "INSERT INTO marks (key_id, kind, query_hash, true_label, given_label) "
                             "VALUES (?, ?, ?, ?, ?)", (key_id, m.kind, m.query_hash, m.true_label, m.given_label))
            scores = [r.score for r in rows if r.score is not None]
            if scores:
                s = self._x(cur, "SELECT scored, score FROM key_scores WHERE key_id = ?", (key_id,)).fetchone()
                scored, ewma = (int(s[0]), float(s[1])) if s else (0, 0.0)
                for v in scores:
                    scored += 1
                    ewma += (v - ewma) / min(scored, window)
                self._x(cur, "INSERT INTO key_scores (key_id, scored, score) VALUES (?, ?, ?) ON CONFLICT (key_id) "
                             "DO UPDATE SET scored = excluded.scored, score = excluded.score", (key_id, scored, ewma))
            return True

        return self._write(tx)

    def release(self, hold: int | None) -> None:
        """Drop a hold without charging (the server failed or timed out, not the client)."""
        if hold is not None:
            self._write(lambda cur: self._x(cur, "DELETE FROM holds WHERE id = ?", (hold,)))

    # -- reports ----------------------------------------------------------------------------------------------------
    def used_today(self, key_id: int) -> int:
        rows = self._read("SELECT queries FROM usage WHERE key_id = ? AND day = ?", (key_id, today()))
        return int(rows[0][0]) if rows else 0

    def usage(self, key_id: int | None = None) -> dict[int, dict]:
        """Per key: queries and requests over all days, and audit rows."""
        q = self._read("SELECT key_id, SUM(queries), SUM(requests) FROM usage GROUP BY key_id")
        a = self._read("SELECT key_id, COUNT(*) FROM audit GROUP BY key_id")
        out = {int(k): {"queries": int(n), "requests": int(r), "audit_rows": 0} for k, n, r in q}
        for k, n in a:
            out.setdefault(int(k), {"queries": 0, "requests": 0, "audit_rows": 0})["audit_rows"] = int(n)
        return {k: v for k, v in out.items() if key_id is None or k == key_id}

    def audit_scores(self, key_id: int, last: int | None = None) -> list[float]:
        """Detector scores of a key's logged queries, newest last (``last``: only the newest N)."""
        sql = "SELECT score FROM audit WHERE key_id = ? AND score IS NOT NULL ORDER BY id DESC"
        params: tuple = (key_id,)
        if last:
            sql += " LIMIT ?"
            params = (key_id, last)
        return [float(r[0]) for r in reversed(self._read(sql, params))]

    def audit_outcomes(self, key_id: int) -> dict[str, int]:
        return {str(o): int(n) for o, n in self._read("SELECT outcome, COUNT(*) FROM audit WHERE key_id = ? "
                                                      "GROUP BY outcome", (key_id,))}

    def key_score(self, key_id: int) -> tuple[int, float]:
        """(scored queries, moving-average detector score) of a key."""
        rows = self._read("SELECT scored, score FROM key_scores WHERE key_id = ?", (key_id,))
        return (int(rows[0][0]), float(rows[0][1])) if rows else (0, 0.0)

    def watermarks(self, key_id: int | None = None) -> list[WatermarkRow]:
        sql = "SELECT kind, query_hash, true_label, given_label FROM marks"
        params: tuple = ()
        if key_id is not None:
            sql += " WHERE key_id = ?"
            params = (key_id,)
        return [WatermarkRow(*r) for r in self._read(sql + " ORDER BY id", params)]

    # -- secrets ----------------------------------------------------------------------------------------------------
    def secret(self, name: str) -> bytes:
        """A persistent random secret (created on first use, the same for every replica)."""

        def tx(cur):
            self._x(cur, "INSERT INTO secrets (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                    (name, secrets.token_hex(32)))
            return self._x(cur, "SELECT value FROM secrets WHERE name = ?", (name,)).fetchone()[0]

        return bytes.fromhex(self._write(tx))



def open_store(spec: str | None = None, busy_timeout: float = 2.0) -> Store:
    """The store named by ``spec`` (``--state``), else ``$PTMLAB_STATE``, else SQLite under ``$PTMLAB_HOME``.

    ``postgresql://...`` (or ``postgres://``) opens PostgreSQL; anything else is a directory for ``state.db``.
    """
    spec = spec or os.environ.get("PTMLAB_STATE") or ""
    if not math.isfinite(busy_timeout) or busy_timeout <= 0:
        raise PtmlabError(f"--state-timeout must be a positive number of seconds, got {busy_timeout}")
    if spec.startswith(("postgresql://", "postgres://")):
        from ptmlab.serve.state_postgres import PostgresStore

        return PostgresStore(spec, busy_timeout)
    from ptmlab.serve.state_sqlite import SqliteStore

    return SqliteStore(spec or None, busy_timeout)
