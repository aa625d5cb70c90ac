"""The demo pipeline: fine-tune on the built-in tweets task, then every registered stage adds a model variant
(distilled, pruned, quantized...) to one table and plot in the demo report.

A stage is ``fn(ctx: DemoContext) -> list[dict]`` registered in ``DEMO_STAGES``; each returned row comes from
``ctx.variant(...)`` (metrics, parameters, size) and describes one variant with the keys of ``VARIANT_COLUMNS``.
Stages run in registration order after fine-tuning; then ``ctx.time_variants`` times every variant side by side.

The registry lives here, below the capabilities: a capability registers its stages by importing this module, and
``ptmlab demo`` (a command, above them all) imports the capabilities' stage modules, so imports only flow down.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ptmlab.core.registry import Registry

DEMO_STAGES: Registry = Registry("demo stage")
VARIANT_COLUMNS = ["variant", "accuracy", "macro_f1", "params", "size_mb", "latency_b1_ms", "latency_b32_ms",
                   "speedup_b32"]


LATENCY_ROUNDS = 5  # round-robin rounds over all variants; each variant's latency is the median of its rounds


@dataclass
class DemoContext:
    config: object  # DemoConfig
    run_dir: Path  # the fine-tuned run
    summary: dict
    variants: list[dict] = field(default_factory=list)
    timed: list[tuple] = field(default_factory=list)  # (row, model, tokenizer) of each variant, timed at the end

    @property
    def output(self) -> Path:
        return self.run_dir

    def test_split(self):
        """The tweets test split and task spec: every variant of the demo is scored on it."""
        from ptmlab.data.loaders import load_task

        data = load_task("tweets")
        return data.splits["test"], data.spec

    def test_metrics(self, model, tokenizer) -> dict:
        """A variant's metrics on ``test_split``."""
        from ptmlab.data.encode import encode_split
        from ptmlab.train.evaluate import evaluate

        split, spec = self.test_split()
        enc = encode_split(tokenizer, split, self.config.max_length)
        return evaluate(model, enc, spec, tokenizer.pad_token_id or 0, 128)[0]

    def variant(self, name: str, model, tokenizer, metrics: dict, model_dir: Path | None = None) -> dict:
        """One variant's row (test metrics, parameters, size); its latencies are filled in by ``time_variants``
        once every variant exists, so that all are timed side by side."""
        from ptmlab.models.latency import parameter_count, size_on_disk_mb

        row = {"variant": name, **{k: round(v, 4) for k, v in metrics.items()},
               "params": parameter_count(model) or None,
               "size_mb": round(size_on_disk_mb(model_dir), 2) if model_dir else None}
        self.timed.append((row, model, tokenizer))
        return row

    def time_variants(self, texts: list[str], rounds: int = LATENCY_ROUNDS) -> None:
        """Batch-1 and batch-32 latency of every variant, round-robin over the variants for ``rounds`` rounds
        (median per variant), so that a slow stretch of a shared machine hits every variant alike; speed-ups are
        against the first variant (the fine-tuned model)."""
        from ptmlab.models.latency import time_side_by_side

        time_side_by_side(self.timed, texts, rounds, b1_repeats=3)
        base = self.timed[0][0]["latency_b32_ms"]
        for row, _m, _t in self.timed:
            row["speedup_b32"] = round(base / row["latency_b32_ms"], 2)


def run_stages(ctx: DemoContext) -> None:
    """Every registered stage in order (the caller imports the modules that register them)."""
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
