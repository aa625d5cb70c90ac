"""One multivariate Gaussian per layer over token vectors: fit, log-likelihood, save/load (safetensors).

Covariance choices: ``full`` (maximum likelihood, plus ``1e-6 * mean variance`` on the diagonal for numerical
safety) needs many more token vectors than dimensions; ``ledoit-wolf`` shrinks it towards a scaled identity by the
Ledoit-Wolf formula (sklearn), which works with few vectors; ``diag`` keeps variances only. When a full covariance
is asked for with fewer than ``MIN_TOKENS_PER_DIM * dim`` vectors, ``fit_gaussians`` falls back to Ledoit-Wolf and
says so.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_save_file

COVARIANCES = ("full", "ledoit-wolf", "diag")
MIN_TOKENS_PER_DIM = 2


@dataclass
class LayerGaussians:
    """Per layer: mean [D] and the Cholesky factor L of the precision-whitening (cov = L L^T)."""

    means: torch.Tensor  # [layers, D]
    chol: torch.Tensor  # [layers, D, D]
    covariance: str
    tokens: int
    meta: dict

    @property
    def num_layers(self) -> int:
        return self.means.shape[0]

    def log_likelihood(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """log N(x | mean, cov) for vectors x [..., D] at one layer (float64)."""
        x = x.double()
        L = self.chol[layer]
        diff = (x - self.means[layer]).reshape(-1, x.shape[-1])
        z = torch.linalg.solve_triangular(L, diff.T, upper=False)  # [D, N]
        d = x.shape[-1]
        logdet = 2 * torch.log(torch.diagonal(L)).sum()
        ll = -0.5 * (z.pow(2).sum(0) + logdet + d * math.log(2 * math.pi))
        return ll.reshape(x.shape[:-1])

    def save(self, path: str | Path) -> None:
        meta = {k: str(v) for k, v in self.meta.items()} | {"covariance": self.covariance, "tokens": str(self.tokens)}
        atomic_save_file({"means": self.means, "chol": self.chol}, path, metadata=meta)

    @classmethod
    def load(cls, path: str | Path) -> LayerGaussians:
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                meta = dict(f.metadata() or {})
                means, chol = f.get_tensor("means"), f.get_tensor("chol")
        except (SafetensorError, OSError, KeyError) as e:
            raise PtmlabError(f"'{path}' is not a saved Gaussians file ({e}): remove it or pass another "
                              f"--gaussians path") from None
        cov, tokens = meta.pop("covariance", "full"), int(meta.pop("tokens", "0"))
        return cls(means.double(), chol.double(), cov, tokens, meta)


def fit_one(x: np.ndarray, covariance: str) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of the rows of x by the chosen estimator."""
    mean = x.mean(0)
    if covariance == "ledoit-wolf":
        from sklearn.covariance import LedoitWolf

        cov = LedoitWolf(assume_centered=False).fit(x).covariance_
    else:
        xc = x - mean
        cov = xc.T @ xc / max(len(x) - 1, 1)
        if covariance == "diag":
            cov = np.diag(np.diag(cov))
    cov = cov + np.eye(len(mean)) * 1e-6 * max(float(np.trace(cov)) / len(mean), 1e-12)
    return mean, cov


def fit_gaussians(layers: list[np.ndarray], covariance: str = "full", meta: dict | None = None) -> LayerGaussians:
    """A Gaussian per layer from token vectors ``layers[l]`` of shape [N, D]."""
    if covariance not in COVARIANCES:
        raise PtmlabError(f"unknown covariance '{covariance}': choose from {', '.join(COVARIANCES)}")
    n, d = layers[0].shape
    if n < 2:
        raise PtmlabError(f"the reference corpus gave {n} token vectors: give a reference text with at least "
                          f"{MIN_TOKENS_PER_DIM * d} tokens")
    if covariance == "full" and n < MIN_TOKENS_PER_DIM * d:
        print(f"warning: the reference corpus gave {n} token vectors, too few for a full {d}x{d} covariance "
              f"(needs >= {MIN_TOKENS_PER_DIM * d}); falling back to Ledoit-Wolf shrinkage", file=sys.stderr)
        covariance = "ledoit-wolf"
    means, chols = [], []
    for x in layers:
        mean, cov = fit_one(x.astype(np.float64), covariance)
        means.append(torch.from_numpy(mean))
        chols.append(torch.linalg.cholesky(torch.from_numpy(cov)))
    return LayerGaussians(torch.stack(means), torch.stack(chols), covariance, n, dict(meta or {}))
