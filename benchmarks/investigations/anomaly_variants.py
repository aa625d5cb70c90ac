"""Benchmark: how far do scoring variants move minilm's BLiMP accuracy with per-layer Gaussians? One encoding of
BLiMP and of the reference sentences, then each variant re-fits and re-scores from the cached token vectors:
reference samples (seeds, sizes, Ledoit-Wolf, other corpora), token scores (Gaussian, Student-t, -log
Mahalanobis, without the final token) and layer pooling (mean / concatenation of layers). Writes
benchmarks/investigations/results/anomaly_variants.MACHINE.json and prints one line per variant (best layer and
accuracy).

    python benchmarks/investigations/anomaly_variants.py [--blimp ../shared/data/blimp] [--per-phenomenon 100]
"""

from __future__ import annotations

# isort: off
import _shared  # noqa: F401  (first: the benchmarks' helpers and offline defaults)
from _env import ROOT, result_path
# isort: on

import argparse
import json
from pathlib import Path

import numpy as np
import torch


def main() -> int:
    from ptmlab.analysis.anomaly import Encoder, default_reference, load_blimp, reference_sentences
    from ptmlab.analysis.gaussian import fit_one
    from ptmlab.core.seed import configure_threads

    shared = ROOT.parent / "shared" / "data"
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blimp", default=str(shared / "blimp"))
    p.add_argument("--gutenberg", default=str(shared / "text" / "gutenberg"))
    p.add_argument("--per-phenomenon", type=int, default=100)
    p.add_argument("--reference-sentences", type=int, default=6000, help="WikiText-2 sentences encoded (at most)")
    p.add_argument("--base", type=int, default=1000, help="reference sentences of the plain method")
    args = p.parse_args()
    configure_threads()
    enc = Encoder.load("minilm", center=False)  # raw token vectors; centring is one of the variants
    pairs = load_blimp(args.blimp, args.per_phenomenon)
    n = len(pairs)

    def collect(sentences):
        toks = [None] * len(sentences)
        for idx, hidden, keep in enc.batches(sentences):
            for r, i in enumerate(idx):
                toks[i] = hidden[:, r][:, keep[r]].numpy().astype(np.float32)  # [layers, tokens, dim]
        return toks

    B = collect([q.good for q in pairs] + [q.bad for q in pairs])
    W = collect(reference_sentences(default_reference(), args.reference_sentences, seed=0))
    G = collect(reference_sentences(args.gutenberg, args.base, seed=0)) if Path(args.gutenberg).exists() else []
    layers = B[0].shape[0]
    rows = []

    def run(name, refs, feature=lambda t, l: t[l], token_score="gauss", covariance="full", drop_last=False,
            layer_set=None):
        per_layer = []
        for layer in layer_set or range(layers):
            x = np.concatenate([feature(r, layer) for r in refs]).astype(np.float64)
            mean, cov = fit_one(x, covariance)
            chol = torch.linalg.cholesky(torch.from_numpy(cov))
            logdet, d = 2 * torch.log(torch.diagonal(chol)).sum().item(), x.shape[1]
            feats = [feature(b, layer) for b in B]
            diff = torch.from_numpy(np.concatenate(feats).astype(np.float64) - mean)
            m = torch.linalg.solve_triangular(chol, diff.T, upper=False).pow(2).sum(0).numpy()
            if token_score == "gauss":
                ll = -0.5 * (m + logdet + d * np.log(2 * np.pi))
            elif token_score == "neglog":
                ll = -np.log(m)
            else:  # Student-t with nu = token_score
                ll = -0.5 * (token_score + d) * np.log1p(m / token_score)
            scores, pos = np.zeros(len(B)), 0
            for i, f in enumerate(feats):
                k = len(f)
                s = ll[pos:pos + k]
                pos += k
                scores[i] = (s[:-1] if drop_last and k > 1 else s).sum()
            per_layer.append(float(np.mean(scores[:n] > scores[n:])))
        best = int(np.argmax(per_layer))
        rows.append({"variant": name, "best_layer": best, "best_accuracy": round(per_layer[best], 4),
                     "per_layer": [round(a, 4) for a in per_layer]})
        print(f"{name:46s} best {per_layer[best]:.4f} at {best}  {[round(a, 4) for a in per_layer]}", flush=True)

    base = args.base
    for seed in range(4):
        idx = np.random.default_rng(seed).permutation(len(W))[:base]
        run(f"plain, {base} sentences, sample seed {seed}", [W[i] for i in idx])
    run(f"{2 * base} sentences", W[:2 * base])
    run(f"all {len(W)} sentences", W)
    run(f"all {len(W)} sentences, Ledoit-Wolf", W, covariance="ledoit-wolf")
    run("without the final token", W[:base], drop_last=True)
    for nu in (5, 20, 100, 400):
        run(f"Student-t token scores, nu={nu}", W[:base], token_score=nu)
    run("-log Mahalanobis token scores", W[:base], token_score="neglog")
    def centred(t, l):
        return t[l] - t[l].mean(0, keepdims=True)

    for seed in range(4):
        idx = np.random.default_rng(seed).permutation(len(W))[:base]
        run(f"centred tokens, {base} sentences, seed {seed}", [W[i] for i in idx], feature=centred)
    run(f"centred tokens, {2 * base} sentences (ptmlab default)", W[:2 * base], feature=centred)
    run("mean of layers 1-3", W[:base], feature=lambda t, _l: t[1:4].mean(0), layer_set=[0])
    for lo, hi in ((1, 3), (0, 2), (2, 3), (0, layers - 1)):
        run(f"concatenated layers {lo}-{hi}", W[:base], layer_set=[0],
            feature=lambda t, _l, lo=lo, hi=hi: np.concatenate(list(t[lo:hi + 1]), -1))
    if G:
        run("WikiText-2 + Gutenberg reference", W[:base] + G)
        run("Gutenberg reference", G)
    out = result_path("anomaly_variants", investigation=True)
    out.write_text(json.dumps({"model": "minilm", "pairs": n, "rows": rows}, indent=2) + "\n")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
