"""A client for a served victim: sends queries in chunks, waits out 429s (Retry-After), keeps what it learns."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ptmlab.core.errors import PtmlabError
from ptmlab.core.progress import progress


@dataclass
class Answers:
    label_names: list[str]
    labels: list[int]
    probs: list[list[float]] | None  # None when the API gives labels only
    policy: str
    waited_seconds: float = 0.0
    rate_limited: int = 0
    extra: dict = field(default_factory=dict)


class VictimClient:
    def __init__(self, url: str, key: str, chunk: int = 32, timeout: float = 60.0, max_wait: float = 3600.0):
        import httpx

        if not url.startswith(("http://", "https://")):
            raise PtmlabError(f"--victim '{url}' is not an http(s) URL: pass e.g. http://127.0.0.1:8000")
        self.url = url.rstrip("/")
        if not self.url.endswith("/v1/predict"):
            self.url += "/v1/predict"
        self.http = httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {key}"})
        self.chunk = chunk
        self.max_wait = max_wait

    def close(self) -> None:
        self.http.close()

    def _post(self, texts: list[str], pairs: list[str] | None, stats: dict) -> dict:
        import httpx

        body: dict = {"texts": texts}
        if pairs is not None:
            body["text_pairs"] = pairs
        for attempt in range(1000):
            try:
                r = self.http.post(self.url, json=body)
            except httpx.HTTPError as e:
                if attempt >= 5:
                    raise PtmlabError(f"victim {self.url} unreachable ({type(e).__name__}): check --victim") from None
                time.sleep(0.5 * 2**attempt)
                continue
            if r.status_code == 200:
                return r.json()
            if r.status_code == 429:
                wait = float(r.headers.get("retry-after", "1"))
                stats["rate_limited"] += 1
                if stats["waited"] + wait > self.max_wait:
                    raise PtmlabError(f"the victim keeps refusing (429: {_msg(r)}); waiting {wait:g}s more would "
                                      f"exceed --max-wait {self.max_wait:g}s: lower --budget or raise --max-wait")
                stats["waited"] += wait
                time.sleep(wait)
                continue
            if r.status_code == 401:
                raise PtmlabError(f"the victim refused the key (401): pass a valid --key ({_msg(r)})")
            raise PtmlabError(f"the victim answered {r.status_code}: {_msg(r)}")
        raise PtmlabError("the victim kept refusing: giving up")

    def query(self, texts: list[str], pairs: list[str] | None = None, desc: str = "query") -> Answers:
        """Labels (and probabilities when the API shows them) for every text, in order."""
        stats = {"waited": 0.0, "rate_limited": 0}
        labels: list[int] = []
        probs: list[list[float]] | None = []
        names: list[str] = []
        policy = ""
        starts = range(0, len(texts), self.chunk)
        for s in progress(starts, desc=desc, unit="request"):
            out = self._post(texts[s:s + self.chunk], pairs[s:s + self.chunk] if pairs is not None else None, stats)
            names, policy = out["label_names"], out["policy"]
            for p in out["predictions"]:
                if "label_id" not in p:  # a regression head (a multi-task victim's default task) answers a score
                    raise PtmlabError(f"the victim answered task '{out.get('task')}' with scores, not labels: "
                                      f"extraction needs a classification head")
                labels.append(int(p["label_id"]))
                if probs is not None and p.get("probs") is not None:
                    probs.append([float(x) for x in p["probs"]])
                else:
                    probs = None
        return Answers(names, labels, probs, policy, stats["waited"], stats["rate_limited"])


def _msg(r) -> str:
    try:
        return str(r.json().get("error", r.text))[:300]
    except ValueError:
        return r.text[:300]
