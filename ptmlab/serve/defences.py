"""The defences against model extraction: those the server applies to every answer (``ServingDefences``: the output
policy, the query detector, the watermark) and the owner's checks over the server's state (flag keys by the query
detector, verify a suspect's watermark).

The store keeps only hashes of the queries it marked, so verification needs the queries themselves from elsewhere:
a copy's training queries (an extraction run's ``queries.json``), a seized dataset, or any text file, one query per
line. Each query is hashed as the server hashed it and matched against the records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ptmlab.core.errors import PtmlabError
from ptmlab.serve.policy import OutputPolicy
from ptmlab.serve.state import DetectorPolicy, Store, WatermarkRow, printable_name, text_hash

if TYPE_CHECKING:
    from ptmlab.serve.config import ServeConfig
    from ptmlab.serve.detector import QueryDetector
    from ptmlab.serve.watermark import Watermarker

MAX_LAST = 10**9  # queries per key a report reads (SQLite's LIMIT takes at most 2**63)


@dataclass
class ServingDefences:
    """What the server does against extraction: ``policy`` shapes every answer, ``detector`` scores each query for
    the audit log (``detector_policy``: when a key's scores throttle or block it), ``watermarker`` answers a
    fraction of queries with a recorded wrong label. ``None``: that defence is off."""
    policy: OutputPolicy
    detector: QueryDetector | None = None
    detector_policy: DetectorPolicy | None = None
    watermarker: Watermarker | None = None

    @classmethod
    def build(cls, cfg: ServeConfig, store: Store, policy: OutputPolicy) -> ServingDefences:
        out = cls(policy)
        if cfg.detector:
            from ptmlab.serve.detector import default_detector
            from ptmlab.serve.state import state_home

            out.detector = default_detector(getattr(store, "home", None) or state_home())
            out.detector_policy = DetectorPolicy(cfg.detector_action, cfg.detector_threshold,
                                                 cfg.detector_min_queries)
        if cfg.watermark_rate > 0:
            from ptmlab.serve.watermark import Watermarker

            out.watermarker = Watermarker(store.secret("watermark"), cfg.watermark_rate)
        return out

    def scores(self, texts: list[str]) -> list[float | None]:
        """The detector's score of each text (``None`` each with the detector off)."""
        return self.detector.score(texts) if self.detector else [None] * len(texts)


def flag_keys(store: Store, threshold: float = 0.5, last: int = 1000, min_queries: int = 20) -> list[dict]:
    """Per key: how many of its newest ``last`` queries were scored, their mean score, and whether it is flagged."""
    if not 0 < threshold < 1:
        raise PtmlabError(f"--threshold must be in (0, 1), got {threshold}")
    if not (1 <= last <= MAX_LAST and 1 <= min_queries <= MAX_LAST):
        raise PtmlabError(f"--last and --min-queries must be in 1..{MAX_LAST:g}, got {last:.6g}, {min_queries:.6g}")
    rows = []
    for k in store.list_keys():
        scores = store.audit_scores(k.id, last)
        mean = sum(scores) / len(scores) if scores else 0.0
        rows.append({"key_id": k.id, "name": printable_name(k.name), "scored": len(scores), "mean_score": mean,
                     "flagged": len(scores) >= min_queries and mean > threshold})
    return rows


def read_queries(path: str | Path) -> tuple[list[str], list[str] | None]:
    """Queries from an extraction run's ``queries.json`` (or a JSON ``{"texts": [...]}``) or a text file."""
    p = Path(path)
    if p.is_dir():
        p = p / "queries.json"
    if not p.is_file():
        raise PtmlabError(f"--queries '{path}' is not a file: pass a queries.json or a text file of queries")
    text = p.read_text(encoding="utf-8", errors="surrogateescape")
    if p.suffix == ".json":
        try:
            d = json.loads(text)
            return [str(t) for t in d["texts"]], ([str(t) for t in d["text_pairs"]] if d.get("text_pairs") else None)
        except (ValueError, KeyError, TypeError, RecursionError) as e:  # RecursionError: nested too deep
            raise PtmlabError(f"--queries '{path}' is not a queries.json ({type(e).__name__}): pass a JSON with "
                              f"\"texts\" or a text file") from None
    return [line for line in text.splitlines() if line.strip()], None


def verify_watermark(model_dir: str, store: Store, texts: list[str], pairs: list[str] | None = None,
                     key_id: int | None = None, alpha: float = 0.01, batch_size: int = 64,
                     task: str | None = None) -> dict:
    """Does the suspect model reproduce the wrong answers the server gave on the marked queries among ``texts``?

    Null hypothesis: the suspect matches a mark only as often as it disagrees with the truth on control queries
    (answered truthfully). A one-sided binomial test at ``alpha`` decides. ``task``: the head of a multi-task
    server the queries were sent to (its records are kept per head); a multi-task suspect answers with that head.
    """
    from scipy.stats import binomtest

    from ptmlab.models.loader import refuse_pickle
    from ptmlab.serve.predictor import Predictor

    if not 0 < alpha < 1:
        raise PtmlabError(f"--alpha must be in (0, 1), got {alpha}")
    refuse_pickle(model_dir)  # first: a suspect is untrusted by definition, whatever the records hold
    records: dict[str, WatermarkRow] = {r.query_hash: r for r in store.watermarks(key_id)}
    found: list[tuple[int, WatermarkRow]] = []
    seen = set()
    for i, t in enumerate(texts):
        h = text_hash(t, pairs[i] if pairs is not None else None, task)
        if h in records and h not in seen:
            seen.add(h)
            found.append((i, records[h]))
    marks = [(i, r) for i, r in found if r.kind == "mark"]
    controls = [(i, r) for i, r in found if r.kind == "control"]
    if len(marks) < 5 or len(controls) < 5:
        raise PtmlabError(f"only {len(marks)} watermarked and {len(controls)} control queries of the "
                          f"{len(texts)} given are recorded{' for this key' if key_id is not None else ''}: serve "
                          f"with --watermark-rate > 0 and pass the queries the suspect was trained on (--queries)"
                          f"{'' if task else '; a multi-task server records each head apart: name it (--head)'}")
    suspect = Predictor(model_dir)
    head = task if suspect.info.tasks else None  # a single-task copy has one answer to give

    def labels(rows: list[tuple[int, WatermarkRow]]) -> list[int]:
        out = []
        for s in range(0, len(rows), batch_size):
            idx = [i for i, _ in rows[s:s + batch_size]]
            probs = suspect.predict([texts[i] for i in idx], [pairs[i] for i in idx] if pairs is not None else None,
                                    head)
            out.extend(max(range(len(p)), key=p.__getitem__) for p in probs)
        return out

    matches = sum(p == r.given_label for p, (_, r) in zip(labels(marks), marks, strict=True))
    disagree = sum(p != r.true_label for p, (_, r) in zip(labels(controls), controls, strict=True))
    null_rate = (disagree + 1) / (len(controls) + 2)
    p_value = float(binomtest(matches, len(marks), null_rate, alternative="greater").pvalue)
    return {"model": model_dir, "marks": len(marks), "mark_matches": matches, "mark_match_rate": matches / len(marks),
            "controls": len(controls), "control_disagreement": disagree / len(controls), "null_rate": null_rate,
            "p_value": p_value, "alpha": alpha, "watermarked": p_value < alpha}
