"""Keys, daily budgets, the audit log and watermark records, persisted in SQLite under ``$PTMLAB_HOME``.

Keys are stored as SHA-256 hashes only (a key is 32 random bytes, so a plain hash cannot be reversed). Every
answered query is charged and logged in one transaction that commits before the answer is sent, so a killed
server never loses the accounting of an answer a client received.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.errors import PtmlabError

KEY_PREFIX = "ptm_"

SCHEMA = """
CREATE TABLE IF NOT EXISTS keys (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, key_hash TEXT NOT NULL UNIQUE, created REAL NOT NULL,
    revoked REAL, rate REAL NOT NULL, burst REAL NOT NULL, daily_budget INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS usage (
    key_id INTEGER NOT NULL, day TEXT NOT NULL, queries INTEGER NOT NULL, requests INTEGER NOT NULL,
    PRIMARY KEY (key_id, day));
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY, key_id INTEGER NOT NULL, ts REAL NOT NULL, text_hash TEXT NOT NULL,
    length INTEGER NOT NULL, score REAL);
CREATE INDEX IF NOT EXISTS audit_key ON audit (key_id);
CREATE TABLE IF NOT EXISTS watermark (
    id INTEGER PRIMARY KEY, key_id INTEGER NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL, text_pair TEXT,
    true_label INTEGER NOT NULL, given_label INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS secrets (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def state_home() -> Path:
    """``$PTMLAB_HOME`` or ``~/.ptmlab``."""
    return Path(os.environ.get("PTMLAB_HOME") or Path.home() / ".ptmlab").expanduser()


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def text_hash(text: str, pair: str | None = None) -> str:
    h = hashlib.sha256(text.encode("utf-8", "surrogatepass"))
    if pair is not None:
        h.update(b"\x00" + pair.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def today() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")


@dataclass(frozen=True)
class KeyInfo:
    id: int
    name: str
    created: float
    revoked: float | None
    rate: float
    burst: float
    daily_budget: int


@dataclass(frozen=True)
class AuditRow:
    text_hash: str
    length: int
    score: float | None = None


@dataclass(frozen=True)
class WatermarkRow:
    kind: str  # "mark": answered with a wrong label; "control": answered truthfully (the null rate)
    text: str
    text_pair: str | None
    true_label: int
    given_label: int


class Store:
    """One SQLite database (WAL mode); safe to share between threads (calls are serialised by a lock)."""

    def __init__(self, home: str | Path | None = None):
        self.home = Path(home) if home else state_home()
        try:
            self.home.mkdir(parents=True, exist_ok=True)
            self.path = self.home / "state.db"
            self.db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a committed row survives a killed process
            self.db.executescript(SCHEMA)
        except (OSError, sqlite3.Error) as e:
            raise PtmlabError(f"cannot open the state database under '{self.home}' ({e}): set PTMLAB_HOME to a "
                              f"writable directory") from None
        self.lock = threading.Lock()

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------------------------------ keys
    def create_key(self, name: str, rate: float = 20.0, burst: float = 40.0, daily_budget: int = 100_000) -> str:
        """A new key (returned once, never stored in clear)."""
        if not name or not name.strip():
            raise PtmlabError("key name is empty: pass --name NAME")
        if rate <= 0 or burst < 1 or daily_budget < 1:
            raise PtmlabError(f"limits must be positive (rate {rate}, burst {burst}, daily budget {daily_budget}): "
                              f"pass --rate > 0, --burst >= 1, --daily-budget >= 1")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        with self.lock:
            self.db.execute("INSERT INTO keys (name, key_hash, created, rate, burst, daily_budget) "
                            "VALUES (?, ?, ?, ?, ?, ?)", (name.strip(), hash_key(key), time.time(), rate, burst,
                                                          daily_budget))
        return key

    def _row_to_key(self, row) -> KeyInfo:
        return KeyInfo(*row)

    def list_keys(self) -> list[KeyInfo]:
        with self.lock:
            rows = self.db.execute("SELECT id, name, created, revoked, rate, burst, daily_budget FROM keys "
                                   "ORDER BY id").fetchall()
        return [self._row_to_key(r) for r in rows]

    def find_key(self, key: str) -> KeyInfo | None:
        """The key's record if it exists and is not revoked."""
        with self.lock:
            row = self.db.execute("SELECT id, name, created, revoked, rate, burst, daily_budget FROM keys "
                                  "WHERE key_hash = ?", (hash_key(key),)).fetchone()
        if row is None or row[3] is not None:
            return None
        return self._row_to_key(row)

    def resolve_key(self, ref: str) -> KeyInfo:
        """A key by id or name (for the CLI)."""
        keys = self.list_keys()
        hits = [k for k in keys if str(k.id) == ref or k.name == ref]
        if not hits:
            names = ", ".join(f"{k.id}:{k.name}" for k in keys) or "none exist"
            raise PtmlabError(f"no key with id or name '{ref}' (keys: {names}): see `ptmlab keys list`")
        if len(hits) > 1:
            raise PtmlabError(f"several keys are named '{ref}': pass the key id instead (see `ptmlab keys list`)")
        return hits[0]

    def revoke(self, key_id: int) -> None:
        with self.lock:
            self.db.execute("UPDATE keys SET revoked = ? WHERE id = ? AND revoked IS NULL", (time.time(), key_id))

    # ------------------------------------------------------------------------------------------ usage
    def used_today(self, key_id: int) -> int:
        with self.lock:
            row = self.db.execute("SELECT queries FROM usage WHERE key_id = ? AND day = ?",
                                  (key_id, today())).fetchone()
        return row[0] if row else 0

    def charge(self, key: KeyInfo, rows: list[AuditRow], marks: list[WatermarkRow] = ()) -> bool:
        """Charge ``len(rows)`` queries and log them, in one committed transaction; False when over budget."""
        now, day = time.time(), today()
        with self.lock:
            cur = self.db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                row = cur.execute("SELECT queries FROM usage WHERE key_id = ? AND day = ?", (key.id, day)).fetchone()
                used = row[0] if row else 0
                if used + len(rows) > key.daily_budget:
                    cur.execute("ROLLBACK")
                    return False
                cur.execute("INSERT INTO usage (key_id, day, queries, requests) VALUES (?, ?, ?, 1) "
                            "ON CONFLICT (key_id, day) DO UPDATE SET queries = queries + excluded.queries, "
                            "requests = requests + 1", (key.id, day, len(rows)))
                cur.executemany("INSERT INTO audit (key_id, ts, text_hash, length, score) VALUES (?, ?, ?, ?, ?)",
                                [(key.id, now, r.text_hash, r.length, r.score) for r in rows])
                cur.executemany("INSERT INTO watermark (key_id, kind, text, text_pair, true_label, given_label) "
                                "VALUES (?, ?, ?, ?, ?, ?)",
                                [(key.id, m.kind, m.text, m.text_pair, m.true_label, m.given_label) for m in marks])
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        return True

    def usage(self, key_id: int | None = None) -> dict[int, dict]:
        """Per key: queries and requests over all days, and audit rows."""
        with self.lock:
            q = self.db.execute("SELECT key_id, SUM(queries), SUM(requests) FROM usage GROUP BY key_id").fetchall()
            a = self.db.execute("SELECT key_id, COUNT(*) FROM audit GROUP BY key_id").fetchall()
        out = {k: {"queries": n, "requests": r, "audit_rows": 0} for k, n, r in q}
        for k, n in a:
            out.setdefault(k, {"queries": 0, "requests": 0, "audit_rows": 0})["audit_rows"] = n
        return {k: v for k, v in out.items() if key_id is None or k == key_id}

    def audit_scores(self, key_id: int, last: int | None = None) -> list[float]:
        """Detector scores of a key's logged queries, newest last (``last``: only the newest N)."""
        sql = "SELECT score FROM audit WHERE key_id = ? AND score IS NOT NULL ORDER BY id DESC"
        params: tuple = (key_id,)
        if last:
            sql += " LIMIT ?"
            params = (key_id, last)
        with self.lock:
            rows = self.db.execute(sql, params).fetchall()
        return [r[0] for r in reversed(rows)]

    def watermarks(self, key_id: int | None = None) -> list[WatermarkRow]:
        sql = "SELECT kind, text, text_pair, true_label, given_label FROM watermark"
        params: tuple = ()
        if key_id is not None:
            sql += " WHERE key_id = ?"
            params = (key_id,)
        with self.lock:
            rows = self.db.execute(sql + " ORDER BY id", params).fetchall()
        return [WatermarkRow(*r) for r in rows]

    # ------------------------------------------------------------------------------------------ secrets
    def secret(self, name: str) -> bytes:
        """A persistent random secret (created on first use), e.g. for choosing watermarked queries."""
        with self.lock:
            row = self.db.execute("SELECT value FROM secrets WHERE name = ?", (name,)).fetchone()
            if row is None:
                value = secrets.token_hex(32)
                self.db.execute("INSERT OR IGNORE INTO secrets (name, value) VALUES (?, ?)", (name, value))
                row = self.db.execute("SELECT value FROM secrets WHERE name = ?", (name,)).fetchone()
        return bytes.fromhex(row[0])
