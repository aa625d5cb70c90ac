"""Benchmark: BLiMP accuracy per layer for minilm (and mpnet when installed), plain baseline vs ptmlab's default.

Both variants score the same BLiMP pairs (``--per-phenomenon`` pairs of every phenomenon in ../shared/data/blimp)
with one Gaussian per layer fit on WikiText-2 sentences from ../shared/data/text:
  plain: the baseline method: full covariance on 1,000 sentences, every token including [CLS]/[SEP];
  ptmlab: the defaults of ``ptmlab analyze anomaly`` (see docs/analysis.md).
Reported: accuracy per layer, best layer and accuracy, per field at the best layer, pairs scored per second,
next to the paper (BERT-base 0.742 at layer 9, RoBERTa-base 0.830 at layer 11) and the plain baseline's published number
(minilm 0.588 at layer 2). Writes benchmarks/results/anomaly.MACHINE.json and prints a table.

    python benchmarks/anomaly.py [--per-phenomenon 100] [--models minilm,mpnet]
"""

from __future__ import annotations

# isort: off
from _env import ROOT, machine_info, result_path  # first: offline defaults
# isort: on

import argparse
import json
import time

SHARED = ROOT.parent / "shared" / "data"
REFERENCE = {"paper BERT-base": (0.742, 9), "paper RoBERTa-base": (0.830, 11), "plain baseline minilm": (0.588, 2),
             "plain baseline mpnet": (0.71, 7)}


def variant(model: str, blimp: list, name: str, include_special: bool, max_sentences: int, center: bool) -> dict:
    from ptmlab.analysis.anomaly import Encoder, blimp_results, reference_sentences

    enc = Encoder.load(model, include_special=include_special, center=center)
    refs = reference_sentences(str(SHARED / "text" / "wikitext-2"), max_sentences, seed=0)
    t0 = time.perf_counter()
    g = enc.fit(refs, "full")
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    good, bad = enc.scores(g, [p.good for p in blimp]), enc.scores(g, [p.bad for p in blimp])
    score_s = time.perf_counter() - t0
    r = blimp_results(good, bad, blimp)
    best = r["best_layer"]
    return {"model": model, "variant": name, "reference_sentences": len(refs), "reference_tokens": g.tokens,
            "include_special": include_special, "center": center, "per_layer": r["per_layer"], "best_layer": best,
            "best_accuracy": r["best_accuracy"], "per_field_at_best": {k: v[best] for k, v in r["per_field"].items()},
            "per_field_best": {k: max(v) for k, v in r["per_field"].items()}, "fit_seconds": round(fit_s, 1),
            "pairs_per_second": round(len(blimp) / score_s, 1)}


def main() -> int:
    from ptmlab.analysis.anomaly import load_blimp
    from ptmlab.core.errors import PtmlabError
    from ptmlab.core.seed import configure_threads
    from ptmlab.models.zoo import resolve

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-phenomenon", type=int, default=100)
    p.add_argument("--models", default="minilm,mpnet")
    args = p.parse_args()
    configure_threads()
    blimp = load_blimp(SHARED / "blimp", args.per_phenomenon)
    rows = []
    for model in args.models.split(","):
        try:
            resolve(model)
        except PtmlabError as e:
            print(f"skipping {model}: {e}")
            continue
        rows.append(variant(model, blimp, "plain", True, 1000, center=False))
        rows.append(variant(model, blimp, "ptmlab (centred tokens)", False, 2000, center=True))
    result = {"machine": machine_info(), "pairs": len(blimp), "phenomena": len({p.phenomenon for p in blimp}),
              "reference": REFERENCE, "rows": rows}
    out = result_path("anomaly")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'model':8} {'variant':8} {'best layer':>10} {'accuracy':>9} {'pairs/s':>8}  per layer")
    for r in rows:
        print(f"{r['model']:8} {r['variant']:8} {r['best_layer']:>10} {r['best_accuracy']:>9.4f} "
              f"{r['pairs_per_second']:>8}  {r['per_layer']}")
    for k, (acc, layer) in REFERENCE.items():
        print(f"{k:30} {acc:.3f} at layer {layer}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
