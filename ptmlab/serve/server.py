"""Run the app on uvicorn, in the foreground (``ptmlab serve``) or in a background thread (studies, tests).

uvicorn's own settings bound what they can: ``limit_concurrency`` (a request beyond it is answered 503),
``timeout_keep_alive`` (an idle connection between requests is closed) and ``h11_max_incomplete_event_size``. What
uvicorn's httptools protocol leaves open, ``LimitedHttpToolsProtocol`` closes, per connection:

* the request head (request line and headers) is counted as it arrives: past ``--max-header-bytes`` the client gets
  431 and the connection is closed, so a header that never ends holds at most that much (plus one socket read);
* a request must arrive whole (head and body) within ``--read-timeout`` of its first byte, else 408 and the
  connection is closed (slow-loris heads and bodies, and the unread rest of a body refused early with 401/413);
* of a body answered before it was read (401, 413) at most ``DISCARD_BYTES`` are read and dropped; then the server
  stops reading, sends FIN and closes ``LINGER_SECONDS`` later (Go's net/http does the same);
* a connection with no request in progress, a new one included, is closed after ``--keep-alive-timeout``, however
  many stray bytes (blank lines) it sends that start no request;
* one connection past ``--max-connections`` is answered 503 and closed at once, so open sockets stay bounded.
"""

from __future__ import annotations

import contextlib
import resource
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from ptmlab.core.errors import PtmlabError


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class ConnectionLimits:
    max_header_bytes: int = 32_768
    read_timeout: float = 20.0
    keep_alive_timeout: float = 5.0
    max_connections: int = 512
    limit_concurrency: int = 256

    @classmethod
    def of(cls, cfg) -> ConnectionLimits:
        return cls(cfg.max_header_bytes, cfg.read_timeout, cfg.keep_alive_timeout, cfg.max_connections,
                   cfg.limit_concurrency)


def _raw_response(status: int, reason: str, message: str, retry_after: bool = False) -> bytes:
    body = ('{"error": "' + message + '"}').encode("ascii")
    head = [f"HTTP/1.1 {status} {reason}", "content-type: application/json", f"content-length: {len(body)}",
            "connection: close"] + (["retry-after: 1"] if retry_after else [])
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body


DISCARD_BYTES = 256 * 1024  # body bytes read and dropped after an early answer before the connection is closed
LINGER_SECONDS = 0.5  # between the FIN after an early answer and the close, so the client reads the answer first


class HeadTooLarge(Exception):
    """Raised from the parser's callback to stop parsing a request whose head is over the limit."""


