"""The analyses behind ``ptmlab analyze``: each loads its inputs, computes, and writes one output directory.

Every function validates its inputs before ``create_run()`` makes the output directory, so a bad input leaves
nothing behind.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from ptmlab.analysis import plots
from ptmlab.analysis.taskdata import load_analysis_input
from ptmlab.core.io import atomic_write_json
from ptmlab.core.registry import Registry
from ptmlab.report.html import Report

ANALYSES: Registry[Callable] = Registry("analysis")


def _special_ids(tokenizer) -> set[int]:
    return set(tokenizer.all_special_ids)


def _ablation(unit: str, model_name: str, cfg, create_run) -> dict:
    """Every head (``unit="head"``) or layer removed / made uniform in turn, one table and report."""
    from ptmlab.analysis.ablation import head_ablation, layer_ablation
    from ptmlab.analysis.reports import write_ablation
    from ptmlab.train.evaluate import resolve_precision

    ablate = {"head": head_ablation, "layer": layer_ablation}[unit]
    inp = load_analysis_input(model_name, cfg)
    run = create_run()
    precision = resolve_precision(cfg.precision)
    table = ablate(inp.model, inp.enc, inp.spec, inp.pad_id, cfg.batch_size, precision)
    return write_ablation(run, table, unit, f"{unit.capitalize()} ablation: {model_name} on {inp.spec.name}",
                          {"task": inp.spec.name, "examples": len(inp.enc), "precision": precision})


@ANALYSES.register("heads", help="every head removed / made uniform in turn")
def heads(model_name: str, cfg, create_run) -> dict:
    return _ablation("head", model_name, cfg, create_run)


@ANALYSES.register("layers", help="every layer removed / made uniform in turn")
def layers(model_name: str, cfg, create_run) -> dict:
    return _ablation("layer", model_name, cfg, create_run)


@ANALYSES.register("attention", help="attention maps, entropy and pattern types")
def attention(model_name: str, cfg, create_run) -> dict:
    from ptmlab.analysis.attention import PATTERNS, attention_stats, example_maps

    inp = load_analysis_input(model_name, cfg, attn_implementation="eager")
    run = create_run()
    stats = attention_stats(inp.model, inp.enc, inp.pad_id, _special_ids(inp.tokenizer), min(cfg.batch_size, 64))
    types = stats.head_types()
    shares = stats.layer_shares()
    rows = [{"layer": li, "head": h, "entropy": float(stats.entropy[li, h]), "type": types[li][h],
             "vertical_mass": float(stats.features[li, h, 0]), "diagonal_mass": float(stats.features[li, h, 1]),
             "block_mass": float(stats.features[li, h, 2])}
            for li in range(len(types)) for h in range(len(types[li]))]
    atomic_write_json(run.file("heads.json"), rows)
    summary = {"task": inp.spec.name, "examples": len(inp.enc), "mean_entropy": float(stats.entropy.mean()),
               "head_types": {p: sum(t == p for row in types for t in row) for p in PATTERNS},
               "layer_shares": {p: [round(float(x), 4) for x in shares[:, k]] for k, p in enumerate(PATTERNS)}}
    run.write_summary(summary)
    rep = Report(f"Attention: {model_name} on {inp.spec.name}")
    rep.text("Pattern rule (per map): v = mass on [CLS]/[SEP] columns, d = mass within one position of the "
             "diagonal, b = other mass inside the query's segment; vertical v>=0.5,d<0.2; diagonal d>=0.5,v<0.2; "
             "vertical+diagonal v,d>=0.2 and v+d>=0.6; block b>=0.5; heterogeneous otherwise.")
    rep.figure(plots.stacked_shares(shares, PATTERNS, "attention pattern types per layer"), "pattern_shares",
               "share of attention maps of each type per layer")
    rep.figure(plots.heatmap(stats.entropy, "mean attention entropy (nats)", cmap="viridis", centre=False),
               "entropy", "entropy per head")
    n = cfg.examples
    texts = inp.split.text[:n]
    for k, (tokens, att) in enumerate(example_maps(inp.model, inp.tokenizer, texts, cfg.max_length)):
        # the lowest-entropy head of the last layer, and the head mean of the last layer
        last = att[-1]
        head = int(np.argmin(stats.entropy[-1]))
        rep.figure(plots.attention_map(tokens, last[head], f"example {k}: last layer, head {head}"),
                   f"example{k}_head{head}", texts[k][:120])
        rep.figure(plots.attention_map(tokens, last.mean(0), f"example {k}: last layer, mean of heads"),
                   f"example{k}_mean", texts[k][:120])
    rep.heading("Heads").table(rows)
    rep.write(run.file("report.html"))
    return summary


@ANALYSES.register("explanation", help="attention vs gradient and leave-one-out importance")
def explanation(model_name: str, cfg, create_run) -> dict:
    from dataclasses import asdict

    from ptmlab.analysis.explanation import explain

    inp = load_analysis_input(model_name, cfg, attn_implementation="eager")
    run = create_run()
    results = explain(inp.model, inp.enc, _special_ids(inp.tokenizer), cfg.permutations, cfg.seed)
    rows = [asdict(r) for r in results]
    atomic_write_json(run.file("examples.json"), rows)

    def med(key):
        vals = [r[key] for r in rows if np.isfinite(r[key])]
        return round(float(np.median(vals)), 4) if vals else None

    keys = ("tau_last_grad", "tau_last_loo", "tau_mean_grad", "tau_mean_loo", "tau_grad_loo", "permutation_tvd")
    summary = {"task": inp.spec.name, "examples": len(rows), "permutations": cfg.permutations,
               **{f"median_{k}": med(k) for k in keys},
               "share_permutation_tvd_below_0.05": round(float(np.mean([r["permutation_tvd"] < 0.05
                                                                       for r in rows])), 4) if rows else None}
    run.write_summary(summary)
    rep = Report(f"Attention vs importance: {model_name} on {inp.spec.name}")
    rep.text("Kendall tau-b between [CLS] attention (last layer / mean of layers, averaged over heads) and "
             "gradient-norm or leave-one-out (TVD) token importance; the permutation test shuffles the last "
             "layer's attention and measures the output's total variation distance.")
    rep.table([{"statistic": k, "median": summary[f"median_{k}"]} for k in keys])
    rep.figure(plots.histograms({k: [r[k] for r in rows] for k in keys[:4]}, "Kendall tau",
                                "attention vs importance"), "kendall_tau", "distribution of Kendall tau over examples")
    rep.figure(plots.scatter([r["max_attention"] for r in rows], [r["permutation_tvd"] for r in rows],
                             "max [CLS] attention (last layer)", "median output TVD after permutation",
                             "permutation counterfactual"), "permutation", "output change when attention is permuted")
    rep.write(run.file("report.html"))
    return summary


def headline(kind: str, s: dict) -> str:
    if kind in ("heads", "layers"):
        return (f"{s['units']} {kind}: intact {s['metric']} {s['base']:.4f}; removal helps {s['removed_helps_count']}"
                f" (best {s['removed_best_delta']:+.4f}, worst {s['removed_worst_delta']:+.4f}); uniform attention "
                f"helps {s['uniform_helps_count']}")
    if kind == "attention":
        return f"mean entropy {s['mean_entropy']:.3f}; head types {s['head_types']}"
    return (f"{s['examples']} examples: median tau(last attention, gradient) {s['median_tau_last_grad']}, "
            f"(last attention, leave-one-out) {s['median_tau_last_loo']}; median TVD after permutation "
            f"{s['median_permutation_tvd']}")


# ------------------------------------------------------------------------------------------------------- anomaly
def fit_or_load(enc, cfg, model_name: str):
    """The saved Gaussians at ``cfg.gaussians`` when present, else fitted on the reference corpus."""
    from ptmlab.analysis.anomaly import default_reference, reference_sentences
    from ptmlab.analysis.gaussian import LayerGaussians

    if cfg.gaussians and Path(cfg.gaussians).is_file():
        g = LayerGaussians.load(cfg.gaussians)
        enc.check(g)
        return g, False
    source = cfg.reference or default_reference()
    sents = reference_sentences(source, cfg.max_sentences, cfg.seed)
    return enc.fit(sents, cfg.covariance, {"model": model_name, "reference": source}), True


def run_anomaly_analysis(cfg, create_run) -> dict:
    from ptmlab.analysis.anomaly import Encoder, blimp_results, load_anomaly_sets, load_blimp, surprisal_gaps

    pairs = load_blimp(cfg.blimp, cfg.per_phenomenon or None) if cfg.blimp else []
    sets = load_anomaly_sets(cfg.anomaly_sets) if cfg.anomaly_sets else {}
    enc = Encoder.load(cfg.model, include_special=cfg.include_special, center=cfg.center, batch_size=cfg.batch_size)
    g, fitted = fit_or_load(enc, cfg, cfg.model)
    run = create_run()
    g.save(run.file("gaussians.safetensors"))
    if fitted and cfg.gaussians:
        g.save(cfg.gaussians)
    summary: dict = {"model": cfg.model, "covariance": g.covariance, "reference_tokens": g.tokens,
                     "reference": g.meta.get("reference"), "include_special": cfg.include_special, "center": cfg.center,
                     "layers": enc.num_layers}
    rep = Report(f"Layer-wise anomaly detection: {cfg.model}")
    rep.text(f"One Gaussian per layer ({g.covariance} covariance) on {g.tokens} token vectors of "
             f"{g.meta.get('reference')}; a sentence scores the sum of its tokens' log-likelihoods.")
    if pairs:
        import time

        t0 = time.perf_counter()
        good = enc.scores(g, [p.good for p in pairs])
        bad = enc.scores(g, [p.bad for p in pairs])
        res = blimp_results(good, bad, pairs)
        res["pairs_per_second"] = round(len(pairs) / (time.perf_counter() - t0), 1)
        summary.update(res)
        rep.heading("BLiMP").text(f"best layer {res['best_layer']}: accuracy {res['best_accuracy']:.4f} on "
                                  f"{res['pairs']} pairs")
        rep.figure(plots.layer_lines({"all": res["per_layer"], **res["per_field"]}, "accuracy",
                                     "BLiMP accuracy per layer", hline=0.5), "blimp_layers",
                   "accuracy per layer, overall and per field")
        terms = res["per_term"]
        rep.figure(plots.heatmap(np.array(list(terms.values())), "accuracy per linguistic term", xlabel="layer",
                                 ylabel="", cmap="viridis", centre=False), "blimp_terms",
                   ", ".join(f"{i}: {t}" for i, t in enumerate(terms)))
        rep.table([{"field": k, **{f"layer {i}": v for i, v in enumerate(vals)}} for k, vals in
                   res["per_field"].items()])
        for k, p in enumerate(pairs[:: max(1, len(pairs) // max(cfg.heatmap_pairs, 1))][:cfg.heatmap_pairs]):
            for tag, sent in (("good", p.good), ("bad", p.bad)):
                tokens, s = enc.token_surprisal(g, sent)
                rep.figure(plots.heatmap(s, f"{tag}: {sent}", xlabel="token", cmap="magma", centre=False,
                                         annotate=False, xticks=tokens), f"surprisal_{k}_{tag}",
                           f"token surprisal per layer ({p.phenomenon})")
    if sets:
        gaps = surprisal_gaps(enc, g, sets)
        summary["psycholinguistic"] = gaps
        rep.heading("Psycholinguistic sets")
        rep.figure(plots.layer_lines({f"{r['set']}: {r['variant']}": r["gap"] for r in gaps}, "surprisal gap",
                                     "surprisal gap per layer", hline=0.0), "surprisal_gaps",
                   "mean (variant - correct) surprisal over its std")
        rep.table([{"set": r["set"], "variant": r["variant"], "pairs": r["pairs"],
                    **{f"layer {i}": v for i, v in enumerate(r["gap"])}} for r in gaps])
    run.write_summary(summary)
    rep.write(run.file("report.html"))
    return summary

