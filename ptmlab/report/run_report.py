"""The report.html of one training run: numbers, loss curve, confusion matrix, per-class scores."""

from __future__ import annotations

import json

from ptmlab.core.rundir import RunDir
from ptmlab.report.html import Report
from ptmlab.report.plots import confusion_matrix_plot, loss_curve, per_class_plot, scatter_plot


def per_class_scores(gold, pred, labels: list[str]) -> list[dict]:
    from sklearn.metrics import precision_recall_fscore_support

    p, r, f, s = precision_recall_fscore_support(gold, pred, labels=list(range(len(labels))), zero_division=0)
    return [{"class": labels[i], "precision": float(p[i]), "recall": float(r[i]), "f1": float(f[i]),
             "support": int(s[i])} for i in range(len(labels))]


def write_run_report(run: RunDir, extra_sections=None) -> str:
    summary = run.summary()
    rep = Report(f"ptmlab run: {summary.get('task')} / {summary.get('model')}")
    rep.table([{"split": "dev", **summary.get("metrics", {})}]
              + ([{"split": "test", **summary["test_metrics"]}] if summary.get("test_metrics") else []))
    info = {k: summary.get(k) for k in ("strategy", "train_examples", "steps", "train_seconds",
                                         "train_examples_per_second", "trainable_params", "params", "precision")}
    rep.table([info])
    if run.file("README.md").is_file():  # the model card (ptmlab.report.model_card)
        rep.parts.append('<p>Model card: <a href="README.md">README.md</a></p>')
    rows = run.metrics()
    if any("loss" in r for r in rows):
        rep.figure(loss_curve(rows), "loss_curve", "training loss and dev metric over steps")
    for split in ("test", "dev"):
        f = run.file(f"predictions_{split}.json")
        if not f.is_file():
            continue
        p = json.loads(f.read_text())
        if p.get("gold") is None or p["kind"] in ("token-classification", "extractive-qa"):
            continue  # span tasks: their per-type / EM-F1 numbers are in the metrics table
        if p["kind"] == "regression":
            rep.figure(scatter_plot(p["gold"], p["pred"], f"{split}: predictions vs gold"), f"scatter_{split}")
        elif p["kind"] == "multi-label":  # multi-hot rows: per-label scores, no confusion matrix
            rep.heading(f"Per-label scores ({split})", 3)
            scores = per_class_scores(p["gold"], p["pred"], p["labels"])
            rep.table(scores)
            rep.figure(per_class_plot(scores, f"{split}: per-label scores"), f"per_class_{split}")
        else:
            labels = p["labels"]
            rep.figure(confusion_matrix_plot(p["gold"], p["pred"], labels, f"{split} confusion matrix"),
                       f"confusion_{split}")
            rep.heading(f"Per-class scores ({split})", 3)
            scores = per_class_scores(p["gold"], p["pred"], labels)
            rep.table(scores)
            rep.figure(per_class_plot(scores, f"{split}: per-class scores"), f"per_class_{split}")
        break
    for section in extra_sections or []:
        section(rep)
    return str(rep.write(run.file("report.html")))
