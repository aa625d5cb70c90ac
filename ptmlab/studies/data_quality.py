"""Study ``data-quality`` (Q4): does a cleaner pre-training corpus beat a larger raw one?

Claim (Raffel et al. 2020, T5, Table 8): pre-training on C4 (filtered) beats the unfiltered crawl, though the raw
corpus is larger; "a smaller, cleaner corpus beats a larger raw one".

Set-up. Clean English prose documents from the shared WikiText-2 and Gutenberg text are split into a held-out set
and a training set; the training set becomes a noisy web-like corpus, deterministically (``make_noisy_corpus``:
boilerplate lines, menus, exact and near duplicates, code, other languages), and ``ptmlab clean`` cleans it. The
same small model (masked LM, same initialisation per seed) is pre-trained three times per seed:
  - clean: one epoch of the cleaned corpus (T tokens);
  - raw at equal tokens: the raw corpus for exactly the clean run's steps (the batch and block size are shared, so
    equal steps are equal tokens);
  - raw, larger: one epoch of the raw corpus (more documents, more tokens and steps: the "larger raw corpus").
Every model is evaluated on the same clean held-out documents (``valid_files``) and fine-tuned on the same task.

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): every fine-tuned model
is above the task's trivial predictor (majority-class accuracy) by a t interval over seeds; pre-training moved the
held-out loss clearly below the unigram cross-entropy of the held-out text (``unigram_entropy``: eval loss / unigram
entropy below 0.9 for every corpus), so that the models learnt more than token frequencies before corpora are
compared.

Verdict rule (decided downstream, as the paper's claim is): for each seed d_task = clean fine-tuned metric - raw
fine-tuned metric (the same seed pre-trains and fine-tunes both), with a 95% paired t interval over seeds. Against
the larger raw corpus: supported when the interval lies above 0, not supported when it lies below 0, inconclusive
otherwise -- a tie on every seed (an interval [0, 0]) is inconclusive, never support. The held-out loss gap
d_loss = raw - clean is reported beside it, secondary: it is measured on clean prose of the cleaned corpus's kind.
The same rule at equal tokens answers the narrower question "is clean text worth more per token" (reported beside).

Budgets: ``--budget small`` runs a 1-layer model on 120 documents with one seed (inconclusive by construction);
``--budget full`` runs 3 seeds and the whole dev set of the fine-tuning task; its one pass of a 2 x 128 model over
600 documents ends at about the unigram cross-entropy, with every fine-tuned model at the majority class.
``--budget gpu`` is sized to decide the claim on one GPU: 4,000 training and 300 held-out documents (of the 4,572
the shared WikiText-2 and Gutenberg text make), 4 x 256 models over 20 passes (``--pt-epochs``: clean and raw
alike, the raw run at equal tokens still taking the clean run's steps) in blocks of 128 tokens, 32 per step, at
rate 1e-3, bf16 where the device has it, each fine-tuned on the whole SST-2 training set: a few thousand steps per
model, under an hour on one H100 for the nine models (estimated from step counts, not measured).
Rough times per budget on 2 CPU cores and one GPU: docs/studies.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmlab.core.config import at_least, build_config, opt, positive
from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_write_text
from ptmlab.studies import STUDIES
from ptmlab.studies.common import StudyArgs, finetune_run, parse_study_args, write_study
from ptmlab.studies.executor import Run, run_grid
from ptmlab.studies.verdict import INCONCLUSIVE, Claim, Verdict, decide_above, mean_interval

CLAIM = Claim(
    study="data-quality",
    claim="A smaller, cleaner pre-training corpus beats a larger raw one.",
    source="Q4; Raffel et al., T5, JMLR 2020, Table 8",
    paper="GLUE average 83.28 pre-training on C4 (filtered) vs 81.46 on the unfiltered crawl",
    rule="for each seed d_task = clean fine-tuned metric - raw fine-tuned metric (the same seed pre-trains and "
         "fine-tunes both), with a 95% paired t interval over seeds. Against the larger raw corpus: supported "
         "when the interval lies above 0, not supported when it lies below 0, inconclusive otherwise -- a tie "
         "on every seed (an interval [0, 0]) is inconclusive, never support. The held-out loss gap d_loss = raw"
         " - clean is reported beside it, secondary: it is measured on clean prose of the cleaned corpus's "
         "kind. The same rule at equal tokens answers the narrower question \"is clean text worth more per "
         "token\" (reported beside).",
    conditions=(
        "every fine-tuned model above the task's majority-class accuracy by a t interval over seeds",
        "pre-training moved the held-out loss below 0.9 x the held-out text's unigram cross-entropy, every corpus",
    ),
    paper_effect=0.018,
)
VARIANTS = ("clean", "raw_equal", "raw_full")

SMALL = dict(docs=120, valid_docs=30, pt_layers=1, pt_hidden=32, block_size=32, pt_batch_size=16, seeds=["0"],
             max_train=300, max_eval=200, max_length=32, epochs=1.0, batch_size=16, eval_blocks=64)
FULL = dict(seeds=["0", "1", "2"], max_eval=None)
# --budget gpu: the full budget, sized past the unigram plateau (module docstring)
GPU = dict(FULL, docs=4000, valid_docs=300, pt_layers=4, pt_hidden=256, block_size=128, pt_batch_size=32, pt_lr=1e-3,
           pt_epochs=20.0, max_train=None, precision="auto")


@dataclass(frozen=True)
class DataQualityArgs(StudyArgs):
    output: str = opt("runs/study-data-quality", "output directory")
    text_dir: str = opt("", "folder with wikitext-2/ and gutenberg/ (default: the shared text)")
    docs: int = opt(600, "clean documents that become the noisy training corpus")
    valid_docs: int = opt(100, "clean held-out documents for the eval loss")
    noise_fraction: float = opt(0.4, "share of noise documents in the raw corpus")
    seeds: list[str] = opt(["0", "1", "2"], "pre-training and fine-tuning seeds (one seed is inconclusive)")
    pt_layers: int = opt(2, "layers of the pre-trained model")
    pt_hidden: int = opt(128, "hidden size of the pre-trained model")
    block_size: int = opt(64, "pre-training block size")
    pt_batch_size: int = opt(16, "pre-training batch size")
    pt_lr: float = opt(2e-3, "pre-training learning rate")
    pt_epochs: float = opt(1.0, "passes over the clean and the raw corpus (the raw run at equal tokens takes the "
                                "clean run's steps)")
    eval_blocks: int = opt(256, "held-out blocks for the eval loss (0: all)")
    tokenizer: str = opt("minilm", "tokenizer of every pre-trained model")
    lr: float = opt(5e-4, "fine-tuning learning rate (models pre-trained from scratch need a high one)")
    model: str = opt("", "unused: every variant fine-tunes its own pre-trained model")

    def validate(self) -> None:
        super().validate()
        if not self.seeds or len({s for s in self.seeds if s.lstrip("-").isdigit()}) != len(self.seeds):
            raise PtmlabError(f"--seeds {','.join(self.seeds)}: give distinct integer seeds, e.g. 0,1,2")
        if self.docs < 10 or self.valid_docs < 2:
            raise PtmlabError(f"--docs {self.docs} / --valid-docs {self.valid_docs} are too few: use >= 10 and >= 2")
        if not 0 < self.noise_fraction < 1:
            raise PtmlabError(f"--noise-fraction must be in (0, 1), got {self.noise_fraction}")
        at_least(self, 1, "pt_layers", "pt_hidden", "pt_batch_size")
        at_least(self, 8, "block_size")
        at_least(self, 0, "eval_blocks")
        positive(self, "pt_lr", "pt_epochs")


# ------------------------------------------------------------------------------------------------ the rule
def decide(loss_diffs: list[float], task_diffs: list[float], what: str = "the larger raw corpus") -> Verdict:
    """The rule of ``CLAIM``: ``task_diffs`` = clean - raw fine-tuned metric seed by seed decides; ``loss_diffs`` =
    raw - clean held-out loss is reported beside it. The estimate is the downstream gap."""
    loss = mean_interval(loss_diffs, f"held-out loss, {what} minus clean")
    task = mean_interval(task_diffs, f"fine-tuned metric, clean minus {what}")
    beside = f" (secondary: {loss.metric} {loss.text()})"
    if task_diffs and all(d == 0 for d in task_diffs):
        return Verdict(INCONCLUSIVE, f"every variant's fine-tuned metric is the same within each seed: downstream "
                                     f"does not separate the corpora ({task.metric} {task.text()}){beside}", task)
    v = decide_above(task, 0.0)
    return Verdict(v.outcome, v.reason + beside, task, detectable_effect=v.detectable_effect, thresholds=v.thresholds)


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (rows: per variant and seed, ``eval_loss``,
    ``unigram_entropy`` (the held-out text's unigram cross-entropy under that run's training corpus, nats) and
    ``task_metric``)."""
    from ptmlab.studies.common import above_trivial, eval_size
    from ptmlab.studies.pretrain_common import unigram_condition

    rows = record.get("rows") or []
    task = next((r.get("task") for r in rows if r.get("task")), "sst2")
    metric = next((r.get("metric") for r in rows if r.get("metric")), "accuracy")
    systems: dict[str, list[float]] = {}
    for r in rows:
        systems.setdefault(str(r.get("variant")), []).append(float(r["task_metric"]))
    conds = above_trivial(record, task, metric, systems or {"clean": []}, eval_size(record, None))
    return conds + [unigram_condition(rows, "largest held-out loss / unigram cross-entropy of the held-out text",
                                      record)]


