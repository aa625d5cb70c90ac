"""Helpers (no tests) that start a real PostgreSQL server (Debian's postgresql package) in a temporary data
directory, for the tests of the shared state store. As root the server runs as the unprivileged ``postgres`` user
(PostgreSQL refuses to run as root); the tests skip only when the server binaries are absent."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.test_serve_support import free_port


def pg_bin() -> Path | None:
    """The newest /usr/lib/postgresql/*/bin holding initdb and pg_ctl (or the ones on PATH)."""
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True):
        if os.access(f"{d}/initdb", os.X_OK) and os.access(f"{d}/pg_ctl", os.X_OK):
            return Path(d)
    found = shutil.which("initdb")
    return Path(found).parent if found and shutil.which("pg_ctl") else None


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A fresh server on 127.0.0.1 with trust authentication; yields its URL and removes it afterwards."""
    bindir = pg_bin()
    assert bindir is not None
    folder = Path(tempfile.mkdtemp(prefix="ptmlab-pg-"))
    user = None
    if os.geteuid() == 0:
        import pwd

        user = "postgres"
        os.chown(folder, pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid)
    data, port = folder / "data", free_port()

    def run(*args: str) -> None:
        subprocess.run([str(a) for a in args], check=True, user=user, capture_output=True, timeout=120)

    run(bindir / "initdb", "-D", data, "-U", "ptmlab", "--auth=trust", "-E", "UTF8", "--no-sync")
    run(bindir / "pg_ctl", "-D", data, "-l", folder / "log", "-w", "-t", "60", "-o",
        f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200", "start")
    try:
        yield f"postgresql://ptmlab@127.0.0.1:{port}/postgres"
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            run(bindir / "pg_ctl", "-D", data, "-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)