def protocol_class(limits: ConnectionLimits) -> type:
    """uvicorn's httptools protocol with the head limit, the read deadline, the idle deadline and the connection
    cap of ``limits`` (a class per server: uvicorn builds one protocol object per connection)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    too_many = _raw_response(503, "Service Unavailable", "too many open connections: retry after the Retry-After "
                                                         "seconds", retry_after=True)
    too_large = _raw_response(431, "Request Header Fields Too Large",
                              f"the request head exceeds {limits.max_header_bytes} bytes: send fewer or shorter "
                              f"headers")
    too_slow = _raw_response(408, "Request Timeout", f"the request did not arrive within {limits.read_timeout:g}s: "
                                                     f"send it at once")

    class LimitedHttpToolsProtocol(HttpToolsProtocol):
        def connection_made(self, transport) -> None:
            self._timer = None
            self._in_head = False  # between a request's first byte and the end of its headers
            self._reading = False  # between a request's first byte and the end of its body
            self._head_bytes = 0  # bytes of the reads made while in the head (the head so far, at least)
            self._head_parsed = 0  # bytes of the request line's target and the headers the parser has handed over
            self._completed = 0  # requests read whole, on this connection
            self._discarded = 0  # body bytes dropped after an early answer
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                self._refuse(too_many)
                return
            self._arm(limits.keep_alive_timeout, self._idle_expired)

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.transport.is_closing():
                return
            completed = self._completed
            super().data_received(data)
            # a chunk that ended a request may begin the next one: its head is counted from the next chunk on
            if self._in_head and self._completed == completed:
                self._head_bytes += len(data)
                if self._head_bytes > limits.max_header_bytes and not self.transport.is_closing():
                    self._refuse(too_large)

        # -- parser callbacks ----------------------------------------------------------------------------------------
        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_head, self._reading, self._head_bytes, self._head_parsed = True, True, 0, 0
            self._arm(limits.read_timeout, self._read_expired)

        def on_url(self, url: bytes) -> None:
            self._head_parsed += len(url)
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._head_parsed += len(name) + len(value) + 4
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            if self._head_parsed > limits.max_header_bytes:  # a head that arrived whole in one read
                self._refuse(too_large)
                raise HeadTooLarge  # stops the parser: this request never reaches the app
            self._in_head = False
            super().on_headers_complete()

        def send_400_response(self, msg: str) -> None:
            if not self.transport.is_closing():  # closing: already answered (431) by this class
                super().send_400_response(msg)

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._reading = False
            self._completed += 1
            if self._idle():
                self._arm(limits.keep_alive_timeout, self._idle_expired)
            else:  # the answer is being computed: the app's own timeouts apply
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._discarded = 0
            if self._idle() and not self.transport.is_closing():
                self._arm(limits.keep_alive_timeout, self._idle_expired)

        def on_body(self, body: bytes) -> None:
            cycle = self.cycle
            if cycle is not None and cycle.response_complete and self._reading:
                # answered before its body was read (401, 413): drop what follows, and past DISCARD_BYTES stop
                # reading and close, as Go's net/http does, so a large body costs the server no more than that
                self._discarded += len(body)
                if self._discarded > DISCARD_BYTES:
                    self._linger_close()
                return
            super().on_body(body)

        def _linger_close(self) -> None:
            """End a connection whose client is still sending: FIN now, close (dropping what it sent) a moment
            later, so that it reads the answer before its unread bytes turn the close into a reset."""
            self._disarm()
            self._reading = self._in_head = False
            self.transport.pause_reading()
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(LINGER_SECONDS, self.transport.close)

        # -- deadlines -----------------------------------------------------------------------------------------------
        def _idle(self) -> bool:
            return not self._reading and not self.pipeline and (self.cycle is None or self.cycle.response_complete)

        def _arm(self, delay: float, callback) -> None:
            self._disarm()
            self._timer = self.loop.call_later(delay, callback)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _idle_expired(self) -> None:
            self._timer = None
            if self._idle() and not self.transport.is_closing():
                self.transport.close()

        def _read_expired(self) -> None:
            self._timer = None
            if not self._reading or self.transport.is_closing():
                return
            if self.flow.read_paused and not self._in_head:  # the app has not read the body yet: not the client's fault
                self._arm(limits.read_timeout, self._read_expired)
                return
            self._refuse(too_slow)

        def _refuse(self, response: bytes) -> None:
            """Answer ``response`` unless this request was answered or another answer is under way on this
            connection (pipelining), then close it."""
            cycle = self.cycle  # in the head: the previous request's (the current one has none yet)
            if self._in_head or not self._reading:
                free = cycle is None or cycle.response_complete
            else:  # in the body: the current request's
                free = not cycle.response_started
            if free and not self.pipeline:
                self.transport.write(response)
            if cycle is not None and not cycle.response_complete:
                self.cycle.disconnected = True  # the app's receive() returns http.disconnect, its send() nothing
                self.cycle.message_event.set()
            self._disarm()
            self._reading = self._in_head = False
            self.transport.close()

    return LimitedHttpToolsProtocol


def _raise_open_files(limits: ConnectionLimits) -> None:
    """Make room for ``--max-connections`` sockets under the process's open-file limit (or say how)."""
    need = limits.max_connections + 256  # the model, the state store, the listening socket, libraries
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise PtmlabError(f"--max-connections {limits.max_connections} needs {need} open files, over this "
                              f"process's limit of {hard}: lower --max-connections or raise `ulimit -n`")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def _server(app, host: str, port: int, limits: ConnectionLimits | None = None):
    import uvicorn

    if limits is None:
        cfg = getattr(getattr(app, "state", None), "config", None)
        limits = ConnectionLimits.of(cfg) if cfg is not None else ConnectionLimits()
    _raise_open_files(limits)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            loop="asyncio",  # uvloop answered 10x slower here: futures set from the batcher thread
                            http=protocol_class(limits), timeout_graceful_shutdown=5,
                            limit_concurrency=limits.limit_concurrency, timeout_keep_alive=limits.keep_alive_timeout,
                            h11_max_incomplete_event_size=limits.max_header_bytes)
    return uvicorn.Server(config)


def serve_forever(app, host: str, port: int, limits: ConnectionLimits | None = None) -> None:
    server = _server(app, host, port, limits)
    try:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as e:
        raise PtmlabError(f"cannot listen on {host}:{port} ({e.strerror}): choose another --port or --host") from None
    server.run()


@contextlib.contextmanager
def serve_in_thread(app, host: str = "127.0.0.1", port: int | None = None,
                    limits: ConnectionLimits | None = None) -> Iterator[str]:
    """Serve ``app`` in a background thread; yields its base URL and stops it on exit."""
    port = port or free_port(host)
    server = _server(app, host, port, limits)
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
