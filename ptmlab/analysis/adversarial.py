"""Adversarial attention (Jain & Wallace, NAACL 2019, section 4): per example, how different can the attention be
while the prediction stays (almost) the same?

Which attention: the [CLS] query row of every head of the LAST layer. In a BERT-style classifier that row is the only
part of the last layer's attention the output depends on (the pooler and the head read the [CLS] vector), so it is
the attention an explanation would point at. For each example the search keeps free logits ``z`` [heads, tokens]
(real tokens only), starts from the model's own attention plus Gaussian noise, and runs Adam for ``steps`` steps on

    loss = - mean over heads JSD(softmax(z_h), a_h)  +  penalty * max(0, TVD(p(z), p) - epsilon) / epsilon

where ``a_h`` is the model's own row, ``p`` its output distribution and ``p(z)`` the output with the row replaced
(injected by a forward hook on the last self-attention module: eager attention only). The result per example is the
attention of largest mean JSD among the iterates whose output TVD is at most ``epsilon`` (the model's own attention,
JSD 0, when no iterate is within tolerance). JSD uses natural logarithms, so it lies in [0, ln 2 ~ 0.693].

Threshold: an example "has an adversarial attention" when that mean JSD is at least ``JSD_THRESHOLD`` = 0.5 nats
(72% of the maximum; Jain & Wallace plot max JSD per example and call values near the 0.69 ceiling "very different").
Examples are optimised in batches: the loss is a sum over examples and Adam is elementwise, so each example's search
is independent of its batch mates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ptmlab.analysis.attention import LastLayerAttentionEdit, require_attentions
from ptmlab.analysis.runs import ANALYSES
from ptmlab.core.errors import PtmlabError
from ptmlab.core.progress import progress
from ptmlab.data.batching import collate
from ptmlab.data.encode import Encoded
from ptmlab.models.loader import model_inputs

JSD_THRESHOLD = 0.5  # nats; max is ln 2
EPS = 1e-12


def jsd(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence (natural log) between distributions along the last axis: in [0, ln 2]."""
    m = 0.5 * (p + q)

    def kl(a, b):
        return (a * (torch.log(a + EPS) - torch.log(b + EPS))).sum(-1)

    return (0.5 * kl(p, m) + 0.5 * kl(q, m)).clamp(0.0, math.log(2))


