"""The demo pipeline: fine-tune on the built-in tweets task, then every registered stage adds a model variant
(distilled, pruned, quantized...) to one table and plot in the demo report.

A stage is ``fn(ctx: DemoContext) -> list[dict]`` registered in ``DEMO_STAGES``; each returned row describes
one variant with the keys of ``VARIANT_COLUMNS``. Stages run in registration order after fine-tuning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ptmlab.core.registry import Registry

DEMO_STAGES: Registry = Registry("demo stage")
DEMO_STAGE_MODULES: list[str] = [  # modules that register stages (added by the distillation/compression work)
    "ptmlab.distill.demo_stage",
    "ptmlab.compress.demo_stages",
]
VARIANT_COLUMNS = ["variant", "accuracy", "macro_f1", "params", "size_mb", "latency_b1_ms", "latency_b32_ms",
                   "speedup_b32"]


@dataclass
class DemoContext:
    config: object  # DemoConfig
    run_dir: Path  # the fine-tuned run
    summary: dict
    variants: list[dict] = field(default_factory=list)
    baseline_b32: float | None = None  # batch-32 latency of the fine-tuned model, for speed-ups

    @property
    def output(self) -> Path:
        return self.run_dir


def variant_row(name: str, model, tokenizer, metrics: dict, texts: list[str], model_dir: Path | None = None,
                baseline_b32: float | None = None) -> dict:
    """Measure one model variant: metrics, parameters, size, batch-1 and batch-32 latency."""
    from ptmlab.models.latency import measure_latency, parameter_count, size_on_disk_mb

    b1 = measure_latency(model, tokenizer, texts, 1, repeats=10)
    b32 = measure_latency(model, tokenizer, texts, 32, repeats=5)
    row = {"variant": name, **{k: round(v, 4) for k, v in metrics.items()}, "params": parameter_count(model) or None,
           "size_mb": round(size_on_disk_mb(model_dir), 2) if model_dir else None,
           "latency_b1_ms": round(b1, 2), "latency_b32_ms": round(b32, 2)}
    row["speedup_b32"] = round(baseline_b32 / b32, 2) if baseline_b32 else 1.0
    return row


def run_stages(ctx: DemoContext) -> None:
    import importlib

    for module in DEMO_STAGE_MODULES:
        importlib.import_module(module)
    for name, stage in DEMO_STAGES.items():
        print(f"demo stage: {name}")
        ctx.variants.extend(stage(ctx))


def variants_section(ctx: DemoContext):
    """A report section: the variants table and an accuracy-vs-latency plot."""

    def section(rep) -> None:
        from ptmlab.report.html import new_figure

        rep.heading("Model variants")
        rows = ctx.variants
        rep.table(rows, [c for c in VARIANT_COLUMNS if any(c in r for r in rows)])
        fig, ax = new_figure()
        metric = "accuracy"
        for r in rows:
            ax.scatter(r["latency_b32_ms"], r.get(metric, 0), s=40)
            ax.annotate(r["variant"], (r["latency_b32_ms"], r.get(metric, 0)), fontsize=8,
                        textcoords="offset points", xytext=(4, 4))
        ax.set_xlabel("batch-32 latency (ms)")
        ax.set_ylabel(f"test {metric}")
        ax.set_title("accuracy vs latency")
        rep.figure(fig, "variants", "each model variant: test accuracy against batch-32 CPU latency")

    return section
