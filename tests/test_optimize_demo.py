"""The demo's optimized variant on tiny: in the full demo ``ptmlab optimize`` runs with its short budget and its
winner becomes a row of the variants table, scored on the test split and timed with the others; ``--quick`` leaves
the stage out."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path


def test_the_optimized_stage_adds_a_row_in_the_full_demo_and_none_in_quick(tmp_path, monkeypatch):
    from ptmlab.commands.demo import DemoConfig
    from ptmlab.data.loaders import load_task
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.optimize import demo_stage
    from ptmlab.train.demo import DEMO_STAGES, DemoContext
    from tests.synthetic import tiny_teacher, write_task

    assert "optimized" in DEMO_STAGES.names()
    files = write_task(tmp_path / "data", n_train=160, n_dev=80)
    run = Path(tiny_teacher(files, tmp_path / "demo"))  # the demo's run, on a small task so the search is short
    data = load_task("synthetic", None, files["train"], files["dev"])
    monkeypatch.setattr(DemoContext, "test_split", lambda self: (data.splits["dev"], data.spec))
    small = {"latency_texts": 8, "batch": ["1", "8"], "threads": 1}
    monkeypatch.setattr(demo_stage, "SEARCH", {**demo_stage.SEARCH, **small})
    summary = json.loads((run / "summary.json").read_text())
    config = DemoConfig(model="tiny", max_train=64, max_length=32)
    quick = DemoContext(dataclasses.replace(config, quick=True), run, summary)
    assert demo_stage.optimized_stage(quick) == [] and not (run / "optimized").exists()
    ctx = DemoContext(config, run, summary)
    base = ctx.variant("fine-tuned", load_model(str(run)), load_tokenizer(str(run)),
                       ctx.test_metrics(load_model(str(run)), load_tokenizer(str(run))), run)
    (row,) = demo_stage.optimized_stage(ctx)
    searched = json.loads((run / "optimized" / "summary.json").read_text())
    w = searched["winner"]
    assert row["variant"] == f"optimized: {w['structure']} on {w['backend']}"
    assert w["loss_points"] <= 1 and {r["structure"] for r in searched["trials"]} <= {"source", "vocab"}
    assert set(row) >= {"accuracy", "macro_f1", "params", "size_mb"} and row["size_mb"] > 0
    ctx.time_variants(list(data.splits["dev"].text[:8]), rounds=2)
    assert [r["variant"] for r, _m, _t in ctx.timed] == ["fine-tuned", row["variant"]]
    assert base["speedup_b32"] == 1.0 and row["latency_b32_ms"] > 0
