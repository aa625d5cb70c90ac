"""Run the app on uvicorn, in the foreground (``ptmlab serve``) or in a background thread (studies, tests)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

from ptmlab.core.errors import PtmlabError


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _server(app, host: str, port: int):
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            loop="asyncio",  # uvloop answered 10x slower here: futures set from the batcher thread
                            timeout_graceful_shutdown=5)
    return uvicorn.Server(config)


def serve_forever(app, host: str, port: int) -> None:
    server = _server(app, host, port)
    try:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as e:
        raise PtmlabError(f"cannot listen on {host}:{port} ({e.strerror}): choose another --port or --host") from None
    server.run()


@contextlib.contextmanager
def serve_in_thread(app, host: str = "127.0.0.1", port: int | None = None) -> Iterator[str]:
    """Serve ``app`` in a background thread; yields its base URL and stops it on exit."""
    port = port or free_port(host)
    server = _server(app, host, port)
    thread = threading.Thread(target=server.run, name="ptmlab-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise PtmlabError(f"the server did not start on {host}:{port}: choose another port")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