def tvd(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Total variation distance along the last axis."""
    return 0.5 * (p - q).abs().sum(-1)


@dataclass
class AdversarialResult:
    """Per example: the best adversarial [CLS] rows within tolerance and how far they are from the model's own."""

    jsd: np.ndarray            # [N] mean over heads of JSD(adversarial row, own row)
    max_head_jsd: np.ndarray   # [N] the largest per-head JSD of that attention
    tvd: np.ndarray            # [N] output TVD under that attention (<= epsilon)
    own: list[np.ndarray]      # per example [heads, tokens]: the model's [CLS] rows (last layer)
    adversarial: list[np.ndarray]  # per example [heads, tokens]: the adversarial rows
    epsilon: float

    def share_above(self, threshold: float = JSD_THRESHOLD) -> float:
        return float((self.jsd >= threshold).mean()) if len(self.jsd) else math.nan


class LastLayerCLSRow(LastLayerAttentionEdit):
    """Context manager: the last layer's [CLS] attention row (every head) is ``self.weights`` [B, heads, T] when
    set, and its context vector is recomputed from it; the other rows are the model's own. Records the model's own
    row in ``self.own`` (eager attention only: the module must return its weights)."""

    def __init__(self, model):
        super().__init__(model)
        self.weights: torch.Tensor | None = None
        self.own: torch.Tensor | None = None

    def edit(self, output: tuple) -> tuple:
        ctx, weights = output[0], output[1]
        if weights is None:
            raise PtmlabError("the last layer returned no attention weights: load the model with "
                              "attn_implementation='eager'")
        self.own = weights[:, :, 0, :].detach()
        if self.weights is None:
            return output
        v = self.values()  # [B, H, T, d]
        b, width = v.shape[0], ctx.shape[-1]
        row = (self.weights.unsqueeze(2).to(v.dtype) @ v).squeeze(2).reshape(b, 1, width)  # [B, 1, H*d]
        new = torch.cat([row.to(ctx.dtype), ctx[:, 1:]], dim=1)
        full = weights.clone()
        full[:, :, 0, :] = self.weights.to(full.dtype)
        return (new, full, *output[2:])


def _search_batch(model, batch: dict, mask: torch.Tensor, epsilon: float, steps: int, lr: float, penalty: float,
                  noise: float, generator: torch.Generator):
    with LastLayerCLSRow(model) as hook, torch.no_grad():
        p0 = model(**batch).logits.float().softmax(-1)
        own = hook.own.float()  # [B, H, T]
    keymask = mask[:, None, :].bool()  # [B, 1, T]
    start = torch.log(own.clamp_min(EPS)) + noise * torch.randn(own.shape, generator=generator)
    z = start.masked_fill(~keymask, -1e4).requires_grad_(True)
    opt = torch.optim.Adam([z], lr=lr)
    best_jsd = torch.zeros(own.shape[0])
    best_att = own.clone()
    best_tvd = torch.zeros(own.shape[0])
    with LastLayerCLSRow(model) as hook:
        for _ in range(steps + 1):
            att = z.masked_fill(~keymask, -1e4).softmax(-1)
            hook.weights = att
            p = model(**batch).logits.float().softmax(-1)
            div = jsd(att, own).mean(-1)  # [B]
            change = tvd(p, p0)  # [B]
            with torch.no_grad():
                ok = (change <= epsilon) & (div > best_jsd)
                best_jsd = torch.where(ok, div, best_jsd)
                best_tvd = torch.where(ok, change, best_tvd)
                best_att[ok] = att[ok].detach()
            loss = (-div + penalty * torch.relu(change - epsilon) / epsilon).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.zero_grad(set_to_none=True)
    return own, best_att, best_tvd


def adversarial_attention(model, enc: Encoded, pad_id: int = 0, epsilon: float = 0.01, steps: int = 100,
                          lr: float = 0.1, penalty: float = 10.0, noise: float = 1.0, batch_size: int = 16,
                          seed: int = 0) -> AdversarialResult:
    """The search of the module docstring for every example of ``enc`` (a classifier loaded with eager attention)."""
    require_attentions(model)
    if getattr(model.config, "problem_type", None) == "regression" or model.config.num_labels < 2:
        raise PtmlabError("adversarial attention compares output distributions: use a classification model, not "
                          "a regression one")
    if not 0 < epsilon < 1:
        raise PtmlabError(f"--epsilon {epsilon} must be in (0, 1): it is the largest output TVD allowed")
    if steps < 1:
        raise PtmlabError(f"--adv-steps {steps} must be >= 1")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    g = torch.Generator().manual_seed(seed)
    jsds, heads_max, tvds, owns, advs = [], [], [], [], []
    order = list(range(len(enc)))
    for start in progress(range(0, len(order), batch_size), desc="adversarial attention"):
        idx = order[start:start + batch_size]
        batch = collate(enc, idx, pad_id)
        mask = batch["attention_mask"]
        own, adv, change = _search_batch(model, model_inputs(model, batch), mask, epsilon, steps, lr, penalty,
                                         noise, g)
        for k in range(len(idx)):
            n = int(mask[k].sum())
            o, a = own[k, :, :n], adv[k, :, :n]
            per_head = jsd(a, o)
            jsds.append(float(per_head.mean()))
            heads_max.append(float(per_head.max()))
            tvds.append(float(change[k]))
            owns.append(o.numpy())
            advs.append(a.numpy())
    return AdversarialResult(np.array(jsds), np.array(heads_max), np.array(tvds), owns, advs, epsilon)


def summarize(res: AdversarialResult, threshold: float = JSD_THRESHOLD) -> dict:
    """Share of examples with an adversarial attention (mean JSD >= threshold) and the max-JSD distribution."""
    q = np.quantile(res.jsd, [0.1, 0.25, 0.5, 0.75, 0.9]) if len(res.jsd) else [math.nan] * 5
    return {"examples": len(res.jsd), "epsilon": res.epsilon, "jsd_threshold": threshold,
            "share_jsd_at_least_threshold": round(res.share_above(threshold), 4),
            "mean_jsd": round(float(res.jsd.mean()), 4) if len(res.jsd) else None,
            **{f"jsd_q{int(p * 100)}": round(float(x), 4) for p, x in zip((0.1, 0.25, 0.5, 0.75, 0.9), q,
                                                                             strict=True)},
            "max_output_tvd": round(float(res.tvd.max()), 5) if len(res.tvd) else None}


@ANALYSES.register("adversarial-attention", help="attention as different as possible with the same output")
def write_adversarial_analysis(model_name: str, cfg, create_run) -> dict:
    """``ptmlab analyze adversarial-attention``: the search on the split, summary.json, examples.json, report."""
    from ptmlab.analysis import plots
    from ptmlab.analysis.taskdata import load_analysis_input
    from ptmlab.core.io import atomic_write_json
    from ptmlab.report.html import Report

    inp = load_analysis_input(model_name, cfg, attn_implementation="eager")
    run = create_run()
    res = adversarial_attention(inp.model, inp.enc, inp.pad_id, cfg.epsilon, cfg.adv_steps,
                                batch_size=min(cfg.batch_size, 32), seed=cfg.seed)
    atomic_write_json(run.file("examples.json"), [{"jsd": float(j), "max_head_jsd": float(m), "output_tvd": float(t)}
                                                  for j, m, t in zip(res.jsd, res.max_head_jsd, res.tvd,
                                                                     strict=True)])
    summary = {"task": inp.spec.name, "steps": cfg.adv_steps, **summarize(res)}
    summary["headline"] = (f"{summary['examples']} examples: {summary['share_jsd_at_least_threshold']:.0%} have a "
                           f"last-layer [CLS] attention with mean JSD >= {JSD_THRESHOLD} within output TVD "
                           f"{res.epsilon:g}; median max JSD {summary['jsd_q50']}")
    run.write_summary(summary)
    rep = Report(f"Adversarial attention: {model_name} on {inp.spec.name}")
    rep.text(f"Per example, Adam ({cfg.adv_steps} steps) searches the last layer's [CLS] attention rows (all heads) "
             f"for the largest mean Jensen-Shannon divergence (nats, max ln 2) from the model's own, keeping the "
             f"output within total variation {res.epsilon:g} (Jain & Wallace 2019, section 4).")
    rep.table([{"statistic": k, "value": v} for k, v in summary.items() if k != "headline"])
    rep.figure(plots.histograms({"max JSD within tolerance": list(res.jsd)}, "mean JSD over heads (nats)",
                                "adversarial attention"), "adversarial_jsd", "distribution of the largest JSD found")
    rep.write(run.file("report.html"))
    return summary
