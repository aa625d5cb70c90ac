"""The end of a search: the finalists timed side by side, the winner chosen and scored once on the held-out part,
exported into OUT (ONNX or a transformers directory) with parity.json, a model card naming the recipe and the
numbers, summary.json and report.html (the accuracy-vs-speed front and a table of every trial)."""

from __future__ import annotations

import platform
import shutil
from pathlib import Path

import optuna

from ptmlab.core.io import atomic_write_json, atomic_write_text
from ptmlab.optimize.config import EXCLUDED, RUN_KEYS

CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
TABLE = ["trial", "structure", "backend", "status", "dev", "loss_points", "agreement", "speedup", "size_mb",
         "timed", "reason"]


def machine(threads: int) -> dict:
    """The thread count and the CPU features latency depends on."""
    import torch

    flags: set[str] = set()
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags") and not flags:
                flags = set(line.partition(":")[2].split())
            elif line.startswith("model name") and not model:
                model = line.partition(":")[2].strip()
    except OSError:
        pass
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # pragma: no cover
        capability = None
    import onnxruntime

    return {"cpu": model or platform.processor() or platform.machine(), "cores": len(_affinity()),
            "threads": threads, "cpu_features": [f for f in CPU_FLAGS if f in flags],
            "torch_cpu_capability": capability, "torch": torch.__version__, "onnxruntime": onnxruntime.__version__}


def _affinity() -> set:
    import os

    try:
        return os.sched_getaffinity(0)
    except AttributeError:  # pragma: no cover
        return set(range(os.cpu_count() or 1))


