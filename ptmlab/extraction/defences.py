"""Owner-side checks over the server's state: flag keys by the query detector, verify a suspect's watermark."""

from __future__ import annotations

from ptmlab.core.errors import PtmlabError
from ptmlab.serve.state import Store


def flag_keys(store: Store, threshold: float = 0.5, last: int = 1000, min_queries: int = 20) -> list[dict]:
    """Per key: how many of its newest ``last`` queries were scored, their mean score, and whether it is flagged."""
    if not 0 < threshold < 1:
        raise PtmlabError(f"--threshold must be in (0, 1), got {threshold}")
    rows = []
    for k in store.list_keys():
        scores = store.audit_scores(k.id, last)
        mean = sum(scores) / len(scores) if scores else 0.0
        rows.append({"key_id": k.id, "name": k.name, "scored": len(scores), "mean_score": mean,
                     "flagged": len(scores) >= min_queries and mean > threshold})
    return rows


def verify_watermark(model_dir: str, store: Store, key_id: int | None = None, alpha: float = 0.01,
                     batch_size: int = 64) -> dict:
    """Does the suspect model reproduce the wrong answers the server gave on watermarked queries?

    Null hypothesis: the suspect matches a mark only as often as it disagrees with the truth on control queries
    (answered truthfully). A one-sided binomial test at ``alpha`` decides.
    """
    from scipy.stats import binomtest

    from ptmlab.serve.predictor import Predictor

    rows = store.watermarks(key_id)
    marks = [r for r in rows if r.kind == "mark"]
    controls = [r for r in rows if r.kind == "control"]
    if len(marks) < 5 or len(controls) < 5:
        raise PtmlabError(f"only {len(marks)} watermarked and {len(controls)} control queries are recorded"
                          f"{' for this key' if key_id is not None else ''}: serve with --watermark-rate > 0 and "
                          f"verify after more queries")
    suspect = Predictor(model_dir)

    def labels(rs) -> list[int]:
        out = []
        for s in range(0, len(rs), batch_size):
            chunk = rs[s:s + batch_size]
            pairs = [r.text_pair for r in chunk] if chunk[0].text_pair is not None else None
            probs = suspect.predict([r.text for r in chunk], pairs)
            out.extend(max(range(len(p)), key=p.__getitem__) for p in probs)
        return out

    matches = sum(p == r.given_label for p, r in zip(labels(marks), marks, strict=True))
    disagree = sum(p != r.true_label for p, r in zip(labels(controls), controls, strict=True))
    null_rate = (disagree + 1) / (len(controls) + 2)
    p_value = float(binomtest(matches, len(marks), null_rate, alternative="greater").pvalue)
    return {"model": model_dir, "marks": len(marks), "mark_matches": matches, "mark_match_rate": matches / len(marks),
            "controls": len(controls), "control_disagreement": disagree / len(controls), "null_rate": null_rate,
            "p_value": p_value, "alpha": alpha, "watermarked": p_value < alpha}
