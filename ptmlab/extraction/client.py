"""A client for a served victim: sends queries in chunks, waits out 429s (Retry-After), keeps what it learns.

Every answer of the victim is untrusted input: a Retry-After that is a date, negative or huge, a 200 that is not
JSON or lacks ``label_names``, a label id out of range or probabilities that are not numbers end the attack with one
line naming what the victim sent (``PtmlabError``), never a traceback.
"""

from __future__ import annotations

import email.utils
import math
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
        try:
            httpx.URL(self.url)
            self.http = httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {key}"})
        except (httpx.InvalidURL, ValueError, TypeError) as e:
            raise PtmlabError(f"--victim '{_clip(url)}' or --key cannot be used in a request ({e}): pass e.g. "
                              f"--victim http://127.0.0.1:8000") from None
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
            except (httpx.HTTPError, httpx.InvalidURL) as e:
                if attempt >= 5:
                    raise PtmlabError(f"victim {self.url} unreachable ({type(e).__name__}): check --victim") from None
                time.sleep(0.5 * 2**attempt)
                continue
            if r.status_code == 200:
                return _checked(r, len(texts))
            if r.status_code == 429:
                wait = retry_after(r.headers.get("retry-after"))
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
            if names and out["label_names"] != names:
                raise PtmlabError(f"the victim changed its label names between answers ({_clip(names)} then "
                                  f"{_clip(out['label_names'])}): it is not one model")
            names, policy = out["label_names"], out["policy"]
            for p in out["predictions"]:
                labels.append(p["label_id"])
                if probs is not None and p.get("probs") is not None:
                    probs.append(p["probs"])
                else:
                    probs = None
        return Answers(names, labels, probs, policy, stats["waited"], stats["rate_limited"])


def retry_after(value: str | None) -> float:
    """Seconds to wait from a Retry-After header: whole seconds or an HTTP date; 1 when missing, unreadable or
    negative (a hostile victim must not make the client sleep a negative or endless time: --max-wait bounds it)."""
    if value is None:
        return 1.0
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return 1.0
    return seconds if math.isfinite(seconds) and seconds >= 0 else 1.0


def _checked(r, n: int) -> dict:
    """The body of a 200 answer to ``n`` texts, checked field by field (labels and probabilities as numbers)."""
    try:
        out = r.json()
    except (ValueError, RecursionError):  # not JSON, or nested deeper than a parser should follow
        raise PtmlabError(f"the victim answered 200 with a body that is not JSON or nests too deep "
                          f"({_clip(r.text)}): is --victim a ptmlab serve URL?") from None

    def bad(why: str):
        return PtmlabError(f"the victim's answer is malformed ({why}): is --victim a ptmlab serve URL?")

    if not isinstance(out, dict):
        raise bad(f"a JSON {type(out).__name__}, not an object")
    names, preds, policy = out.get("label_names"), out.get("predictions"), out.get("policy", "")
    if not isinstance(preds, list) or len(preds) != n:
        raise bad(f"'predictions' is {_clip(preds)} for {n} texts")
    if preds and all(isinstance(p, dict) and "score" in p and "label_id" not in p for p in preds):
        raise PtmlabError(f"the victim answered task '{_clip(out.get('task'))}' with scores, not labels: extraction "
                          f"needs a classification head")  # a regression head (a multi-task victim's default task)
    if preds and all(isinstance(p, dict) and "label_ids" in p and "label_id" not in p for p in preds):
        raise PtmlabError("the victim answers label sets (a multi-label model): multi-label tasks are not supported by "
                          "extraction, which copies single-label classifiers")
    if not isinstance(names, list) or not 2 <= len(names) <= 10_000 or not all(isinstance(x, str) for x in names):
        raise bad(f"'label_names' is {_clip(names)}, not a list of at least two names")
    if not isinstance(policy, str):
        raise bad(f"'policy' is {_clip(policy)}")
    for p in preds:
        label = p.get("label_id") if isinstance(p, dict) else None
        if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(names):
            raise bad(f"prediction {_clip(p)} has no label id in 0..{len(names) - 1}")
        probs = p.get("probs")
        if probs is not None and not (isinstance(probs, list) and len(probs) == len(names) and all(
                isinstance(x, int | float) and not isinstance(x, bool) and 0 <= x <= 1 for x in probs)):
            raise bad(f"prediction {_clip(p)} has probabilities that are not {len(names)} numbers in [0, 1]")
    return out


def _clip(value, n: int = 80) -> str:
    text = str(value)
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text[:n])
    return text + ("..." if len(str(value)) > n else "")


def _msg(r) -> str:
    try:
        body = r.json()
        return _clip(body.get("error", r.text) if isinstance(body, dict) else r.text, 300)
    except (ValueError, RecursionError):
        return _clip(r.text, 300)
