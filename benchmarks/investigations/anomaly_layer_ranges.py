"""Benchmark: does pooling layers beat the best single layer for Gaussian anomaly scoring on BLiMP, with the choice
made honestly? For each scoring (plain, centred), a sentence's score summed over a layer range a..b (raw, or each
layer z-scored over all scored sentences, which uses no labels) is compared across every range on the development
phenomena (the anomaly study's split: sorted names, even positions); the range chosen there is reported on the
held-out phenomena (odd positions) beside the dev-chosen single layer. One reference sample (--seed).
Writes benchmarks/investigations/results/anomaly_layer_ranges.MACHINE.json and prints one line per scoring.

    python benchmarks/investigations/anomaly_layer_ranges.py [--model mpnet] [--blimp ../shared/data/blimp]
                                                             [--per-phenomenon 100]
"""

from __future__ import annotations

# isort: off
import _shared  # noqa: F401  (first: the benchmarks' helpers and offline defaults)
# isort: on

import time

import numpy as np
from _blimp import blimp_parser, blimp_split


def choose_ranges(good: np.ndarray, bad: np.ndarray, dev: np.ndarray) -> dict:
    """good/bad: per-sentence scores [pairs, layers]; dev: bool [pairs]. The dev-chosen single layer and layer range
    (each with its dev and held-out accuracy) and the five best ranges on dev."""
    held = ~dev
    n_layers = good.shape[1]
    single = (good > bad).astype(float)
    layer = int(single[dev].mean(0).argmax())
    allv = np.concatenate([good, bad])
    mu, sd = allv.mean(0), allv.std(0) + 1e-9
    cands = {}
    for z in (False, True):
        g, b = ((good - mu) / sd, (bad - mu) / sd) if z else (good, bad)
        cg, cb = np.cumsum(g, 1), np.cumsum(b, 1)
        for lo in range(n_layers):
            for hi in range(lo, n_layers):
                sg = cg[:, hi] - (cg[:, lo - 1] if lo else 0)
                sb = cb[:, hi] - (cb[:, lo - 1] if lo else 0)
                c = (sg > sb).astype(float)
                cands[(z, lo, hi)] = (float(c[dev].mean()), float(c[held].mean()))
    best = max(cands, key=lambda k: (cands[k][0], -(k[2] - k[1])))  # ties: the narrower range
    top = sorted(cands, key=lambda k: cands[k][0], reverse=True)[:5]
    name = lambda k: f"{'z-scored ' if k[0] else ''}layers {k[1]}-{k[2]}"  # noqa: E731
    return {"single_layer": layer, "single_dev": round(float(single[dev].mean(0)[layer]), 4),
            "single_held_out": round(float(single[held].mean(0)[layer]), 4),
            "range": name(best), "range_dev": round(cands[best][0], 4), "range_held_out": round(cands[best][1], 4),
            "top5_on_dev": [{"range": name(k), "dev": round(cands[k][0], 4), "held_out": round(cands[k][1], 4)}
                            for k in top]}


def main() -> int:
    from ptmlab.analysis.anomaly import Encoder
    from ptmlab.analysis.runs import fit_or_load
    from ptmlab.core.seed import configure_threads
    from ptmlab.studies.anomaly import _FitArgs

    p = blimp_parser(__doc__, "anomaly_layer_ranges")
    p.add_argument("--max-sentences", type=int, default=2000, help="reference sentences (the study's default)")
    args = p.parse_args()
    configure_threads()
    pairs, dev = blimp_split(args)
    record = {"model": args.model, "pairs": {"dev": int(dev.sum()), "held_out": int((~dev).sum())},
              "seed": args.seed, "max_sentences": args.max_sentences, "scorings": {}}
    for center in (False, True):
        t0 = time.perf_counter()
        enc = Encoder.load(args.model, center=center, batch_size=64)
        g, _ = fit_or_load(enc, _FitArgs(None, args.max_sentences, args.seed, "full"), args.model)
        good, bad = enc.scores(g, [x.good for x in pairs]), enc.scores(g, [x.bad for x in pairs])
        r = choose_ranges(good, bad, dev)
        r["seconds"] = round(time.perf_counter() - t0, 1)
        record["scorings"]["centred" if center else "plain"] = r
        print(f"{'centred' if center else 'plain'}: dev-chosen layer {r['single_layer']} held-out "
              f"{r['single_held_out']:.4f}; dev-chosen {r['range']} held-out {r['range_held_out']:.4f}", flush=True)
    from ptmlab.core.io import atomic_write_json

    atomic_write_json(args.output, record)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
