"""Study ``static-vs-contextual`` (Q1: the first generation of PTMs): do contextual representations beat static
word embeddings on the same tasks with the same classifier?

Claim: contextual encoders (second-generation PTMs) give better sentence features than static word embeddings
(first generation: word2vec/GloVe, one vector per word whatever its context). Source: Q1 (the PTM survey's two
generations); Peters et al. 2018 (ELMo) and Devlin et al. 2019 report large gains over static-embedding baselines.

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test), per task: the fine-tuned
encoder is above the task's trivial predictor (majority-class accuracy; for CoLA, scored by MCC, a constant
predictor's 0), so the model at this budget learns the task at all; and at least one of the static and the contextual
system is above it, so the comparison is not a tie of two constant predictors (a static system at chance beside a
contextual one above it is the claim's own case). "Above" is the lower end of the system's interval: a t interval
over seeds for accuracy, the bootstrap interval of its MCC (as in the rule) for MCC.

Rule: per task, in the task's own metric (accuracy; CoLA: Matthews correlation, as GLUE scores it, since a majority
predictor already has 69% accuracy there), the gain of frozen contextual features over static embeddings, same
logistic-regression head, with a 95% interval: for accuracy a hierarchical bootstrap (seeds, then dev examples), for
MCC a bootstrap of the MCC gain over dev examples (seeds, then examples; seeds whose runs are identical, as when
every seed trains on the whole training set, count as one run); supported when above 0 on every task, not supported
when below 0 on any task, inconclusive otherwise.

The three systems, per task and seed, on the same training subset and the same dev examples:

- static: the model's own input (word-piece) embeddings, mean-pooled over the sentence's real non-special tokens
  (no contextualisation at all), then a standardised logistic regression trained on the training subset;
- contextual (frozen): the same model's last hidden state, mean-pooled over the same tokens, the same head;
- fine-tuned: the whole encoder fine-tuned on the task (``finetune_variant``), reported beside the rule.

Using the same model's input embeddings keeps vocabulary and width equal, so only contextualisation differs (no
word-vector library is installed, so no word2vec baseline is trained). Tasks: sst2 and cola (single sentences); without
the GLUE data they are skipped with the reason and the built-in tweets task runs instead. ``--budget small``: the
tiny model, tweets, one seed; default and full: three seeds.

Earlier runs, and the design fixed after them: at 2,000 training rows, and again with CoLA's whole training set
(``--max-train 8551``, fine-tuning 1 epoch), the fine-tuned minilm predicted one class on CoLA (MCC 0): cannot test.
The second run also showed that with the whole training set the probes are the same on every seed, so a t interval
over seeds of CoLA's MCC gain had no width ([0.0514, 0.0514]) and left out the dev sentences' noise; and that a mean
of input embeddings, blind to word order, stays near chance on acceptability (static MCC 0.019), so a condition
asking every system to clear the trivial predictor would make CoLA untestable whatever contextual features do. The
confirmatory design, fixed before its run, is ``--budget full``: CoLA's whole training set (8,551 rows; SST-2 draws as
many of its rows per seed), 3 epochs of fine-tuning, seeds 0-2, every dev sentence, the MCC bootstrap and conditions
above: ``ptmlab study static-vs-contextual --budget full --output D``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmlab.core.config import opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import FULL_FINETUNE, SMALL_FINETUNE, StudyArgs, parse_study_args, write_study
from ptmlab.studies.verdict import INCONCLUSIVE, Claim, Condition, Estimate, Verdict, combine, decide_above

CLAIM = Claim(
    study="static-vs-contextual",
    claim="contextual representations beat static word embeddings as features for the same classifier",
    source="Q1 (first vs second generation of PTMs); Peters et al. 2018 (ELMo), Devlin et al. 2019 (BERT)",
    paper="ELMo adds 2-7 points over GloVe-based baselines on six tasks; BERT-base SST-2 93.5 vs ~87-90 for "
          "static-embedding models",
    rule="per task, in the task's own metric (accuracy; CoLA: Matthews correlation, as GLUE scores it, since a "
         "majority predictor already has 69% accuracy there), the gain of frozen contextual features over static "
         "embeddings, same logistic-regression head, with a 95% interval: for accuracy a hierarchical bootstrap "
         "(seeds, then dev examples), for MCC a bootstrap of the MCC gain over dev examples (seeds, then examples; "
         "seeds whose runs are identical, as when every seed trains on the whole training set, count as one run); "
         "supported when above 0 on every task, not supported when below 0 on any task, inconclusive otherwise",
    conditions=(
        "per task, the fine-tuned encoder above the task's trivial predictor (majority-class accuracy; for CoLA, "
        "scored by MCC, 0): the lower end of its interval (t over seeds; for MCC, the rule's bootstrap)",
        "per task, at least one of the static and the contextual system above that trivial predictor, the same way",
    ),
    paper_effect=0.02,
)
GLUE_TASKS = ["sst2", "cola"]
METRICS = {"cola": "mcc"}  # GLUE's metric where accuracy would reward the majority class; accuracy elsewhere


def metric_of(task: str) -> str:
    return METRICS.get(task, "accuracy")


def score(correct: list[float], gold: list[int] | None, metric: str) -> float:
    """One run's dev score from its per-example correctness: accuracy, or (binary tasks) the Matthews correlation of
    the predictions that correctness and the gold labels imply."""
    if metric == "accuracy":
        return float(np.mean(correct))
    if gold is None or len(gold) != len(correct) or set(gold) - {0, 1}:
        raise PtmlabError(f"{metric} needs binary gold labels for every dev example")
    from ptmlab.data.metrics import mcc

    return mcc(predictions(correct, gold), gold)


def predictions(correct, gold) -> np.ndarray:
    """Binary predictions from per-example correctness and the gold labels (right: the gold label; wrong: the
    other one)."""
    g = np.asarray(gold)
    return np.where(np.asarray(correct) > 0, g, 1 - g)


@dataclass(frozen=True)
class StaticContextualArgs(StudyArgs):
    model: str = opt("minilm", "encoder whose input embeddings and hidden states are compared")
    tasks: list[str] = opt(GLUE_TASKS, "classification tasks (GLUE tasks are skipped, with the reason, without the "
                                       "GLUE data; then tweets runs)")
    glue_dir: str | None = opt(None, "GLUE directory")
    max_train: int = opt(2000, "training examples (linear heads and fine-tuning)")
    max_eval: int = opt(500, "dev examples (0: all)")
    max_length: int = opt(64, "max tokens")
    seeds: list[str] = opt(["0", "1", "2"], "seeds (each one draws its own training subset and fine-tuning run)")
    finetune: bool = opt(True, "also fine-tune the encoder (reported beside the rule)")
    probe_c: float = opt(0.0, "inverse L2 strength of the logistic-regression head (0: chosen by 3-fold "
                              "cross-validation on the training subset, separately for each system)")
    output: str = opt("runs/study-static-contextual", "output directory")


SMALL = {**SMALL_FINETUNE, "tasks": ["tweets"], "seeds": ["0"]}  # what --budget small runs (tests, CI)
FULL = {**FULL_FINETUNE, "max_train": 8551, "epochs": 3.0}  # seeds 0-2, whole dev sets, CoLA's whole training set


def pooled_features(model, enc, pad_id: int, special_ids: set[int], batch_size: int = 64) -> tuple[np.ndarray, ...]:
    """(static, contextual) sentence features [N, H]: the input word-piece embeddings and the last hidden state,
    each mean-pooled over the real non-special tokens (all real tokens when a sentence has no other)."""
    import torch

    from ptmlab.data.batching import collate
    from ptmlab.models.loader import model_inputs
    from ptmlab.models.structure import structure_of

    s = structure_of(model)
    encoder = s.encoder(model)
    words = encoder.get_submodule(s.word_embeddings)
    model.eval()
    static, contextual = [], []
    with torch.no_grad():
        for start in range(0, len(enc), batch_size):
            batch = collate(enc, list(range(start, min(start + batch_size, len(enc)))), pad_id)
            ids, real = batch["input_ids"], batch["attention_mask"].bool()
            keep = real & ~torch.isin(ids, torch.tensor(sorted(special_ids), dtype=ids.dtype))
            keep = torch.where(keep.any(1, keepdim=True), keep, real)[..., None].float()
            hidden = encoder(**model_inputs(model, batch))[0]
            for out, x in ((static, words(ids)), (contextual, hidden)):
                out.append(((x.float() * keep).sum(1) / keep.sum(1)).numpy())
    return np.concatenate(static), np.concatenate(contextual)


PROBE_CS = (1e-3, 1e-2, 1e-1, 1.0, 10.0)  # the L2 strengths cross-validation chooses from


def probe(train_x: np.ndarray, train_y, dev_x: np.ndarray, dev_y, c: float = 0.0, seed: int = 0) -> list[float]:
    """A standardised logistic regression trained on ``train_x`` (``c`` 0: its L2 strength chosen by 3-fold
    cross-validation on the training data, so neither feature set is favoured by a fixed regulariser); per dev
    example 1.0 / 0.0 correctness."""
    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    counts = np.unique(np.asarray(train_y), return_counts=True)[1]
    if len(counts) < 2:
        raise PtmlabError("the training subset has one label only: raise --max-train")
    if c > 0 or counts.min() < 3:
        lr = LogisticRegression(C=c or 1.0, max_iter=2000, random_state=seed)
    else:
        lr = LogisticRegressionCV(Cs=list(PROBE_CS), cv=3, scoring="neg_log_loss", max_iter=2000, random_state=seed)
    head = make_pipeline(StandardScaler(), lr)
    head.fit(train_x, np.asarray(train_y))
    return (head.predict(dev_x) == np.asarray(dev_y)).astype(float).tolist()


def resolve_tasks(a: StaticContextualArgs) -> tuple[list[str], list[str]]:
    """(tasks to run, reasons for the skipped ones): GLUE tasks need the GLUE data; with none left, tweets."""
    from ptmlab.data.loaders import default_glue_dir
    from ptmlab.data.tasks import TASKS

    unknown = [t for t in a.tasks if t not in TASKS]
    if unknown:
        raise PtmlabError(f"unknown task '{unknown[0]}': choose from {', '.join(TASKS.names())}")
    glue = a.glue_dir or default_glue_dir()

    def present(t: str) -> bool:
        folder = TASKS.get(t).glue_dir
        return not folder or bool(glue and (Path(glue) / folder / "train.tsv").is_file())

    run = [t for t in a.tasks if present(t)]
    skipped = [f"{t}: skipped, GLUE data not found (pass --glue-dir)" for t in a.tasks if t not in run]
    regression = [t for t in run if TASKS.get(t).kind == "regression"]
    if regression:
        raise PtmlabError(f"task '{regression[0]}' is a regression task: this study compares classifiers, pick "
                          f"classification tasks")
    return run or ["tweets"], skipped


def _task_seed(a: StaticContextualArgs, task: str, seed: int, out: Path, model, tokenizer) -> dict:
    from ptmlab.data.encode import encode_split
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.studies.common import command_config, dev_correct, finetune_variant
    from ptmlab.train.args import FinetuneConfig

    cfg = command_config(a, FinetuneConfig, task=task, seed=seed, output=str(out / "finetuned"), tasks=[])
    data = load_task_data(cfg)
    enc = {k: encode_split(tokenizer, data.splits[k], a.max_length) for k in ("train", "dev")}
    pad, special = tokenizer.pad_token_id or 0, set(tokenizer.all_special_ids)
    feats = {k: pooled_features(model, e, pad, special) for k, e in enc.items()}
    res = {"dev_examples": len(enc["dev"]), "train_examples": len(enc["train"]),
           "gold": [int(x) for x in enc["dev"].labels]}
    for i, name in enumerate(("static", "contextual")):
        res[name] = probe(feats["train"][i], enc["train"].labels, feats["dev"][i], enc["dev"].labels, a.probe_c,
                          seed)
    if a.finetune:
        finetune_variant(a, out / "finetuned", task=task, seed=seed, test=False)
        tuned = dev_correct(out / "finetuned")
        res["finetuned"] = tuned if tuned is not None and len(tuned) == len(res["static"]) else None
    return res


@STUDIES.register("static-vs-contextual", help="Q1: static (input) embeddings vs contextual features vs "
                                               "fine-tuning, same linear head")
def run(argv: list[str]) -> int:
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.studies.common import seed_dir, seed_list

    a = parse_study_args("static-vs-contextual", StaticContextualArgs, argv, __doc__, small=SMALL, full=FULL)
    tasks, skipped = resolve_tasks(a)
    seeds = seed_list(a)
    out = Path(a.output)
    model, tokenizer = load_model(a.model, task_head=False), load_tokenizer(a.model)
    rows, correct, gold = [], {}, {}
    for task in tasks:
        per_seed = [_task_seed(a, task, s, seed_dir(out / task, "runs", s, seeds), model, tokenizer) for s in seeds]
        correct[task] = {k: [r[k] for r in per_seed] for k in ("static", "contextual", "finetuned")
                         if all(r.get(k) is not None for r in per_seed)}
        gold[task] = [r["gold"] for r in per_seed]
        metric = metric_of(task)
        for system, runs in correct[task].items():
            scores = [score(r, g, metric) for r, g in zip(runs, gold[task], strict=True)]
            rows.append({"task": task, "system": system, "metric": metric, metric: float(np.mean(scores)),
                         "per_seed": [round(x, 4) for x in scores], "ci_95": None,
                         "dev_examples": per_seed[0]["dev_examples"], "train_examples": per_seed[0]["train_examples"]})
    v, estimates = decide(correct, gold)
    mcc_intervals = {t: {system: _gain(runs, None, gold[t], t, system).to_dict() for system, runs in c.items()}
                     for t, c in correct.items() if metric_of(t) == "mcc"}
    for task, est in estimates.items():
        how = "hierarchical bootstrap" if metric_of(task) == "accuracy" else "bootstrap over seeds and examples"
        rows.append({"task": task, "system": f"contextual - static ({how})",
                     "metric": metric_of(task), metric_of(task): est.value,
                     "ci_95": [round(est.low, 4), round(est.high, 4)]})
    write_study(out, f"Study: static vs contextual embeddings ({a.model})", rows, v,
                extra={"skipped": skipped, "tasks": tasks, "mcc_intervals": mcc_intervals,
                       "finetuned_minus_static": {t: _gain(c["finetuned"], c["static"], gold[t], t, "fine-tuning")
                                                  .to_dict() for t, c in correct.items() if "finetuned" in c}},
                claim=CLAIM, budget=a.budget, seeds=seeds, validity=validity)
    for reason in skipped:
        print(reason)
    return 0


def _gain(a_runs: list[list[float]], b_runs: list[list[float]] | None, gold: list[list[int]] | None, task: str,
          what: str) -> Estimate:
    """The gain of ``a`` over ``b`` in the task's metric (``b_runs`` None: ``a``'s own score): accuracy by a
    hierarchical bootstrap, MCC by ``bootstrap_statistic`` over seeds then dev examples (``gold``: per-seed dev
    labels)."""
    from ptmlab.data.metrics import mcc
    from ptmlab.studies.verdict import bootstrap_statistic, hierarchical_bootstrap

    metric = metric_of(task)
    name = f"{task}: {metric} " + (f"gain of {what} over static features" if b_runs is not None else f"of {what}")
    if metric == "accuracy":
        return hierarchical_bootstrap(a_runs, b_runs, name)
    if not gold or len(gold) != len(a_runs):
        raise PtmlabError(f"{task}: {metric} needs the gold dev labels of every seed")

    runs = []
    for k, g in enumerate(gold):
        rows = [predictions(a_runs[k], g), np.asarray(g)]
        runs.append(np.stack(rows + ([predictions(b_runs[k], g)] if b_runs is not None else [])))

    def statistic(run: np.ndarray, idx: np.ndarray) -> float:
        gain = mcc(run[0, idx], run[1, idx])
        return gain - mcc(run[2, idx], run[1, idx]) if len(run) > 2 else gain

    return bootstrap_statistic(statistic, runs, len(gold[0]), name)


def decide(correct: dict[str, dict[str, list[list[float]]]],
           gold: dict[str, list[list[int]]] | None = None) -> tuple[Verdict, dict[str, Estimate]]:
    """The rule of ``CLAIM``: ``correct[task]["static" | "contextual"]`` are per-seed, per-dev-example 1/0
    correctness in the same example order; ``gold[task]`` the per-seed dev labels (needed where the task's metric
    is MCC). Returns the verdict and each task's estimate."""
    if not correct:
        return Verdict(INCONCLUSIVE, "no task ran"), {}
    parts, estimates = [], {}
    for task, c in correct.items():
        if "static" not in c or "contextual" not in c:
            parts.append(Verdict(INCONCLUSIVE, f"{task}: static or contextual results missing"))
            continue
        if metric_of(task) != "accuracy" and not (gold or {}).get(task):
            parts.append(Verdict(INCONCLUSIVE, f"{task}: gold labels missing: its {metric_of(task)} is unmeasured"))
            continue
        est = _gain(c["contextual"], c["static"], (gold or {}).get(task), task, "contextual")
        estimates[task] = est
        parts.append(decide_above(est, 0.0))
    return combine(parts), estimates


