"""report.html of a pre-training run: the numbers, and train / held-out loss against tokens seen."""

from __future__ import annotations

from ptmlab.core.rundir import RunDir
from ptmlab.report.html import Report, new_figure


def loss_figure(rows: list[dict]):
    fig, ax = new_figure()
    train = [r for r in rows if "loss" in r and "tokens" in r]
    evals = [r for r in rows if "eval" in r and "tokens" in r]
    ax.plot([r["tokens"] for r in train], [r["loss"] for r in train], label="train loss")
    ax.plot([r["tokens"] for r in evals], [r["eval"]["eval_loss"] for r in evals], "o-", label="held-out loss")
    ax.set_xlabel("training tokens")
    ax.set_ylabel("loss")
    ax.legend()
    return fig


def write_pretrain_report(run: RunDir) -> str:
    s = run.summary()
    rep = Report(f"ptmlab pre-training: {s.get('objective')} on {s.get('architecture')}")
    rep.table([s["metrics"]])
    rep.table([{k: s.get(k) for k in ("objective", "architecture", "params", "nonembedding_params", "steps",
                                       "block_size", "batch_size", "train_seconds", "precision", "world_size")}])
    rep.table([s.get("corpus", {})])
    rep.figure(loss_figure(run.metrics()), "loss_curve", "training loss and held-out loss against tokens")
    rep.text("FLOPs: 6 x non-embedding parameters per token plus 6 x layers x block x width (Kaplan et al. 2020); "
             "tokens count corpus tokens in the training blocks.")
    return str(rep.write(run.file("report.html")))