def restate(record: dict, name: str = "data-quality") -> Verdict | None:
    """The rule on the record's per-seed differences (``verdicts[raw_full]``)."""
    raw = ((record.get("verdicts") or {}).get("raw_full") or {})
    if not raw.get("task_diffs"):
        return None
    return decide(raw.get("loss_diffs") or [], raw["task_diffs"])


# ------------------------------------------------------------------------------------------------ the corpus
def _text_root(a: DataQualityArgs) -> Path:
    if a.text_dir:
        root = Path(a.text_dir)
    else:
        from ptmlab.tokenization.corpora import shared_data_dir

        shared = shared_data_dir()
        root = shared / "text" if shared else Path("../shared/data/text")
    if not (root / "wikitext-2").is_dir() and not (root / "gutenberg").is_dir():
        raise PtmlabError(f"no wikitext-2/ or gutenberg/ under '{root}': pass --text-dir with the shared text folder")
    return root


def build_corpora(a: DataQualityArgs, out: Path) -> dict:
    """raw.jsonl (noisy), valid.jsonl (clean held-out) and the cleaned corpus, built once and reused."""
    from ptmlab.clean.noisy import load_text_documents, make_noisy_corpus, score
    from ptmlab.clean.pipeline import CleanConfig, run_clean

    data = out / "data"
    raw, valid, cleaned = data / "raw.jsonl", data / "valid.jsonl", data / "cleaned"
    if not (cleaned / "stats.json").is_file() or a.overwrite:
        docs = load_text_documents(_text_root(a), a.docs + a.valid_docs, seed=0)
        if len(docs) < a.docs + a.valid_docs:
            raise PtmlabError(f"the text holds {len(docs)} documents, fewer than --docs {a.docs} + --valid-docs "
                              f"{a.valid_docs}: lower them")
        held, train = docs[:a.valid_docs], docs[a.valid_docs:]
        noisy, truth = make_noisy_corpus(train, seed=0, noise_fraction=a.noise_fraction)
        atomic_write_text(valid, "".join(json.dumps({"id": f"valid{i}", "text": t}) + "\n" for i, t in enumerate(held)))
        atomic_write_text(raw, "".join(json.dumps(d) + "\n" for d in noisy))
        atomic_write_text(data / "truth.json", json.dumps([t.__dict__ for t in truth]))
        run_clean(CleanConfig(inputs=[str(raw)], output=str(cleaned), overwrite=True))
    from ptmlab.clean.noisy import Truth

    truth = [Truth(**t) for t in json.loads((data / "truth.json").read_text())]
    kept = {d["id"]: d["text"] for d in map(json.loads, (cleaned / "clean.jsonl").read_text().splitlines())}
    return {"raw": str(raw), "clean": str(cleaned / "clean.jsonl"), "valid": str(valid),
            "cleaning": score(truth, kept), "raw_docs": len(truth), "clean_docs": len(kept)}


