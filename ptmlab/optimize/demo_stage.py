"""Demo stage: the fastest model within one accuracy point of the demo run, found by ``ptmlab optimize`` on this
machine with a short budget (the run and its pruned vocabulary, in fp32 PyTorch and onnxruntime int8: no training),
exported into ``RUN/optimized`` and scored on the same test split as every other variant.

It runs in the full demo only: ``--quick`` leaves it out (a search scores every candidate on the run's whole dev
split, which a short tour has no time for).
"""

from __future__ import annotations

from ptmlab.train.demo import DEMO_STAGES, DemoContext

SEARCH = dict(max_loss=1.0, budget="45s", structures=["source", "vocab"], backends=["torch-fp32", "onnx-int8"],
              batch=["1", "32"], latency_texts=32, latency_rounds=2, search_rounds=1, finalists=3, held_out="dev")


@DEMO_STAGES.register("optimized", help="ptmlab optimize with a 45 s budget: the fastest of the run and its pruned "
                                        "vocabulary on fp32 PyTorch and onnxruntime int8, within 1 accuracy point")
def optimized_stage(ctx: DemoContext) -> list[dict]:
    if getattr(ctx.config, "quick", False):
        print("  left out of --quick (a search scores every candidate on the whole dev split): run the full demo")
        return []
    import ptmlab
    from ptmlab.core.errors import PtmlabError
    from ptmlab.core.extras import require_extra
    from ptmlab.models.zoo import load_model, load_tokenizer

    try:
        require_extra("optimize", "optimize")
    except PtmlabError as e:  # the search needs Optuna (the optimize extra): the demo goes on without it
        print(f"  left out: {e}")
        return []

    out = ctx.run_dir / "optimized"
    run = ptmlab.optimize(str(ctx.run_dir), output=str(out), overwrite=True, seed=ctx.config.seed, **SEARCH)
    w = run.summary["winner"]
    model, tok = load_model(str(out)).eval(), load_tokenizer(str(out))
    name = f"optimized: {w['structure']} on {w['backend']}"
    return [ctx.variant(name, model, tok, ctx.test_metrics(model, tok), out)]
