"""One row per model variant (dev metric, parameters, size on disk, batch-1/32 latency) and the table + Pareto
report every compression command writes."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ptmlab.core.rundir import RunDir

COLUMNS = ["variant", "dev", "params", "size_mb", "latency_b1_ms", "latency_b32_ms", "speedup_b32", "size_ratio"]


class Measurer:
    """Holds the dev split (encoded once per tokenizer) and latency texts of a task (``data``: the task already
    loaded, else read from ``cfg``)."""

    def __init__(self, cfg, tokenizer, latency_repeats: int | None = None, data=None):
        from ptmlab.data.taskdata import load_task_data

        self.cfg = cfg
        self.latency_repeats = latency_repeats or getattr(cfg, "latency_repeats", 5)
        self.data = data if data is not None else load_task_data(cfg, need_train=False)
        self.spec = self.data.spec
        dev = self.data.splits["dev"]
        self.texts = latency_texts(dev, self.spec.kind)
        self.latency_length = getattr(dev, "window", None) or cfg.max_length  # QA: its windows' length
        self._enc: dict[int, object] = {}
        self.tokenizer = tokenizer

    def dev_metrics(self, model, tokenizer=None) -> dict[str, float]:
        """The task's own dev scores (accuracy, ...; entity P/R/F1; SQuAD exact match and F1)."""
        from ptmlab.data.encode import encode_split
        from ptmlab.train.evaluate import evaluate

        tok = tokenizer or self.tokenizer
        if id(tok) not in self._enc:
            self._enc[id(tok)] = encode_split(tok, self.data.splits["dev"], self.cfg.max_length)
        metrics, _ = evaluate(model, self._enc[id(tok)], self.spec, tok.pad_token_id or 0, self.cfg.eval_batch_size)
        return {k: round(float(v), 4) for k, v in metrics.items()}

    def dev(self, model, tokenizer=None) -> float:
        return self.dev_metrics(model, tokenizer)[self.spec.main_metric]

    def row(self, name: str, model, size_mb: float | None, tokenizer=None, params: int | None = None,
            with_metrics: bool = False) -> dict:
        """``with_metrics``: also every dev score of the task (``dev_metrics``), not only its main metric."""
        from ptmlab.models.latency import measure_latency, parameter_count

        tok = tokenizer or self.tokenizer
        reps = self.latency_repeats
        metrics = self.dev_metrics(model, tok)
        length = self.latency_length
        row = {"variant": name, "dev": metrics[self.spec.main_metric],
               "params": params if params is not None else parameter_count(model) or None, "size_mb": size_mb,
               "latency_b1_ms": round(measure_latency(model, tok, self.texts, 1, repeats=reps * 2,
                                                      max_length=length), 2),
               "latency_b32_ms": round(measure_latency(model, tok, self.texts, 32, repeats=reps,
                                                       max_length=length), 2)}
        if with_metrics:
            row["dev_metrics"] = metrics
        print(f"  {name}: dev {self.spec.main_metric} {row['dev']:.4f}, {size_mb} MB, "
              f"b32 {row['latency_b32_ms']} ms")
        return row

    def saved_size(self, model, tokenizer=None) -> float:
        """MB of the model's safetensors when saved the normal way."""
        from ptmlab.models.latency import size_on_disk_mb
        from ptmlab.models.loader import save_model

        with tempfile.TemporaryDirectory() as tmp:
            save_model(model, None, tmp)
            return round(size_on_disk_mb(tmp), 2)


def latency_texts(split, kind: str, n: int = 64) -> list[str]:
    """The first ``n`` dev inputs as the texts latency is timed on: a sentence (pair's first text), a tagger's words
    joined by spaces, a question followed by its context (cut to the window by the tokenizer)."""
    if kind == "token-classification":
        return [" ".join(words) for words in split.tokens[:n]]
    if kind == "extractive-qa":
        return [f"{q} {c}" for q, c in zip(split.questions[:n], split.contexts[:n], strict=True)]
    return list(split.text[:n])


def add_ratios(rows: list[dict], baseline: dict) -> list[dict]:
    for r in rows:
        r["speedup_b32"] = round(baseline["latency_b32_ms"] / r["latency_b32_ms"], 2)
        r["size_ratio"] = round(baseline["size_mb"] / r["size_mb"], 2) if r.get("size_mb") else None
    return rows


def pareto_front(rows: list[dict]) -> list[dict]:
    """Variants no other variant beats on both batch-32 latency and dev metric."""
    front = [r for r in rows if not any(o is not r and o["latency_b32_ms"] <= r["latency_b32_ms"] and
                                        o["dev"] >= r["dev"] and (o["latency_b32_ms"], o["dev"]) !=
                                        (r["latency_b32_ms"], r["dev"]) for o in rows)]
    return sorted(front, key=lambda r: r["latency_b32_ms"])


def pareto_figure(rows: list[dict], front: list[dict] | None = None, title: str = ""):
    """Dev metric against batch-32 latency, one labelled point per variant, the Pareto front in red."""
    from ptmlab.report.html import new_figure

    front = pareto_front(rows) if front is None else front
    fig, ax = new_figure()
    ax.scatter([r["latency_b32_ms"] for r in rows], [r["dev"] for r in rows], s=30, color="tab:blue")
    for r in rows:
        ax.annotate(r["variant"], (r["latency_b32_ms"], r["dev"]), fontsize=7, textcoords="offset points",
                    xytext=(3, 3))
    ax.plot([r["latency_b32_ms"] for r in front], [r["dev"] for r in front], color="tab:red", lw=1,
            label="Pareto front")
    ax.set_xlabel("batch-32 latency (ms, CPU)")
    ax.set_ylabel("dev metric")
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def write_table_report(run: RunDir, title: str, rows: list[dict], baseline: dict, extra: dict | None = None) -> None:
    """summary.json (rows), report.html (table + accuracy-vs-latency plot with the Pareto front), table on stdout."""
    from ptmlab.report.html import Report
    from ptmlab.report.table import print_table

    add_ratios(rows, baseline)
    front = pareto_front(rows)
    for r in rows:
        r["pareto"] = r in front
    run.write_summary({"title": title, "rows": rows, **(extra or {})})
    fig = pareto_figure(rows, front)
    rep = Report(title)
    rep.heading("Variants").table(rows, COLUMNS + ["pareto"])
    rep.figure(fig, "pareto", "dev metric against batch-32 latency; the red line joins variants nothing beats on both")
    rep.text("Sizes are the weight files on disk (simulated k-bit rows: the packed size they would take). "
             "Latency is the median of repeated forward passes on this machine's CPU threads.")
    rep.write(Path(run.path) / "report.html")
    print_table(rows, COLUMNS)
    print(f"report: {Path(run.path) / 'report.html'}")
