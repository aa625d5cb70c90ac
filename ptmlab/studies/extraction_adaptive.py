"""Adaptive attacks and the defences' cost to legitimate users, for the ``extraction`` study.

* Variant voting against the watermark: the attacker asks each query in several variants the model reads alike
  (case, spacing, trailing punctuation, function-word padding) and keeps the majority label. The row reports how
  many marked queries still carry the wrong label after the vote (all of them, when the mark is keyed on the
  model's normalised tokens).
* Function-word padding against the detector: RANDOM queries with "the", "of", ... mixed in and a final period
  (query strategy ``padded``), served with ``--detector-action block``: how many queries the attacker gets answered
  before the key is blocked, and what the copy learns from them.
* False alarms: real texts (SST-2 dev, tweets, product and airline reviews when the shared data is present) sent
  by legitimate keys through the same detector: the share of texts scored over the threshold and whether the key
  would be flagged.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

from ptmlab.core.errors import PtmlabError

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def variants(text: str) -> list[str]:
    """Variants the model treats (nearly) alike: the attacker's vote over them should remove a per-text mark."""
    return [text, text.upper(), "  " + "   ".join(text.split()) + " ", text + " !!", "the " + text + " of it."]


def vote_attack(victim: str, store, n: int, seed: int, rate: float = 0.1, k: int = 3) -> dict:
    """``n`` RANDOM queries, each asked in ``k`` variants; returns how many marks survive the majority vote."""
    from ptmlab.data.wordlists import random_words
    from ptmlab.extraction.client import VictimClient
    from ptmlab.serve import ServeConfig, create_app, serve_in_thread, text_hash

    texts = random_words(n, [8, 12, 16, 20], random.Random(seed))
    key = store.create_key("vote-attack", rate=10_000, burst=10_000)
    asked = [v for t in texts for v in variants(t)[:k]]
    with serve_in_thread(create_app(victim, ServeConfig(detector=False, watermark_rate=rate), store)) as url:
        labels = VictimClient(url, key, max_wait=5).query(asked, desc="vote attack").labels
    records = {r.query_hash: r for r in store.watermarks(store.find_key(key).id)}
    marked = survived = 0
    for i, t in enumerate(texts):
        rec = records.get(text_hash(t))
        if rec is None or rec.kind != "mark":
            continue
        votes = labels[i * k:(i + 1) * k]
        marked += 1
        survived += max(set(votes), key=votes.count) == rec.given_label
    return {"queries": len(asked), "marked": marked, "survived": survived,
            "survival": survived / marked if marked else float("nan")}


def real_texts(limit: int, seed: int) -> dict[str, list[str]]:
    """Legitimate traffic by source: built-in tweets, and SST-2 dev and domain reviews when shared data exists."""
    from ptmlab.data.loaders import load_task

    rng = random.Random(seed)
    out = {"tweets": [t for t in load_task("tweets").splits["dev"].text if t.strip()]}
    sst = SHARED / "glue" / "SST-2" / "dev.tsv"
    if sst.is_file():
        with open(sst, encoding="utf-8") as f:
            out["sst2"] = [r["sentence"] for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    for name in ("airline", "electronics"):
        path = SHARED / "domains" / f"{name}.tsv"
        if path.is_file():
            with open(path, encoding="utf-8") as f:
                out[f"reviews-{name}"] = [r["text"] for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    tatoeba = SHARED / "parallel" / "tatoeba" / "tatoeba.deu-eng.deu"
    if tatoeba.is_file():
        out["german"] = [t for t in tatoeba.read_text(encoding="utf-8").splitlines() if t.strip()]
    return {k: rng.sample(v, min(limit, len(v))) for k, v in out.items() if v}


def false_alarms(victim: str, store, limit: int, seed: int, threshold: float = 0.5) -> list[dict]:
    """Per source of real text: texts scored, share over ``threshold``, mean score, and whether the key is flagged."""
    from ptmlab.extraction.client import VictimClient
    from ptmlab.serve import ServeConfig, create_app, flag_keys, serve_in_thread

    rows = []
    app = create_app(victim, ServeConfig(detector=True, max_chars=100_000), store)
    with serve_in_thread(app) as url:
        for source, texts in real_texts(limit, seed).items():
            name = f"legit-{source}"
            key = store.create_key(name, rate=10_000, burst=10_000)
            try:
                VictimClient(url, key, max_wait=5).query(texts, desc=name)
            except PtmlabError as e:
                raise PtmlabError(f"legitimate traffic '{source}' was refused ({e})") from None
            kid = store.find_key(key).id
            scores = store.audit_scores(kid)
            flag = next(r for r in flag_keys(store, threshold) if r["key_id"] == kid)
            rows.append({"source": source, "texts": len(texts), "scored": len(scores),
                         "over_threshold": sum(s > threshold for s in scores) / max(1, len(scores)),
                         "mean_score": flag["mean_score"], "flagged": flag["flagged"]})
    return rows