def trial_rows(study: optuna.Study) -> list[dict]:
    """Every trial's row, duplicates of an earlier pair left out, in trial order."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        if "duplicate_of" in t.user_attrs or "row" not in t.user_attrs:
            continue
        rows.append(dict(t.user_attrs["row"]))
    return sorted(rows, key=lambda r: r["trial"])


def front(rows: list[dict]) -> list[dict]:
    """Complete trials no other complete trial beats on both objective (lower) and dev score (higher)."""
    done = [r for r in rows if r.get("status") == "complete"]
    out = [r for r in done if not any(o is not r and o["objective"] <= r["objective"] and o["dev"] >= r["dev"]
                                      and (o["objective"], o["dev"]) != (r["objective"], r["dev"]) for o in done)]
    return sorted(out, key=lambda r: r["objective"])


def _speedups(ctx, row: dict) -> None:
    for b in ctx.batches:
        row[f"speedup_b{b}"] = round(1 / row["ratios"][str(b)], 2)
    row["speedup"] = round(1 / row["objective"], 2) if ctx.cfg.objective != "size" else None


def finish(ctx, pairs: list[tuple[str, str]]) -> dict:
    from ptmlab.core.rundir import RunDir
    from ptmlab.optimize.run import weights_mb

    cfg, out = ctx.cfg, ctx.out
    rows = trial_rows(ctx.study)
    feasible = sorted((r for r in rows if r.get("status") == "complete" and r.get("feasible")),
                      key=lambda r: (r["objective"], -r["dev"], r["trial"]))
    finalists = feasible[:cfg.finalists]
    print(f"timing the run and {len(finalists)} finalist(s) side by side ({cfg.latency_rounds} rounds, batch "
          f"{', '.join(map(str, ctx.batches))})", flush=True)
    reference = {"structure": "source", "backend": "torch-fp32", "dev": ctx.source_score, "loss_points": 0.0,
                 "feasible": True, "dev_metrics": ctx.source_metrics, "agreement": 1.0, "trial": None,
                 "size_mb": round(weights_mb(Path(cfg.model)), 2), "params": _params(ctx.source), "status": "source"}
    variants = [(reference, ctx.source, ctx.tokenizer)]
    built_of = {}
    for r in finalists:
        built, tok, folder = ctx.candidate(ctx.structure(r["structure"]), r["backend"], r["trial"], rebuild=False)
        built_of[r["trial"]] = (built, tok, folder)
        variants.append((r, built.model, tok))
    timed = ctx.time_rounds([(m, t) for _r, m, t in variants], cfg.latency_rounds, desc="side-by-side rounds")
    for (r, _m, _t), t in zip(variants, timed, strict=True):
        r.update(t)
    reference["objective"] = ctx.objective(reference)
    for r in finalists:
        r["objective"] = ctx.objective(r)
        r["timed"] = "side by side"
    for r in rows:
        if r.get("status") == "complete":
            _speedups(ctx, r)
    _speedups(ctx, reference)
    by_trial = {r["trial"]: r for r in finalists}
    for r in rows:  # the table shows the side-by-side numbers of the finalists
        if r["trial"] in by_trial:
            r.update(by_trial[r["trial"]])
    best = min(finalists, key=lambda r: (r["objective"], -r["dev"], r["trial"])) if finalists else None
    improves = best is not None and best["objective"] < reference["objective"]
    winner = best if improves else reference
    if winner is reference:
        from ptmlab.optimize.backends import Built

        built, tok = Built(ctx.source), ctx.tokenizer
    else:
        built, tok, _ = built_of[winner["trial"]]
    nearest = None
    if not improves:
        better = [r for r in rows if r.get("status") == "complete" and r["objective"] < reference["objective"]]
        nearest = min(better, key=lambda r: (r["loss_points"], r["objective"])) if better else None

    # the held-out part: read once, for the winner and the run itself
    held_src_logits = ctx.logits(ctx.source, ctx.tokenizer, ctx.held)
    held_src = ctx.metrics(held_src_logits, ctx.held)
    held_logits = ctx.logits(built.model, tok, ctx.held)
    held_win = ctx.metrics(held_logits, ctx.held)
    main = ctx.spec.main_metric
    held_loss = ctx.loss_points(held_win[main], held_src[main])
    held = {"part": ctx.held_name, "examples": len(ctx.held), "source": held_src, "winner": held_win,
            "loss_points": held_loss, "within_max_loss": held_loss <= cfg.max_loss + 1e-9}

    win_logits = ctx.logits(built.model, tok, ctx.dev)
    parity = ctx.compare(ctx.source_logits, win_logits, ctx.dev)
    parity_held = ctx.compare(held_src_logits, held_logits, ctx.held)
    parity = {**parity, "against": f"the run {cfg.model} (fp32 PyTorch), search part of dev",
              "held_out": {"examples": parity_held["examples"], "max_abs_logit_diff": parity_held["max_abs_logit_diff"],
                           "label_agreement": parity_held["label_agreement"]}}
    fmt = _export(ctx, winner, built, tok)
    run = RunDir(out)
    lat = {f"latency_b{b}_ms": winner.get(f"latency_b{b}_ms") for b in ctx.batches}
    search = {"budget_s": ctx.deadline_budget, "elapsed_s": round(float(ctx.study.user_attrs.get("elapsed_s", 0)), 1),
              "candidates": len(pairs), "trials": len(rows),
              "complete": sum(r.get("status") == "complete" for r in rows),
              "pruned": sum(r.get("status") == "pruned" for r in rows),
              "over_budget": sum(r.get("status") == "over budget" for r in rows),
              "failed": sum(r.get("status") == "failed" for r in rows), "sampler": cfg.sampler,
              "builds": ctx.study.user_attrs.get("builds") or []}
    summary = {"title": "ptmlab optimize", "task": ctx.spec.name, "model": str(cfg.model), "objective": cfg.objective,
               "max_loss": cfg.max_loss, "batches": list(ctx.batches), "main_metric": main,
               "source": {**reference, "dev": ctx.source_score}, "target_dev": round(ctx.source_score -
                                                                                       cfg.max_loss / ctx.scale, 4),
               "winner": {k: v for k, v in winner.items() if k != "dev_metrics"}, "recipe": recipe(winner),
               "target_met": improves, "nearest": nearest, "held_out": held, "metrics": winner.get("dev_metrics"),
               **lat, "export": fmt, "parity": parity, "machine": machine(ctx.threads), "search": search,
               "search_part": {"examples": len(ctx.dev)}, "notes": ctx.notes, "left_out": ctx.left_out, "trials": rows,
               "front": [r["trial"] for r in front(rows)]}
    if ctx.held_name == "test split":
        summary["test_metrics"] = held_win
    atomic_write_json(out / "parity.json", parity)
    run.write_summary(summary, data=ctx.data)
    _report(ctx, summary, rows, reference, winner)
    _card(ctx, summary, fmt, parity)
    _print(ctx, summary)
    return summary


def _params(model) -> int:
    from ptmlab.models.latency import parameter_count

    return parameter_count(model)


def recipe(row: dict) -> str:
    from ptmlab.optimize.backends import BACKENDS

    s = row["structure"]
    what = {"source": "the run itself", "vocab": "the run with its vocabulary pruned to the task's texts"}.get(s)
    if what is None:
        kind = s.partition(":")[0]
        what = {"layers": f"a student ({s}) distilled from the run with soft_ce",
                "static": f"a static-embedding student ({s}: a token table, mean-pooled, a linear head) distilled "
                          f"from the run with soft_ce",
                "shrink": f"a TinyBERT-style smaller model ({s}) sliced from the run and distilled with soft_ce",
                "prune": f"the run pruned ({s}) and recovered by distillation from it"}[kind]
    return f"{what}, run on {row['backend']} ({BACKENDS.help(row['backend'])})"


def _export(ctx, winner: dict, built, tok) -> str:
    """The winner into OUT: model.onnx + config.json + tokenizer, or a transformers directory."""
    from ptmlab.models.loader import save_model
    from ptmlab.optimize.backends import Bf16Model

    out = ctx.out
    for old in ("model.onnx", "model.safetensors"):
        (out / old).unlink(missing_ok=True)
    if built.onnx is not None:
        import copy

        from ptmlab.models.onnx import RUNTIME_KEY
        from ptmlab.optimize.backends import OPENVINO_BACKENDS

        shutil.copyfile(built.onnx, out / "model.onnx")
        config = copy.deepcopy(built.model.config)
        if winner["backend"] in OPENVINO_BACKENDS:  # loaded on the runtime it was measured on
            setattr(config, RUNTIME_KEY, "openvino")
        config.save_pretrained(out)
        tok.save_pretrained(out)
        if winner["backend"] in OPENVINO_BACKENDS:
            return winner["backend"]
        return "onnx-int8" if "int8" in winner["backend"] else "onnx"
    model = built.model.model if isinstance(built.model, Bf16Model) else built.model
    save_model(model, tok, out)
    return "transformers"


def _report(ctx, summary: dict, rows: list[dict], reference: dict, winner: dict) -> None:
    from ptmlab.report.html import Report, new_figure

    cfg = ctx.cfg
    size = cfg.objective == "size"
    done = [r for r in rows if r.get("status") == "complete"]
    fr = front(rows)

    def x(r):
        return r["size_mb"] if size else 1 / r["objective"]

    fig, ax = new_figure(7.0, 4.2)
    ok = [r for r in done if r.get("feasible")]
    bad = [r for r in done if not r.get("feasible")]
    ax.scatter([x(r) for r in ok], [r["dev"] for r in ok], s=22, color="tab:blue", label="within --max-loss")
    ax.scatter([x(r) for r in bad], [r["dev"] for r in bad], s=22, color="tab:gray", label="outside --max-loss")
    ax.plot([x(r) for r in fr], [r["dev"] for r in fr], color="tab:red", lw=1, label="front")
    ax.scatter([x(reference)], [reference["dev"]], marker="*", s=160, color="black", label="source (fp32 PyTorch)",
               zorder=5)
    if winner is not reference:
        ax.scatter([x(winner)], [winner["dev"]], marker="D", s=60, facecolors="none", edgecolors="tab:green", lw=2,
                   label="winner", zorder=6)
    ax.axhline(summary["target_dev"], color="tab:orange", lw=0.8, ls="--", label=f"-{cfg.max_loss:g} points")
    for r in done:
        ax.annotate(str(r["trial"]), (x(r), r["dev"]), fontsize=6, textcoords="offset points", xytext=(2, 2))
    ax.set_xlabel("MB on disk" if size else ("speed-up over the run (geometric mean over batch sizes "
                                             f"{', '.join(map(str, ctx.batches))})" if cfg.objective == "latency"
                                             else f"throughput gain at batch {max(ctx.batches)}"))
    ax.set_ylabel(f"dev {ctx.spec.main_metric} (search part)")
    ax.legend(fontsize=7)
    rep = Report("ptmlab optimize")
    rep.heading("Result")
    for line in _lines(ctx, summary):
        rep.text(line)
    rep.figure(fig, "front", "every complete trial (numbered), the front of trials nothing beats on both speed and "
                             "dev score, the source model (star) and the winner")
    cols = TABLE[:7] + [f"latency_b{b}_ms" for b in ctx.batches] + [f"speedup_b{b}" for b in ctx.batches] + TABLE[7:]
    rep.heading("Every trial")
    rep.table([reference] + rows, cols)
    rep.text("speed-ups are against the run in fp32 PyTorch timed in the same round-robin rounds; finalists were timed "
             "again side by side at the end ('side by side'), the others while the search ran ('search'). dev is the "
             "search part; the held-out part was read once, for the winner and the run.")
    m = summary["machine"]
    rep.text(f"Machine: {m['cpu']}, {m['cores']} core(s), {m['threads']} thread(s), CPU features "
             f"{', '.join(m['cpu_features']) or 'none listed'}, torch {m['torch']} ({m['torch_cpu_capability']}), "
             f"onnxruntime {m['onnxruntime']}.")
    rep.write(ctx.out / "report.html")


def _lines(ctx, summary: dict) -> list[str]:
    cfg, w, held = ctx.cfg, summary["winner"], summary["held_out"]
    main = ctx.spec.main_metric
    lines = [f"Winner: {summary['recipe']}; dev {main} {w['dev']:.4f} against the run's {ctx.source_score:.4f} "
             f"({w['loss_points']:+.2f} points lost, --max-loss {cfg.max_loss:g})"
             + (f", {w['speedup']:.2f}x faster" if w.get("speedup") else "")
             + "".join(f", batch {b}: {w.get(f'latency_b{b}_ms')} ms" for b in ctx.batches)
             + f", {w['size_mb']} MB."]
    if not summary["target_met"]:
        near = summary["nearest"]
        lines.append("Target not met: no candidate beats the run itself within --max-loss "
                     f"{cfg.max_loss:g} points, so the winner is the run unchanged."
                     + (f" Nearest: trial {near['trial']}, {near['structure']} on {near['backend']}, "
                        f"{near['loss_points']:+.2f} points lost, {ctx.describe_value(near['objective'])}."
                        if near else " No trial was faster than the run."))
    verdict = "within" if held["within_max_loss"] else "OUTSIDE"
    lines.append(f"Held-out part ({held['part']}, {held['examples']} examples, read once): winner "
                 f"{held['winner'][main]:.4f}, run {held['source'][main]:.4f}: {held['loss_points']:+.2f} points lost, "
                 f"{verdict} --max-loss {cfg.max_loss:g}.")
    for item in summary.get("left_out") or []:
        lines.append(f"Left out of the search space: {item['structure']}: {item['reason']}.")
    s = summary["search"]
    lines.append(f"Search: {s['trials']} trials of {s['candidates']} candidates ({s['complete']} complete, "
                 f"{s['pruned']} stopped early, {s.get('over_budget', 0)} not started for lack of time, "
                 f"{s['failed']} failed) in {s['elapsed_s']:.0f} s of a "
                 f"{s['budget_s']:.0f} s budget; sampler {s['sampler']}; objective {cfg.objective}.")
    return lines


def _card(ctx, summary: dict, fmt: str, parity: dict) -> None:
    from ptmlab.core.rundir import RunDir
    from ptmlab.report.model_card import _command_line, model_card

    text = model_card(ctx.out, export={"format": fmt, "output": str(ctx.out), "parity": parity})
    cfg = RunDir(ctx.out).read_config()
    flags = {k: v for k, v in cfg.items() if k not in EXCLUDED and k not in RUN_KEYS}  # the run's, recorded for
    text = text.replace(_command_line(cfg), _command_line(flags))  # serve and predict: not flags of optimize
    w = summary["winner"]
    rows = [("structure", w["structure"]), ("backend", w["backend"]),
            (f"dev {ctx.spec.main_metric} (search part, {summary['search_part']['examples']})", f"{w['dev']:.4f}"),
            (f"the run's dev {ctx.spec.main_metric}", f"{ctx.source_score:.4f}"),
            ("points lost (dev)", f"{w['loss_points']:+.2f}"),
            (f"held-out {ctx.spec.main_metric} ({summary['held_out']['part']})",
             f"{summary['held_out']['winner'][ctx.spec.main_metric]:.4f} (run "
             f"{summary['held_out']['source'][ctx.spec.main_metric]:.4f})"),
            *[(f"latency, batch {b}", f"{w.get(f'latency_b{b}_ms')} ms ({w.get(f'speedup_b{b}')}x)")
              for b in ctx.batches],
            ("size on disk", f"{w['size_mb']} MB"),
            ("machine", f"{summary['machine']['threads']} thread(s), {', '.join(summary['machine']['cpu_features'])}")]
    extra = ["## Recipe found by ptmlab optimize", "", summary["recipe"] + ".", "",
             "| | |", "|---|---|", *[f"| {k} | {v} |" for k, v in rows], "",
             *[line + "" for line in _lines(ctx, summary)], ""]
    if w["backend"] == "torch-bf16":
        extra += ["The weights are stored in fp32; run them as measured with `--precision bf16` (`ptmlab serve`, "
                  "`ptmlab predict`, `ptmlab evaluate`).", ""]
    atomic_write_text(ctx.out / "README.md", text.rstrip() + "\n\n" + "\n".join(extra))


def _print(ctx, summary: dict) -> None:
    from ptmlab.report.table import print_table

    rows = [r for r in summary["trials"] if r.get("status") == "complete"]
    cols = ["trial", "structure", "backend", "dev", "loss_points", "speedup", "size_mb", "timed"]
    print_table(sorted(rows, key=lambda r: r["objective"])[:15], cols)
    for line in _lines(ctx, summary):
        print(line)
    print(f"report: {ctx.out / 'report.html'}")