def _above(record: dict, task: str, metric: str, system: str, scores: list) -> Condition:
    """``system`` above ``task``'s trivial predictor: from the recorded bootstrap interval of its MCC where the run
    recorded one (``mcc_intervals``), else from its per-seed scores (a t interval over seeds)."""
    from ptmlab.studies.common import above_trivial, eval_size
    from ptmlab.studies.verdict import ROUNDING

    est = ((record.get("mcc_intervals") or {}).get(task) or {}).get(system) if metric == "mcc" else None
    if isinstance(est, dict):
        return Condition.check(f"{task} mcc of {system} minus the trivial predictor 0 (lower end of its interval: "
                               f"{est.get('method')})", est.get("low"), ">", ROUNDING)
    return above_trivial(record, task, metric, {system: scores}, eval_size(record, 500))[0]


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record: per task, the fine-tuned encoder above the trivial
    predictor, and the better of the static and contextual systems above it (per-seed scores, or the recorded MCC
    intervals)."""
    conds = []
    for task in record.get("tasks") or []:
        systems = {str(r["system"]): r["per_seed"] for r in record.get("rows") or []
                   if r.get("task") == task and isinstance(r.get("per_seed"), list)}
        metric = next((r.get("metric") for r in record.get("rows") or [] if r.get("task") == task), None) \
            or "accuracy"
        conds.append(_above(record, task, metric, "finetuned", systems["finetuned"]) if "finetuned" in systems else
                     Condition.check(f"{task} {metric} of the fine-tuned encoder above the trivial predictor", None,
                                     ">", 0, missing="not run (--no-finetune): whether the model learns the task "
                                                     "is not established"))
        frozen = [_above(record, task, metric, name, systems.get(name) or []) for name in ("static", "contextual")]
        ends = ", ".join(f"{n} {c.value:.4f}" if c.value is not None else f"{n} none"
                         for n, c in zip(("static", "contextual"), frozen, strict=True))
        lows = [c.value for c in frozen if c.value is not None]
        conds.append(Condition.check(f"{task} {metric}: the higher of static's and contextual's margins over the "
                                     f"trivial predictor (lower ends: {ends})", max(lows) if lows else None, ">",
                                     frozen[0].threshold))
    return conds or [Condition.check("every task: no task ran", None, ">", 0)]


def restate(record: dict, name: str = "static-vs-contextual") -> Verdict | None:
    """The rule on the record's per-seed scores (accuracy, or the row's ``metric``): per task, a paired t interval
    over seeds of contextual minus static (the recorded intervals pooled the seeds' copies of each example). None
    for a record of the current design (``mcc_intervals``: its rule's intervals came from per-example numbers)."""
    from ptmlab.studies.verdict import paired_seeds

    if "mcc_intervals" in record:
        return None
    parts = []
    for task in record.get("tasks") or []:
        ps = {str(r["system"]): r["per_seed"] for r in record.get("rows") or []
              if r.get("task") == task and isinstance(r.get("per_seed"), list)}
        if "static" not in ps or "contextual" not in ps:
            return None
        metric = next((r.get("metric") for r in record.get("rows") or [] if r.get("task") == task), None)
        parts.append(decide_above(paired_seeds(ps["contextual"], ps["static"],
                                               f"{task}: {metric or 'accuracy'} gain of contextual over static "
                                               "features")))
    return combine(parts) if parts else None
