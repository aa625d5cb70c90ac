"""Options of ``ptmlab serve`` (a light module: the CLI imports it without loading FastAPI)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ptmlab.core.config import Validated, at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.serve.policy import parse_policy
from ptmlab.train.args import PRECISION_HELP, PRECISIONS

DETECTOR_ACTIONS = ("record", "throttle", "block")
UPPER_BOUNDS = {"max_batch": 4096, "max_wait_ms": 10_000, "max_texts": 10_000, "max_chars": 1_000_000,
                "max_body": 100_000_000, "timeout": 3600, "state_timeout": 600, "max_queue": 1_000_000,
                "detector_min_queries": 1_000_000, "max_length": 1_000_000, "chunk": 4096,
                "max_header_bytes": 1_048_576, "read_timeout": 3600, "keep_alive_timeout": 3600,
                "max_connections": 100_000, "limit_concurrency": 100_000}
MIN_HEADER_BYTES = 1024  # a request line and the usual headers (a key, a content type) fit


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (127.0.0.0/8, ::1 or localhost)."""
    import ipaddress

    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class ServeConfig(Validated):
    OPTION_GROUP = "server"
    FIELD_GROUPS = {**dict.fromkeys(("output_policy", "watermark_rate", "detector", "detector_action",
                                     "detector_threshold", "detector_min_queries", "public_metrics"),
                                    "output policy and defences"),
                    **dict.fromkeys(("max_batch", "max_wait_ms", "max_texts", "max_chars", "max_body", "timeout",
                                     "max_queue", "max_length", "precision", "chunk"), "batching and limits"),
                   **dict.fromkeys(("max_header_bytes", "read_timeout", "keep_alive_timeout", "max_connections",
                                    "limit_concurrency"), "connections")}

    host: str = opt("127.0.0.1", "address to bind (loopback by default; any other address is reachable from other "
                                 "machines and warned about; 0.0.0.0 or :: for every interface)")
    port: int = opt(8000, "port to listen on")
    state: str = opt("", "state store: a directory for SQLite (default $PTMLAB_HOME) or postgresql://USER@HOST:PORT/DB "
                         "shared by several replicas (or set PTMLAB_STATE)")
    state_timeout: float = opt(2.0, "seconds a request waits for a locked state store before 503 + Retry-After")
    output_policy: str = opt("probs", "what clients see: probs, label, or rounded:K")
    max_batch: int = opt(32, "most texts in one forward pass (dynamic batching)")
    max_wait_ms: float = opt(5.0, "longest a request waits for others to join its batch, in milliseconds")
    max_texts: int = opt(64, "most texts in one request")
    max_chars: int = opt(2000, "most characters in one text")
    max_body: int = opt(1_000_000, "largest request body in bytes")
    timeout: float = opt(30.0, "seconds a request may wait for its answer")
    max_queue: int = opt(4096, "most texts waiting for the model before requests are refused with 429")
    watermark_rate: float = opt(0.0, "fraction of queries answered with a wrong label and recorded (0: off)")
    detector: bool = opt(True, "score each query with the extraction-query detector (stored in the audit log)")
    detector_action: str = opt("record", "what the detector does to a key whose queries score above "
                                         "--detector-threshold on average: record, throttle (rate / 10) or block (403)")
    detector_threshold: float = opt(0.5, "moving-average detector score above which a key is flagged")
    detector_min_queries: int = opt(20, "scored queries before a key can be flagged")
    max_length: int = opt(0, "truncate inputs to this many tokens (0: the run's --max-length; at most the model's "
                             "positions)")
    precision: str = opt("auto", f"forward passes in {PRECISION_HELP}", choices=list(PRECISIONS))
    public_metrics: bool = opt(False, "show /metrics and the full /healthz (model path, state, detector, precision) "
                                      "without a key (off: /metrics needs a key with the admin scope, /healthz shows "
                                      "status and labels)")
    trust_pickle: bool = opt(False, "load RUN_DIR's pickle checkpoint (pytorch_model.bin) when it has no safetensors: "
                                    "only for a folder you trust (unpickling can run code)")
    chunk: int = opt(8, "run a batch as length-sorted chunks of this many texts, so short texts are not padded to "
                        "the longest (0: one chunk)")
    max_header_bytes: int = opt(32_768, "largest request head (request line and headers together) in bytes; a "
                                        "larger one is answered 431 and its connection closed")
    read_timeout: float = opt(20.0, "seconds a client has to send a whole request (head and body) from its first "
                                    "byte; a slower one is answered 408 and disconnected")
    keep_alive_timeout: float = opt(5.0, "seconds a connection may stay open with no request in progress (a new one "
                                         "included) before it is closed")
    max_connections: int = opt(512, "most open client connections; one more is answered 503 and closed at once")
    limit_concurrency: int = opt(256, "most connections and requests handled at once (uvicorn's limit_concurrency); a "
                                      "request beyond it is answered 503")

    def validate(self) -> None:
        parse_policy(self.output_policy)
        at_least(self, 1, "max_batch", "max_texts", "max_chars", "max_body", "max_queue", "detector_min_queries",
                 "max_connections", "limit_concurrency")
        at_least(self, MIN_HEADER_BYTES, "max_header_bytes")
        for name in ("max_wait_ms", "timeout", "state_timeout", "watermark_rate", "detector_threshold",
                     "read_timeout", "keep_alive_timeout"):
            if not math.isfinite(getattr(self, name)):
                raise PtmlabError(f"--{name.replace('_', '-')} must be a finite number, got {getattr(self, name)}")
        if self.max_wait_ms < 0 or self.timeout <= 0 or self.state_timeout <= 0:
            raise PtmlabError(f"--max-wait-ms must be >= 0, --timeout and --state-timeout > 0 (got "
                              f"{self.max_wait_ms}, {self.timeout}, {self.state_timeout})")
        if self.read_timeout <= 0 or self.keep_alive_timeout <= 0:
            raise PtmlabError(f"--read-timeout and --keep-alive-timeout must be > 0 (got {self.read_timeout}, "
                              f"{self.keep_alive_timeout})")
        if self.limit_concurrency > self.max_connections:
            raise PtmlabError(f"--limit-concurrency ({self.limit_concurrency}) must be at most --max-connections "
                              f"({self.max_connections}): raise --max-connections or lower --limit-concurrency")
        for name, top in UPPER_BOUNDS.items():  # larger values overflow timers, SQLite integers or memory
            if getattr(self, name) > top:
                raise PtmlabError(f"--{name.replace('_', '-')} must be at most {top:g}, got {getattr(self, name):g}")
        if self.max_wait_ms / 1000 >= self.timeout / 2:  # a lone request waits for company, then must still run
            raise PtmlabError(f"--max-wait-ms {self.max_wait_ms:g} leaves no time within --timeout {self.timeout:g} s "
                              f"for the batch to run: keep --max-wait-ms under half of --timeout "
                              f"({self.timeout * 500:g} ms)")
        if not self.host.strip():
            raise PtmlabError("--host is empty, which would listen on every interface: pass --host 127.0.0.1, or "
                              "--host 0.0.0.0 to listen on every interface on purpose")
        if not 0 <= self.watermark_rate <= 0.5:
            raise PtmlabError(f"--watermark-rate must be in [0, 0.5], got {self.watermark_rate}")
        if self.detector_action not in DETECTOR_ACTIONS:
            raise PtmlabError(f"--detector-action must be one of {', '.join(DETECTOR_ACTIONS)}, got "
                              f"'{self.detector_action}'")
        if not 0 < self.detector_threshold < 1:
            raise PtmlabError(f"--detector-threshold must be in (0, 1), got {self.detector_threshold}")
        if self.precision not in PRECISIONS:
            raise PtmlabError(f"--precision must be one of {', '.join(PRECISIONS)}, got '{self.precision}'")
        if self.chunk < 0 or self.max_length < 0:
            raise PtmlabError(f"--chunk and --max-length must be >= 0, got {self.chunk}, {self.max_length}")
        if not 0 < self.port < 65536:
            raise PtmlabError(f"--port must be in 1..65535, got {self.port}")
