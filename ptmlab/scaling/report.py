"""Read a sweep back: one row per run (finished, skipped or pending), the analysis, results.json and report.html."""

from __future__ import annotations

import math
from pathlib import Path

from ptmlab.core.io import atomic_write_json
from ptmlab.report.html import Report
from ptmlab.scaling.analysis import analyze, read_curve
from ptmlab.scaling.plots import frontier_plot, isoflop_plot, tokens_plot

COLUMNS = ["name", "size", "params", "budget", "seed", "status", "steps", "tokens", "flops", "eval_loss",
           "train_seconds", "tokens_per_second"]


def collect(out: Path, plan: dict) -> tuple[list[dict], dict[str, list[dict]]]:
    """Rows of every planned run and the learning curves of the finished ones."""
    from ptmlab.core.rundir import RunDir
    from ptmlab.scaling.sweep import is_locked, plan_specs, run_dir

    rows, curves = [], {}
    for spec in plan_specs(plan):
        row = {"name": spec.name, "size": spec.size, "params": spec.params, "budget": spec.budget,
               "seed": spec.seed, "planned_steps": spec.steps}
        d = run_dir(out, spec)
        if spec.skip:
            row["status"] = f"skipped: {spec.skip}"
        elif (d / "summary.json").is_file():
            s = RunDir(d).summary()
            m = s["metrics"]
            row.update(status="done", steps=s["steps"], tokens=m["tokens"], flops=m["flops"],
                       eval_loss=m["eval_loss"], initial_eval_loss=m["initial_eval_loss"],
                       unigram_entropy=s.get("corpus", {}).get("unigram_entropy"),
                       train_seconds=s["train_seconds"], tokens_per_second=m["tokens_per_second"])
            curves[spec.name] = read_curve(d)
        else:
            row["status"] = "running" if is_locked(out, spec) else "not started"
        rows.append(row)
    return rows, curves


def verdict_text(result: dict) -> str:
    q8, q19 = result["q8"], result["q19"]
    parts = [f"Q8 (the loss-optimal model size grows with the compute budget): {q8['verdict']} — {q8['reason']}."]
    g = q8.get("growth")
    if g:
        se = f" ± {g['a_stderr']:.2f}" if g.get("a_stderr") is not None else ""
        parts.append(f"N_opt ∝ C^{round(g['a'], 2) + 0.0:.2f}{se} over {g['n']} budgets.")
    for key, what in (("tokens", "fewer tokens"), ("seconds", "less wall-clock time on this machine")):
        v = q19[key]
        parts.append(f"Q19 (larger models reach a given loss in {what}): {v['verdict']} — {v['reason']}.")
    fc = result.get("fit_compute")
    if fc:
        parts.append(f"Loss vs compute: L ∝ C^-alpha_C with {_describe(fc, 'alpha_C')}.")
    fp = result.get("fit_params")
    if fp:
        parts.append(f"Loss vs parameters (each size's best loss): {_describe(fp, 'alpha_N')}.")
    return " ".join(parts)


def _describe(fit: dict, symbol: str) -> str:
    text = f"{symbol} = {fit['exponent']:.3f}"
    if fit.get("stderr") is not None and math.isfinite(fit["stderr"]):
        text += f" ± {fit['stderr']:.3f} (SE)"
    if fit.get("ci_low") is not None:
        text += f", bootstrap 95% CI [{fit['ci_low']:.3f}, {fit['ci_high']:.3f}]"
    return text + f", {fit['n']} points"


def write_sweep_report(out: Path, plan: dict, loss_tolerance: float, margin: float, workers: int = 1) -> dict:
    """Analyse the finished runs; write SWEEP/results.json and SWEEP/report.html; returns the results."""
    rows, curves = collect(out, plan)
    result = analyze(rows, curves, loss_tolerance, margin)
    verdict = verdict_text(result)
    pending = [r["name"] for r in rows if r["status"] in ("running", "not started")]
    results = {"rows": rows, "verdict": verdict, "pending": pending, "workers": workers,
               "loss_tolerance": loss_tolerance, "margin": margin, **result}
    atomic_write_json(out / "results.json", results)
    rep = Report(f"Scaling sweep: {len(rows)} runs")
    rep.heading("Verdicts").text(verdict)
    if pending:
        rep.text(f"{len(pending)} runs not finished yet ({', '.join(pending[:5])}...): rerun the same "
                 f"`ptmlab scale` command to complete the sweep.")
    if workers > 1:
        rep.text(f"{workers} workers trained runs side by side: wall-clock numbers shared the CPUs.")
    rep.heading("Runs").table(rows, COLUMNS)
    if result["curves"]:
        rep.figure(frontier_plot(result), "frontier", "held-out loss vs training FLOPs; black: the frontier")
        rep.figure(tokens_plot(result), "loss_vs_tokens", "held-out loss vs training tokens per size")
        rep.figure(isoflop_plot(result), "isoflop", "final loss vs size per budget (Q8)")
    rep.heading("Q19: cost to the target loss").table(result["q19"]["reach"])
    rep.text("FLOPs: 6 x non-embedding parameters per token plus 6 x layers x block x width (Kaplan et al. "
             "2020), from the pre-training engine; the vocabulary projection is not counted.")
    rep.write(out / "report.html")
    return results
