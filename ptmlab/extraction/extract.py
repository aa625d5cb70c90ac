"""The extraction attack: generate queries, ask the victim, train copies at each budget, report agreement.

The queries and the victim's answers are saved in the run directory (``queries.json``), so every point of the
curve over budgets trains on a prefix of the same answered queries.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ptmlab.core.config import config_to_dict, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_write_json
from ptmlab.core.provenance import redact_url
from ptmlab.core.rundir import RunDir, check_output_dir
from ptmlab.extraction.client import Answers, VictimClient
from ptmlab.train.args import DataArgs, ModelArgs, TrainArgs


@dataclass(frozen=True)
class ExtractConfig(ModelArgs, DataArgs, TrainArgs):
    victim: str = opt("", "URL of the victim API, e.g. http://127.0.0.1:8000")
    key: str = opt("", "API key for the victim (or set PTMLAB_VICTIM_KEY)")
    query_strategy: str = opt("random", "query generator: random, wiki, task")
    budget: int = opt(1000, "queries to send to the victim")
    curve: list[str] = opt([], "smaller budgets to train extra copies at, for the agreement curve (e.g. 250,500)")
    corpus: str | None = opt(None, "text file or folder for --strategy wiki (default ../shared/data/text/wikitext-2)")
    chunk: int = opt(32, "texts per API request")
    max_wait: float = opt(3600.0, "give up when 429 answers would make the attack wait longer than this (seconds)")
    victim_run: str | None = opt(None, "the victim's run directory: label the dev set locally, not via the API")
    lr: float = opt(1e-4, "peak learning rate (copies learn faster at 1e-4)")
    keep_best: bool = opt(False, "keep the copy with the best dev agreement (off: the attacker has no labelled dev)")
    max_length: int = opt(64, "truncate inputs to this many tokens")
    test: bool = opt(False, "unused by extraction", cli=False)

    def validate(self) -> None:
        from ptmlab.extraction.queries import QUERY_STRATEGIES

        self.validate_model()
        self.validate_data()
        self.validate_train()
        QUERY_STRATEGIES.get(self.query_strategy)
        if not 1 <= self.budget <= 10_000_000:
            raise PtmlabError(f"--budget must be in 1..10000000, got {self.budget}")
        if not 1 <= self.chunk <= 10_000:
            raise PtmlabError(f"--chunk must be in 1..10000, got {self.chunk}")
        if not 0 <= self.max_wait <= 7 * 86_400:  # NaN fails too
            raise PtmlabError(f"--max-wait must be in 0..604800 seconds, got {self.max_wait}")
        for b in self.curve_budgets():
            if not 0 < b < self.budget:
                raise PtmlabError(f"--curve point {b} must be between 1 and --budget {self.budget} (exclusive)")

    def curve_budgets(self) -> list[int]:
        try:
            return sorted({int(b) for b in self.curve})
        except ValueError:
            raise PtmlabError(f"--curve expects whole numbers, got {','.join(self.curve)}") from None


def run_extract(cfg: ExtractConfig, client: VictimClient | None = None) -> dict:
    """Run the attack into ``cfg.output``; returns the summary (also in summary.json)."""
    from ptmlab.core.seed import configure_threads
    from ptmlab.extraction.queries import make_queries
    from ptmlab.extraction.train_copy import to_task_ids, train_copy
    from ptmlab.train.finetune import label_names, load_task_data

    configure_threads()
    if not cfg.victim and client is None:
        raise PtmlabError("no victim: pass --victim URL")
    if not cfg.key and client is None:
        raise PtmlabError("no API key: pass --key KEY (or set PTMLAB_VICTIM_KEY)")
    check_output_dir(cfg.output, cfg.overwrite)
    data = load_task_data(cfg)
    spec = data.spec
    if spec.kind == "regression":
        raise PtmlabError(f"task '{spec.name}' is a regression task: extraction supports classification tasks")
    from ptmlab.data.labels import refuse_multi_label

    refuse_multi_label(spec.kind, "extraction", f"task '{spec.name}' has label sets; extraction copies single-label "
                                                f"classifiers")
    dev = data.splits["dev"]
    texts, pairs = make_queries(cfg.query_strategy, cfg.budget, data.splits["train"], cfg.seed, spec.is_pair,
                                cfg.corpus)
    client = client or VictimClient(cfg.victim, cfg.key, cfg.chunk, max_wait=cfg.max_wait)
    # the victim is asked everything first: a victim that refuses or answers nonsense leaves no run folder behind
    answers = client.query(texts, pairs, desc="query victim")
    victim_dev, eval_queries = victim_dev_labels(cfg, client, dev, answers.label_names)
    run = RunDir.create(cfg.output, cfg.overwrite)
    run.write_config(config_to_dict(dataclasses.replace(cfg, key="***", victim=redact_url(cfg.victim))), "extract")
    atomic_write_json(run.file("queries.json"), {"texts": texts, "text_pairs": pairs, "labels": answers.labels,
                                                 "probs": answers.probs, "label_names": answers.label_names})
    task_names = label_names(data)
    victim_metrics = {}
    if dev.label is not None:
        from ptmlab.data.metrics import compute_metrics

        mapping = to_task_ids(answers.label_names, spec, task_names)
        victim_metrics = compute_metrics(spec.metrics, [mapping[i] for i in victim_dev], dev.label)
    curve = []
    for b in cfg.curve_budgets():
        sub_run = RunDir.create(run.path / "curve" / f"budget-{b}", overwrite=True)
        part = _prefix(answers, b)
        res = train_copy(cfg, sub_run, texts[:b], pairs[:b] if pairs else None, part, dev, spec, task_names,
                         victim_dev)
        sub_run.write_summary({k: v for k, v in res.items() if k != "dev_predictions"})
        curve.append(_point(b, res, spec))
    res = train_copy(cfg, run, texts, pairs, answers, dev, spec, task_names, victim_dev)
    curve.append(_point(cfg.budget, res, spec))
    summary = {
        "task": spec.name, "model": cfg.model, "strategy": "extract", "query_strategy": cfg.query_strategy,
        "budget": cfg.budget, "victim": cfg.victim, "policy": answers.policy, "soft_labels": res["soft_labels"],
        "agreement": res["agreement"], "metrics": res["metrics"], "victim_metrics": victim_metrics,
        "main_metric": spec.main_metric, "curve": curve, "eval_queries": eval_queries,
        "rate_limited": answers.rate_limited, "waited_seconds": round(answers.waited_seconds, 2),
        "steps": res["steps"], "train_seconds": res["train_seconds"], "labels": answers.label_names,
        "eval_examples": len(dev), "train_examples": len(texts),
    }
    run.write_summary(summary)
    atomic_write_json(run.file("predictions_dev.json"), {"victim": victim_dev, "copy": res["dev_predictions"]})
    write_extract_report(run, summary)
    return summary


def _prefix(answers: Answers, n: int) -> Answers:
    return dataclasses.replace(answers, labels=answers.labels[:n],
                               probs=answers.probs[:n] if answers.probs is not None else None)


def _point(budget: int, res: dict, spec) -> dict:
    return {"budget": budget, "agreement": res["agreement"], spec.main_metric: res["metrics"].get(spec.main_metric)}


def victim_dev_labels(cfg: ExtractConfig, client: VictimClient, dev, victim_names: list[str]) -> tuple[list[int], int]:
    """The victim's labels on the dev set: from its run directory when given (no queries), else from the API."""
    if cfg.victim_run:  # loaded through the zoo like any model: extraction needs nothing of serve's internals
        from ptmlab.models.zoo import load_model

        model = load_model(cfg.victim_run)
        names = [str(model.config.id2label[i]) for i in range(len(model.config.id2label))]
        if names != victim_names:
            raise PtmlabError(f"--victim-run labels {names} differ from the API's {victim_names}: pass the served "
                              f"run directory")
        return run_labels(cfg.victim_run, dev, cfg.max_length, cfg.eval_batch_size, model=model), 0
    answers = client.query(dev.text, dev.text_pair, desc="label dev")
    return answers.labels, len(dev)


