"""Demo stage: distil a 2-layer student (soft targets + hidden states) from the demo's fine-tuned model and add
it to the demo's variant table (test metric, parameters, latency, speed-up)."""

from __future__ import annotations

from ptmlab.train.demo import DEMO_STAGES, DemoContext


@DEMO_STAGES.register("distilled", help="2-layer student distilled from the fine-tuned model")
def distilled(ctx: DemoContext) -> list[dict]:
    from ptmlab.core.config import build_config
    from ptmlab.distill.config import DistillConfig
    from ptmlab.distill.pipeline import run_distill
    from ptmlab.models.zoo import load_model, load_tokenizer

    d = ctx.config
    out = ctx.run_dir / "distilled"
    cfg = build_config(DistillConfig, dict(
        teacher=str(ctx.run_dir), student="layers:2", losses=["soft_ce", "hidden_mse"], task="tweets",
        max_train=d.max_train, max_eval=getattr(d, "max_eval", None), epochs=max(1.0, d.epochs), lr=1e-4,
        max_length=d.max_length, seed=d.seed,
        output=str(out), overwrite=True, test=True), source="demo")
    summary = run_distill(cfg, command="demo")
    row = ctx.variant("distilled (2 layers)", load_model(str(out)), load_tokenizer(str(out)), summary["test_metrics"],
                      out)
    row["agreement_with_teacher"] = summary["agreement_with_teacher"]
    return [row]
