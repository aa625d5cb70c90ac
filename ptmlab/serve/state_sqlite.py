"""The embedded state store: one SQLite file (WAL) under ``$PTMLAB_HOME`` or ``--state DIR``, readable by its owner
only (the file holds key hashes, usage and the watermark secret). A state folder that other users can write to is
refused (they could swap the files), and the state files are opened without following symlinks: a ``state.db``
that links elsewhere is refused, never read or chmod-ed through.

Each thread has its own connection, so reads (key look-ups, usage) never wait for a writer; writers wait at most
``busy_timeout`` seconds for the write lock and then raise ``StoreBusy``.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.serve.state import Store, StoreBusy, state_home, text_hash

SCHEMA = """
CREATE TABLE IF NOT EXISTS keys (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, key_hash TEXT NOT NULL UNIQUE, created REAL NOT NULL,
    revoked REAL, rate REAL NOT NULL, burst REAL NOT NULL, daily_budget INTEGER NOT NULL,
    scopes TEXT NOT NULL DEFAULT 'predict');
CREATE TABLE IF NOT EXISTS usage (
    key_id INTEGER NOT NULL, day TEXT NOT NULL, queries INTEGER NOT NULL, requests INTEGER NOT NULL,
    PRIMARY KEY (key_id, day));
CREATE TABLE IF NOT EXISTS holds (
    id INTEGER PRIMARY KEY, key_id INTEGER NOT NULL, day TEXT NOT NULL, n INTEGER NOT NULL, expires REAL NOT NULL);
CREATE INDEX IF NOT EXISTS holds_key ON holds (key_id);
CREATE TABLE IF NOT EXISTS buckets (key_id INTEGER PRIMARY KEY, tokens REAL NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY, key_id INTEGER NOT NULL, ts REAL NOT NULL, text_hash TEXT NOT NULL,
    length INTEGER NOT NULL, score REAL, outcome TEXT NOT NULL DEFAULT 'ok');
CREATE INDEX IF NOT EXISTS audit_key ON audit (key_id);
CREATE TABLE IF NOT EXISTS key_scores (key_id INTEGER PRIMARY KEY, scored INTEGER NOT NULL, score REAL NOT NULL);
CREATE TABLE IF NOT EXISTS marks (
    id INTEGER PRIMARY KEY, key_id INTEGER NOT NULL, kind TEXT NOT NULL, query_hash TEXT NOT NULL,
    true_label INTEGER NOT NULL, given_label INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS secrets (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class SqliteStore(Store):
    def __init__(self, home: str | Path | None = None, busy_timeout: float = 2.0):
        self.home = Path(home).expanduser() if home else state_home()
        self.path = self.home / "state.db"
        self.where = f"sqlite:{self.path}"
        self.busy_timeout = busy_timeout
        self.local = threading.local()
        self.conns: list[sqlite3.Connection] = []
        self.conns_lock = threading.Lock()
        try:
            self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._check_files()
            db = self._conn()
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)
            self._migrate(db)
        except (OSError, sqlite3.Error, ValueError) as e:
            raise PtmlabError(f"cannot open the state database under '{self.home}' ({e}): pass --state DIR (or set "
                              f"PTMLAB_HOME) to a writable directory") from None

    def _check_files(self) -> None:
        """Refuse a folder others can write to and state files that are links; make the files owner-only."""
        home = os.stat(self.home)
        if home.st_mode & 0o022 or home.st_uid != os.geteuid():
            raise PtmlabError(f"the state folder '{self.home}' can be written by other users (mode "
                              f"{stat.S_IMODE(home.st_mode):o}, owner uid {home.st_uid}): pass --state DIR (or "
                              f"PTMLAB_HOME) to a folder only you can write, e.g. after chmod 700")
        for p in (self.path, self.path.with_name("state.db-wal"), self.path.with_name("state.db-shm")):
            flags = os.O_RDWR | os.O_NOFOLLOW | (os.O_CREAT if p == self.path else 0)
            try:
                fd = os.open(p, flags, 0o600)
            except FileNotFoundError:
                continue
            except OSError:
                if os.path.islink(p):
                    raise PtmlabError(f"the state file '{p}' is a symbolic link: the state is never opened through a "
                                      f"link; remove it or pass another --state DIR") from None
                raise
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise PtmlabError(f"the state file '{p}' is not a regular file: remove it or pass another "
                                      f"--state DIR")
                os.fchmod(fd, 0o600)  # older state files were created world-readable
            finally:
                os.close(fd)

    def _conn(self) -> sqlite3.Connection:
        db = getattr(self.local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                                 timeout=self.busy_timeout)
            db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a committed row survives a killed process
            db.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
            self.local.db = db
            with self.conns_lock:
                self.conns.append(db)
        return db

    def _begin(self, cur) -> None:
        cur.execute("BEGIN IMMEDIATE")

    def _insert_id(self, cur, sql: str, params: tuple) -> int:
        return int(cur.execute(sql, params).lastrowid)

    def _translate(self, e: Exception) -> Exception | None:
        if isinstance(e, sqlite3.OperationalError) and ("locked" in str(e) or "busy" in str(e)):
            return StoreBusy(f"the state database {self.path} is locked by another writer: retry in a moment")
        return None

    def _migrate(self, db: sqlite3.Connection) -> None:
        """Older databases: add the audit outcome and key scopes; replace plaintext watermark records by hashes."""
        cols = {r[1] for r in db.execute("PRAGMA table_info(audit)")}
        if "outcome" not in cols:
            db.execute("ALTER TABLE audit ADD COLUMN outcome TEXT NOT NULL DEFAULT 'ok'")
        if "scopes" not in {r[1] for r in db.execute("PRAGMA table_info(keys)")}:
            db.execute("ALTER TABLE keys ADD COLUMN scopes TEXT NOT NULL DEFAULT 'predict'")
        if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'watermark'").fetchone():
            db.execute("BEGIN IMMEDIATE")
            rows = db.execute("SELECT key_id, kind, text, text_pair, true_label, given_label FROM watermark "
                              "ORDER BY id").fetchall()
            db.executemany("INSERT INTO marks (key_id, kind, query_hash, true_label, given_label) "
                           "VALUES (?, ?, ?, ?, ?)",
                           [(k, kind, text_hash(t, p), tl, gl) for k, kind, t, p, tl, gl in rows])
            db.execute("DROP TABLE watermark")
            db.execute("COMMIT")
            db.execute("VACUUM")  # the dropped plaintext must not linger in free pages

    def close(self) -> None:
        with self.conns_lock:
            for db in self.conns:
                db.close()
            self.conns.clear()
        self.local = threading.local()
