"""Demo stages: the fine-tuned demo model pruned (40% of heads, short recovery) and quantized (onnxruntime int8).

Recovery is kept short so the stages add about three minutes on 2 cores: at most 1,000 training tweets (fewer if
the demo trained on fewer), one epoch, the recovery run's own dev check on 500 tweets. Every variant is scored on
the same whole test split as the fine-tuned model.
"""

from __future__ import annotations

from ptmlab.train.demo import DEMO_STAGES, DemoContext

RECOVERY_EXAMPLES = 1000
RECOVERY_DEV = 500  # dev tweets the recovery run checks itself on


@DEMO_STAGES.register("pruned", help="40% of attention heads removed (|dL/d gate|), short recovery fine-tuning")
def pruned_stage(ctx: DemoContext) -> list[dict]:
    from ptmlab.compress.importance import compute_importance
    from ptmlab.compress.prune import prune_by_target, recover
    from ptmlab.core.config import build_config
    from ptmlab.data.encode import encode_split
    from ptmlab.data.loaders import load_task, subset
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.lifecycle import RunSession

    d = ctx.config
    n = min(RECOVERY_EXAMPLES, d.max_train or RECOVERY_EXAMPLES)
    model, tok = load_model(str(ctx.run_dir)), load_tokenizer(str(ctx.run_dir))
    imp_split = subset(load_task("tweets").splits["train"], min(500, n), d.seed)
    imp = compute_importance("gate", model, encode_split(tok, imp_split, d.max_length), tok.pad_token_id or 0)
    cut = prune_by_target(model, imp, heads=0.4)
    print(f"  heads {cut['heads_before']} -> {cut['heads_after']}; recovery on {n} tweets")
    out = ctx.run_dir / "pruned"
    cfg = build_config(FinetuneConfig, {"task": "tweets", "max_train": n, "max_eval": RECOVERY_DEV, "epochs": 1.0,
                                        "max_length": d.max_length, "lr": d.lr, "seed": d.seed, "batch_size": 32,
                                        "output": str(out), "overwrite": True}, source="demo")
    run = RunSession(cfg, "demo").open()
    model, _ = recover(model, tok, load_task_data(cfg), cfg, run, 1.0, test=False)  # scored below
    return [ctx.variant("pruned 40% heads + recovery", model, tok, ctx.test_metrics(model, tok), out)]


@DEMO_STAGES.register("quantized", help="onnxruntime dynamic int8 of the fine-tuned model")
def quantized_stage(ctx: DemoContext) -> list[dict]:
    from ptmlab.compress.quantize import OrtModel, export_onnx, onnx_int8
    from ptmlab.models.zoo import load_model, load_tokenizer

    model, tok = load_model(str(ctx.run_dir)), load_tokenizer(str(ctx.run_dir))
    out = ctx.run_dir / "quantized"
    fp = export_onnx(model, out / "model_fp32.onnx")
    q8 = onnx_int8(fp, out / "model.onnx")
    fp.unlink()
    ort = OrtModel(q8, model.config)
    return [ctx.variant("onnx int8", ort, tok, ctx.test_metrics(ort, tok), out)]