# ------------------------------------------------------------------------------------------------ the runs
def pretrain(a: DataQualityArgs, files: str, valid: str, seed: int, out_dir: Path, max_steps: int = 0) -> dict:
    from ptmlab.pretrain.config import PretrainConfig
    from ptmlab.pretrain.run import run_pretrain
    from ptmlab.studies.common import finished_variant

    cfg = build_config(PretrainConfig, dict(
        files=[files], valid_files=[valid], objective="mlm", arch="bert", tokenizer=a.tokenizer,
        layers=a.pt_layers, hidden=a.pt_hidden, heads=max(1, a.pt_hidden // 32), ffn=4 * a.pt_hidden,
        block_size=a.block_size, batch_size=a.pt_batch_size, lr=a.pt_lr, seed=seed, epochs=a.pt_epochs,
        max_steps=max_steps,
        eval_steps=0, eval_blocks=a.eval_blocks, precision=a.precision, output=str(out_dir), overwrite=True,
        logging_steps=10), source="study")
    done = finished_variant(out_dir, cfg, a.overwrite)
    return done if done is not None else run_pretrain(cfg, command="study")


@STUDIES.register("data-quality", help="Q4: a cleaner pre-training corpus vs a larger raw one (eval loss, fine-tuning)")
def run(argv: list[str]) -> int:
    from ptmlab.report.plots import seed_lines

    a = parse_study_args("data-quality", DataQualityArgs, argv, __doc__, small=SMALL, full=FULL, gpu=GPU)
    out = Path(a.output)
    corpora = build_corpora(a, out)
    seeds = sorted({int(s) for s in a.seeds})

    def pt(v: str, seed: int, **kw) -> Run:
        d = out / f"pt-{v}-s{seed}"
        return Run(pretrain, d, (a, corpora["clean" if v == "clean" else "raw"], corpora["valid"], seed, d), kw)

    # three rounds of the grid: clean and full raw pre-training; raw at the clean run's steps; every fine-tuning
    res = run_grid(a, {(v, seed): pt(v, seed) for seed in seeds for v in ("clean", "raw_full")})
    res.update(run_grid(a, {("raw_equal", seed): pt("raw_equal", seed, max_steps=res["clean", seed]["steps"])
                            for seed in seeds}))
    fts = run_grid(a, {(v, seed): finetune_run(a, out / f"ft-{v}-s{seed}", model=str(out / f"pt-{v}-s{seed}"),
                                               seed=seed, test=False) for seed in seeds for v in VARIANTS})
    rows = []
    for seed in seeds:
        for v in VARIANTS:
            ft, s = fts[v, seed], res[v, seed]
            rows.append({"variant": v, "seed": seed, "steps": s["steps"], "tokens": s["metrics"]["tokens"],
                         "eval_loss": s["metrics"]["eval_loss"],
                         "unigram_entropy": s.get("corpus", {}).get("unigram_entropy"), "task": a.task,
                         "task_metric": ft["metrics"][ft["main_metric"]], "metric": ft["main_metric"]})
    by = {(r["variant"], r["seed"]): r for r in rows}
    seeds = sorted({r["seed"] for r in rows})
    verdicts, decided = {}, {}
    for raw, what in (("raw_full", "the larger raw corpus"), ("raw_equal", "raw text at equal tokens")):
        dl = [by[(raw, s)]["eval_loss"] - by[("clean", s)]["eval_loss"] for s in seeds]
        dt = [by[("clean", s)]["task_metric"] - by[(raw, s)]["task_metric"] for s in seeds]
        decided[raw] = decide(dl, dt, what)
        verdicts[raw] = {"verdict": decided[raw].outcome, "reason": decided[raw].reason, "loss_diffs": dl,
                         "task_diffs": dt}
    c = corpora["cleaning"]
    mean = {v: float(np.mean([by[(v, s)]["eval_loss"] for s in seeds])) for v in VARIANTS}
    tok = {v: float(np.mean([by[(v, s)]["tokens"] for s in seeds])) for v in VARIANTS}
    vf, ve = verdicts["raw_full"], verdicts["raw_equal"]
    verdict = Verdict(decided["raw_full"].outcome, (
        f"a cleaner corpus beats a larger raw one, downstream: {vf['reason']} (held-out loss clean "
        f"{mean['clean']:.3f} on "
        f"{tok['clean']:,.0f} tokens vs raw {mean['raw_full']:.3f} on {tok['raw_full']:,.0f} tokens; {a.task} gaps "
        f"{_fmt(vf['task_diffs'])}). At equal tokens: {ve['verdict']} (raw {mean['raw_equal']:.3f}; "
        f"loss gaps {_fmt(ve['loss_diffs'])}, {a.task} gaps {_fmt(ve['task_diffs'])}). Cleaning removed "
        f"{c['noise_removed']:.0%} of noise documents and kept {c['clean_kept']:.0%} of clean ones "
        f"({corpora['raw_docs']} -> {corpora['clean_docs']} documents); {len(seeds)} seeds."),
        decided["raw_full"].estimate)
    figs = [(seed_lines(list(VARIANTS), {f"seed {s}": [by[(v, s)][key] for v in VARIANTS] for s in seeds}, label,
                        title), name, caption)
            for key, label, title, name, caption in (
                ("eval_loss", "held-out loss (clean text)", "pre-training corpus vs held-out loss", "data_quality",
                 "held-out loss per corpus, one line per seed"),
                ("task_metric", f"{a.task} dev {rows[0]['metric']}", "pre-training corpus vs fine-tuned model",
                 "data_quality_task", "fine-tuned metric per corpus, one line per seed"))]
    write_study(out, "Study: data quality (Q4)", rows, verdict, figs,
                extra={"verdicts": verdicts, "cleaning": c, "corpora": {k: corpora[k] for k in
                                                                         ("raw_docs", "clean_docs")}},
                claim=CLAIM, budget=a.budget, seeds=seeds, validity=validity)
    return 0


def _fmt(xs: list[float]) -> str:
    return "[" + ", ".join(f"{x:+.3f}" for x in xs) + "]"