def run_labels(run_dir: str, split, max_length: int, batch_size: int, model=None) -> list[int]:
    """The label ids (argmax, fp32) a run's classifier gives every example of ``split``: what the undefended API
    answers for the victim, and the copy's labels, whose ids are the victim's. ``model``: the run's model when the
    caller has loaded it already."""
    from ptmlab.data.encode import encode_split
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.evaluate import predict_logits, resolve_precision

    model, tokenizer = model if model is not None else load_model(run_dir), load_tokenizer(run_dir)
    model.eval()
    logits = predict_logits(model, encode_split(tokenizer, split, max_length), tokenizer.pad_token_id or 0,
                            batch_size, resolve_precision("fp32"))
    return [int(x) for x in logits.argmax(-1)]


def write_extract_report(run: RunDir, summary: dict) -> None:
    from ptmlab.report.html import Report, new_figure

    rep = Report(f"ptmlab extract: {summary['query_strategy']} queries against {summary['victim'] or 'victim'}")
    metric = summary["main_metric"]
    rep.text(f"A {summary['model']} copy trained on {summary['budget']} {summary['query_strategy'].upper()} queries "
             f"({'soft' if summary['soft_labels'] else 'hard'} labels, policy {summary['policy']}) agrees with the "
             f"victim on {summary['agreement']:.1%} of {summary['eval_examples']} dev examples.")
    rep.table([{"model": "victim", metric: summary["victim_metrics"].get(metric), "agreement": 1.0},
               {"model": "copy", metric: summary["metrics"].get(metric), "agreement": summary["agreement"]}])
    rep.heading("Agreement over the query budget").table(summary["curve"])
    if len(summary["curve"]) > 1:
        fig, ax = new_figure()
        xs = [p["budget"] for p in summary["curve"]]
        ax.plot(xs, [p["agreement"] for p in summary["curve"]], "o-", label="agreement with victim")
        ax.plot(xs, [p[metric] for p in summary["curve"]], "s--", label=f"dev {metric}")
        ax.set_xscale("log")
        ax.set_xlabel("queries")
        ax.legend()
        rep.figure(fig, "agreement_curve", "agreement and dev metric against the query budget")
    rep.write(run.file("report.html"))

