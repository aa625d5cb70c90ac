"""Is attention an explanation? (Jain & Wallace, 2019) on a fine-tuned encoder.

Per example, over its non-special tokens:
  attention: the [CLS] row, averaged over heads, of the last layer ("last") and of all layers ("mean");
  gradient importance: L2 norm of d log p(predicted class) / d (input embedding of the token);
  leave-one-out importance: total variation distance between the output distributions with and without the token.
Kendall's tau-b ranks attention against each importance. The counterfactual: the last layer's attention rows
are permuted over the non-padding keys (the same random permutation for every query and head of an example)
and the output change is the total variation distance to the original distribution (median over permutations).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import kendalltau as _scipy_kendalltau

from ptmlab.analysis.attention import LastLayerAttentionEdit, attentions, require_attentions, special_mask
from ptmlab.core.progress import progress
from ptmlab.data.batching import collate
from ptmlab.data.encode import Encoded
from ptmlab.models.loader import model_inputs
from ptmlab.models.structure import structure_of


def kendall_tau(a, b) -> float:
    """Kendall's tau-b of two score vectors (nan when either is constant or shorter than 2)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(_scipy_kendalltau(a, b).statistic)


def tvd(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Total variation distance between distributions along the last axis."""
    return 0.5 * (p - q).abs().sum(-1)


@dataclass
class ExampleExplanation:
    tokens: int
    tau_last_grad: float
    tau_last_loo: float
    tau_mean_grad: float
    tau_mean_loo: float
    tau_grad_loo: float
    permutation_tvd: float
    max_attention: float


def gradient_importance(model, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(L2 norm of d log p(pred) / d embedding per token [1, T], probabilities [1, C]) for a one-example batch."""
    emb = structure_of(model).encoder(model).get_submodule(structure_of(model).word_embeddings)
    store = {}

    def keep(module, inputs, output):
        output.retain_grad()
        store["e"] = output

    h = emb.register_forward_hook(keep)
    try:
        with torch.enable_grad():
            logits = model(**model_inputs(model, batch)).logits.float()
            logp = logits.log_softmax(-1)
            logp[0, int(logp.argmax(-1))].backward()
    finally:
        h.remove()
    model.zero_grad(set_to_none=True)
    return store["e"].grad.norm(dim=-1).detach(), logp.exp().detach()


@torch.no_grad()
def leave_one_out(model, ids: list[int], token_type: list[int] | None, positions: list[int],
                  probs: torch.Tensor) -> torch.Tensor:
    """TVD of the output when each of ``positions`` is removed from the input (one batch of variants)."""
    variants = [[t for j, t in enumerate(ids) if j != p] for p in positions]
    tts = [[t for j, t in enumerate(token_type) if j != p] for p in positions] if token_type else None
    enc = Encoded(variants, tts, None)
    batch = collate(enc, list(range(len(variants))), 0, pad_to=1)
    out = model(**model_inputs(model, batch)).logits.float().softmax(-1)
    return tvd(out, probs.expand_as(out))


class PermutedLastLayer(LastLayerAttentionEdit):
    """Context manager: the last layer's attention rows use keys permuted by ``perm`` (eager attention only)."""

    def __init__(self, model, perm: torch.Tensor):
        super().__init__(model)
        self.perm = perm

    def edit(self, output: tuple) -> tuple:
        weights, v = output[1], self.values()  # v: [B, H, T, d]
        b, _, t, _ = v.shape
        permuted = weights.clone()
        permuted[..., : len(self.perm)] = weights[..., self.perm]
        ctx = (permuted @ v).transpose(1, 2).reshape(b, t, -1)
        return (ctx.to(output[0].dtype), permuted, *output[2:])


def explain_example(model, enc: Encoded, i: int, special_ids: set[int], permutations: int,
                    rng: np.random.Generator) -> ExampleExplanation | None:
    """Taus and the permutation effect for example ``i`` (None when it has fewer than 3 plain tokens)."""
    batch = collate(enc, [i], 0, pad_to=1)
    ids = enc.input_ids[i]
    plain = [j for j in range(len(ids)) if not special_mask(torch.tensor(ids[j:j + 1]), special_ids).item()]
    if len(plain) < 3:
        return None
    att = attentions(model, batch)[:, 0]  # [L, H, T, T]
    cls_row = att[:, :, 0, :].mean(1)  # [L, T]
    last, mean = cls_row[-1, plain].numpy(), cls_row.mean(0)[plain].numpy()
    grad, probs = gradient_importance(model, batch)
    grad = grad[0, plain].numpy()
    tt = enc.token_type_ids[i] if enc.token_type_ids is not None else None
    loo = leave_one_out(model, ids, tt, plain, probs).numpy()
    changes = []
    with torch.no_grad():
        for _ in range(permutations):
            perm = torch.as_tensor(rng.permutation(len(ids)))
            with PermutedLastLayer(model, perm):
                out = model(**model_inputs(model, batch)).logits.float().softmax(-1)
            changes.append(float(tvd(out, probs)[0]))
    return ExampleExplanation(len(plain), kendall_tau(last, grad), kendall_tau(last, loo), kendall_tau(mean, grad),
                              kendall_tau(mean, loo), kendall_tau(grad, loo), float(np.median(changes)),
                              float(att[-1, :, 0, :].mean(0).max()))


def explain(model, enc: Encoded, special_ids: set[int], permutations: int = 10,
            seed: int = 0) -> list[ExampleExplanation]:
    """``explain_example`` for every example (one at a time: gradients and leave-one-out are per example)."""
    require_attentions(model)
    model.eval()
    rng = np.random.default_rng(seed)
    out = []
    for i in progress(range(len(enc)), desc="explanation"):
        r = explain_example(model, enc, i, special_ids, permutations, rng)
        if r is not None:
            out.append(r)
    return out
