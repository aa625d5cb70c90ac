"""Study ``static-vs-contextual`` (Q1: the first generation of PTMs): do contextual representations beat static
word embeddings on the same tasks with the same classifier?

Claim: contextual encoders (second-generation PTMs) give better sentence features than static word embeddings
(first generation: word2vec/GloVe, one vector per word whatever its context). Source: Q1 (the PTM survey's two
generations); Peters et al. 2018 (ELMo) and Devlin et al. 2019 report large gains over static-embedding baselines.

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test), per task: the fine-tuned
encoder is above the task's trivial predictor (majority-class accuracy; for CoLA, scored by MCC, a constant
predictor's 0), so the model at this budget learns the task at all; and at least one of the static and the contextual
system is above it, so the comparison is not a tie of two constant predictors (a static system at chance beside a
contextual one above it is the claim's own case). "Above" is the lower end of the system's interval (the rule's
bootstrap, over seeds then examples) above the trivial score of the sentences it was scored on: the dev sentences,
or for cross-fitted probes the pool's majority share.

Rule: per task, in the task's own metric (accuracy; CoLA: Matthews correlation, as GLUE scores it, since a majority
predictor already has 69% accuracy there), the gain of frozen contextual features over static embeddings, same
logistic-regression head, with a 95% interval from a bootstrap over seeds, then examples (accuracy: the mean gain;
MCC: the gain in MCC); seeds whose runs are identical, as when every seed trains on the whole training set, count as
one run, and so do cross-fitted probes (--probe-folds K: every training and dev sentence scored by probes trained on
the other folds, which do not depend on the seed); supported when above 0 on every task, not supported when below 0
on any task, inconclusive otherwise.

The three systems, per task and seed, on the same training subset and the same dev examples:

- static: the model's own input (word-piece) embeddings, mean-pooled over the sentence's real non-special tokens
  (no contextualisation at all), then a standardised logistic regression trained on the training subset;
- contextual (frozen): the same model's last hidden state, mean-pooled over the same tokens, the same head;
- fine-tuned: the whole encoder fine-tuned on the task (``finetune_variant``), reported beside the rule.

Cross-fitted probes (``--probe-folds K``, with ``--max-eval 0``): the training subset seed 0 draws and every dev
sentence form one pool, split into K stratified folds with a fixed shuffle; each sentence is scored by the static and
the contextual probe trained on the other K-1 folds, so every labelled sentence counts in the rule, not only the dev
ones, and no probe scores a sentence it trained on. The probes then do not depend on the seed (one run); the seeds
still fine-tune the encoder, scored on the dev sentences, and its gain over static features is taken on the pool's
dev part. The interval treats the K fitted probes as fixed: it leaves out how much the probes would change with other
folds, for which K-fold cross-validation has no unbiased variance estimate (Bengio and Grandvalet 2004); with 80% of
the pool behind each probe that part is small next to the sentences' own noise.

Using the same model's input embeddings keeps vocabulary and width equal, so only contextualisation differs (no
word-vector library is installed, so no word2vec baseline is trained). Tasks: sst2 and cola (single sentences); without
the GLUE data they are skipped with the reason and the built-in tweets task runs instead. ``--budget small``: the
tiny model, tweets, one seed; default and full: three seeds.

Designs. ``--budget full``: CoLA's whole training set (8,551 rows; SST-2 draws as many of its rows per seed), 3
epochs of fine-tuning, seeds 0-2, every dev sentence. ``--probe-folds 5`` cross-fits the probes over every labelled
sentence at hand (CoLA 9,594, SST-2 9,423), narrowing the interval that the dev sentences' noise left wide. Both
were fixed after earlier runs of the study had read every CoLA and SST-2 dev sentence, so their results are
exploratory. ``--score-on fresh`` scores the probes on training sentences that no fine-tuning of seeds 0 to the
largest seed reads (``studies.fresh``): the confirmatory design for SST-2. CoLA has no labelled sentence left that
the earlier runs did not read (its whole training set was read, its test labels are not public), so its part can
only be exploratory with the data at hand. Every run keeps each probe's per-sentence correctness and the labels
(``evidence``), from which ``restate`` recomputes the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmlab.core.config import at_least, opt
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
         "embeddings, same logistic-regression head, with a 95% interval from a bootstrap over seeds, then examples "
         "(accuracy: the mean gain; MCC: the gain in MCC); seeds whose runs are identical, as when every seed trains "
         "on the whole training set, count as one run, and so do cross-fitted probes (--probe-folds K: every "
         "training and dev sentence scored by probes trained on the other folds, which do not depend on the seed); "
         "supported when above 0 on every task, not supported when below 0 on any task, inconclusive otherwise",
    conditions=(
        "per task, the fine-tuned encoder above the task's trivial predictor (majority-class accuracy; for CoLA, "
        "scored by MCC, 0): the lower end of its interval (the rule's bootstrap, over seeds then examples)",
        "per task, at least one of the static and the contextual system above the trivial predictor of the "
        "sentences it was scored on (cross-fitted probes: the pool's majority share), the same way",
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
    probe_folds: int = opt(0, "cross-fit the probes: pool the training subset with every dev sentence, split the "
                                 "pool into K stratified folds (the same for every seed) and score each sentence with "
                                 "probes trained on the other K-1 folds (0: train on the training subset, score the "
                                 "dev sentences); needs --max-eval 0")
    probe_c: float = opt(0.0, "inverse L2 strength of the logistic-regression head (0: chosen by 3-fold "
                              "cross-validation on the training subset, separately for each system)")
    score_on: str = opt("dev", "sentences the probes are scored on: dev, or fresh (training sentences that no "
                               "fine-tuning of seeds 0 to the largest seed reads, outside dev: studies.fresh; "
                               "--fresh-rows of them, of at least --min-words words)", choices=("dev", "fresh"))
    fresh_rows: int = opt(2000, "--score-on fresh: how many fresh sentences per task (0: all)")
    min_words: int = opt(10, "--score-on fresh: only sentences of at least this many words")
    output: str = opt("runs/study-static-contextual", "output directory")

    def validate(self) -> None:
        super().validate()
        at_least(self, 0, "probe_folds", "probe_c")
        if self.probe_folds == 1:
            raise PtmlabError("--probe-folds 1 leaves no fold to train on: give 0 (no cross-fitting) or 2 or more")
        at_least(self, 0, "fresh_rows")
        at_least(self, 1, "min_words")
        if self.score_on == "fresh" and self.probe_folds:
            raise PtmlabError("--score-on fresh scores probes trained on each seed's training subset: drop "
                              "--probe-folds (cross-fitting scores the training and dev sentences themselves)")


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
    from ptmlab.core.progress import progress

    model.eval()
    static, contextual = [], []
    with torch.no_grad():
        for start in progress(range(0, len(enc), batch_size), desc="features"):
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


def cross_fit(x: np.ndarray, y, folds: int, c: float = 0.0) -> list[float]:
    """Per example of ``x`` 1.0 / 0.0 correctness of a probe (``probe``) that did not train on it: the examples are
    split into ``folds`` stratified folds (shuffled with a fixed seed, so the folds do not depend on the run's seed)
    and each fold is scored by the probe trained on the others."""
    from sklearn.model_selection import StratifiedKFold

    from ptmlab.core.progress import progress

    y = np.asarray(y)
    smallest = int(np.unique(y, return_counts=True)[1].min()) if len(y) else 0
    if folds < 2 or smallest < folds:
        raise PtmlabError(f"--probe-folds {folds}: needs at least 2 folds and at least as many examples of every "
                          f"label (the rarest has {smallest}): lower --probe-folds or raise --max-train")
    out = np.zeros(len(y))
    splits = StratifiedKFold(n_splits=folds, shuffle=True, random_state=0).split(x, y)
    for train, test in progress(splits, total=folds, desc="cross-fitted probes"):
        out[test] = probe(x[train], y[train], x[test], y[test], c)
    return out.tolist()


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


def _encoded(a: StaticContextualArgs, task: str, seed: int, out: Path, tokenizer):
    """(the fine-tuning config, the encoded training subset and dev examples) of ``task`` for ``seed``."""
    from ptmlab.data.encode import encode_split
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.studies.common import command_config
    from ptmlab.train.args import FinetuneConfig

    cfg = command_config(a, FinetuneConfig, task=task, seed=seed, output=str(out / "finetuned"), tasks=[])
    data = load_task_data(cfg)
    return cfg, {k: encode_split(tokenizer, data.splits[k], a.max_length) for k in ("train", "dev")}


def _cross_fitted(a: StaticContextualArgs, task: str, out: Path, model, tokenizer) -> dict:
    """The probes of the cross-fitted design: the training subset (the one seed 0 draws) and every dev sentence
    pooled, each sentence scored by static and contextual probes trained on the other folds (``cross_fit``).
    ``dev_from``: where the dev sentences start in the pool."""
    _, enc = _encoded(a, task, 0, out, tokenizer)
    pad, special = tokenizer.pad_token_id or 0, set(tokenizer.all_special_ids)
    feats = [pooled_features(model, enc[k], pad, special) for k in ("train", "dev")]
    gold = [int(x) for k in ("train", "dev") for x in enc[k].labels]
    res = {"gold": gold, "dev_from": len(enc["train"]), "pool_examples": len(gold)}
    for i, name in enumerate(("static", "contextual")):
        res[name] = cross_fit(np.concatenate([f[i] for f in feats]), gold, a.probe_folds, a.probe_c)
    return res


def _task_seed(a: StaticContextualArgs, task: str, seed: int, out: Path, model, tokenizer,
               probes: bool = True, fresh=None) -> dict:
    """One seed of ``task``: the probes trained on its training subset and scored on the dev examples, or on
    ``fresh`` rows when given (unless ``probes`` is False: the cross-fitted design scores them once,
    ``_cross_fitted``), and the fine-tuned encoder (scored on dev)."""
    from ptmlab.data.encode import encode_split
    from ptmlab.studies.common import dev_correct, finetune_variant

    _, enc = _encoded(a, task, seed, out, tokenizer)
    if fresh is not None:
        enc["scored"] = encode_split(tokenizer, fresh, a.max_length)
    scored = "scored" if fresh is not None else "dev"
    res = {"dev_examples": len(enc["dev"]), "train_examples": len(enc["train"]),
           "gold": [int(x) for x in enc["dev"].labels], "scored_gold": [int(x) for x in enc[scored].labels]}
    if probes:
        pad, special = tokenizer.pad_token_id or 0, set(tokenizer.all_special_ids)
        feats = {k: pooled_features(model, enc[k], pad, special) for k in ("train", scored)}
        for i, name in enumerate(("static", "contextual")):
            res[name] = probe(feats["train"][i], enc["train"].labels, feats[scored][i], enc[scored].labels,
                              a.probe_c, seed)
    if a.finetune:
        finetune_variant(a, out / "finetuned", task=task, seed=seed, test=False)
        tuned = dev_correct(out / "finetuned")
        res["finetuned"] = tuned if tuned is not None and len(tuned) == len(res["gold"]) else None
    return res


RERUN = ("the run kept no per-sentence records; the current code keeps every probe's per-sentence correctness and "
         "labels (evidence), and --score-on fresh scores sentences no earlier run read")


def fresh_for(a: StaticContextualArgs, task: str, seeds: list[int]):
    """``--score-on fresh``: the task's fresh rows for fine-tunings of seeds 0 to the largest seed (else None)."""
    from ptmlab.studies.fresh import fresh_rows

    if a.score_on != "fresh":
        return None
    return fresh_rows(task, a.glue_dir, a.max_train, max(seeds), a.fresh_rows, a.min_words)


def data_split(cfg) -> dict:
    """What the preregistration adds to the rows it hashes: with ``--score-on fresh``, each task's scored rows."""
    from ptmlab.studies.fresh import rows_hash

    if getattr(cfg, "score_on", "dev") != "fresh":
        return {}
    seeds = [int(s) for s in cfg.seeds] or [cfg.seed]
    out = {}
    for task in cfg.tasks:
        try:
            out[task] = rows_hash(fresh_for(cfg, task, seeds))
        except (PtmlabError, OSError, ValueError, KeyError) as e:
            out[task] = {"note": f"not at hand here ({str(e).splitlines()[0][:120]})"}
    return {"scored": out}


@STUDIES.register("static-vs-contextual", help="Q1: static (input) embeddings vs contextual features vs "
                                               "fine-tuning, same linear head")
def run(argv: list[str]) -> int:
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.studies.common import majority_share, seed_dir, seed_list

    a = parse_study_args("static-vs-contextual", StaticContextualArgs, argv, __doc__, small=SMALL, full=FULL)
    if a.probe_folds and a.max_eval:
        raise PtmlabError(f"--probe-folds scores every dev sentence: pass --max-eval 0 (got --max-eval {a.max_eval})")
    tasks, skipped = resolve_tasks(a)
    seeds = seed_list(a)
    out = Path(a.output)
    model, tokenizer = load_model(a.model, task_head=False), load_tokenizer(a.model)
    rows, correct, gold, tuned_gold, intervals, pools = [], {}, {}, {}, {}, {}
    cross = bool(a.probe_folds)
    evidence, fresh_sizes = {}, {}
    for task in tasks:
        fresh = fresh_for(a, task, seeds)
        if fresh is not None:
            fresh_sizes[task] = len(fresh)
        per_seed = [_task_seed(a, task, s, seed_dir(out / task, "runs", s, seeds), model, tokenizer, probes=not cross,
                               fresh=fresh) for s in seeds]
        tuned_gold[task] = [r["gold"] for r in per_seed]
        if cross:
            pool = _cross_fitted(a, task, out / task, model, tokenizer)
            if any(pool["gold"][pool["dev_from"]:] != g for g in tuned_gold[task]):
                raise PtmlabError(f"{task}: the pooled dev sentences are not the ones the fine-tuned runs scored")
            correct[task] = {k: [pool[k]] * len(seeds) for k in ("static", "contextual")}
            gold[task] = [pool["gold"]] * len(seeds)
            pools[task] = {"examples": pool["pool_examples"], "dev_from": pool["dev_from"], "folds": a.probe_folds}
        else:
            correct[task] = {k: [r[k] for r in per_seed] for k in ("static", "contextual")}
            gold[task] = [r["scored_gold"] for r in per_seed]
        if all(r.get("finetuned") is not None for r in per_seed):
            correct[task]["finetuned"] = [r["finetuned"] for r in per_seed]
        metric, intervals[task] = metric_of(task), {}
        for system, runs in correct[task].items():
            g = tuned_gold[task] if system == "finetuned" else gold[task]
            scores = [score(r, x, metric) for r, x in zip(runs, g, strict=True)]
            est = _gain(runs, None, g, task, system, one_run=cross and system != "finetuned")
            trivial = 0.0 if metric == "mcc" else float(np.mean([majority_share(x) for x in g]))
            intervals[task][system] = {**est.to_dict(), "trivial": trivial}
            scored = "dev" if system == "finetuned" or not (cross or fresh is not None) else \
                f"fresh: {len(g[0])} training sentences no fine-tuning read" if fresh is not None else \
                f"cross-fitted: {len(g[0])} training and dev sentences, {a.probe_folds} folds"
            rows.append({"task": task, "system": system, "metric": metric, metric: float(np.mean(scores)),
                         "per_seed": [round(x, 4) for x in scores], "ci_95": [_r(est.low), _r(est.high)],
                         "scored_on": scored, "examples": len(g[0]),
                         "dev_examples": per_seed[0]["dev_examples"], "train_examples": per_seed[0]["train_examples"]})
        evidence[task] = _evidence(correct[task], gold[task], tuned_gold[task])
    v, estimates = decide(correct, gold, one_run=cross)
    for task, est in estimates.items():
        how = ("cross-fitted, bootstrap over examples" if cross else
               "hierarchical bootstrap" if metric_of(task) == "accuracy" else "bootstrap over seeds and examples")
        rows.append({"task": task, "system": f"contextual - static ({how})",
                     "metric": metric_of(task), metric_of(task): est.value,
                     "ci_95": [round(est.low, 4), round(est.high, 4)]})

    def static_on_dev(task: str) -> list[list[float]]:
        runs = correct[task]["static"]
        return [r[pools[task]["dev_from"]:] for r in runs] if cross else runs

    write_study(out, f"Study: static vs contextual embeddings ({a.model})", rows, v,
                extra={"skipped": skipped, "tasks": tasks, "intervals": intervals, "probe_pool": pools or None,
                       "scored_on": a.score_on, "fresh_rows": fresh_sizes or None,
                       "finetuned_minus_static": {t: _gain(c["finetuned"], static_on_dev(t), tuned_gold[t], t,
                                                           "fine-tuning").to_dict()
                                                  for t, c in correct.items()
                                                  if "finetuned" in c and t not in fresh_sizes},
                       "evidence": evidence},
                claim=CLAIM, budget=a.budget, seeds=seeds, validity=validity)
    for reason in skipped:
        print(reason)
    return 0


def _labels(gold: list[int]):
    """One seed's labels as kept: packed bits for a binary task, else the list."""
    from ptmlab.studies.evidence import pack_bits

    return pack_bits(gold) if set(gold) <= {0, 1} else [int(x) for x in gold]


def _unlabels(kept) -> list[int]:
    from ptmlab.studies.evidence import unpack_bits

    return [int(x) for x in (unpack_bits(kept) if isinstance(kept, str) else kept)]


def _evidence(correct: dict, gold: list[list[int]], tuned_gold: list[list[int]]) -> dict:
    """A task's records for ``restate``: every system's per-seed, per-sentence correctness and the labels."""
    from ptmlab.studies.evidence import pack_runs

    return {**{k: pack_runs(v) for k, v in correct.items()}, "gold": [_labels(g) for g in gold],
            "finetuned_gold": [_labels(g) for g in tuned_gold]}


def _r(x: float) -> float | None:
    return round(x, 4) if np.isfinite(x) else None


def _gain(a_runs: list[list[float]], b_runs: list[list[float]] | None, gold: list[list[int]] | None, task: str,
          what: str, one_run: bool = False) -> Estimate:
    """The gain of ``a`` over ``b`` in the task's metric (``b_runs`` None: ``a``'s own score), over seeds then the
    examples (``gold``: per-seed labels of the examples scored). Seeds whose runs are identical, or systems that are
    one run by construction (``one_run``: cross-fitted probes), are one run bootstrapped over examples
    (``bootstrap_statistic``, for accuracy too); otherwise accuracy by a hierarchical bootstrap and MCC by
    ``bootstrap_statistic``."""
    from ptmlab.data.metrics import mcc
    from ptmlab.studies.verdict import bootstrap_statistic, hierarchical_bootstrap

    metric = metric_of(task)
    name = f"{task}: {metric} " + (f"gain of {what} over static features" if b_runs is not None else f"of {what}")
    n = len(a_runs[0])
    if metric == "accuracy":
        d = np.asarray(a_runs, dtype=float) - (np.asarray(b_runs, dtype=float) if b_runs is not None else 0.0)
        if one_run or (len(d) > 1 and all(np.array_equal(r, d[0]) for r in d[1:])):
            return bootstrap_statistic(lambda run, idx: float(run[idx].mean()), list(d), n, name, one_run=one_run)
        return hierarchical_bootstrap(a_runs, b_runs, name)
    if not gold or len(gold) != len(a_runs):
        raise PtmlabError(f"{task}: {metric} needs the gold labels of every seed")

    runs = []
    for k, g in enumerate(gold):
        rows = [predictions(a_runs[k], g), np.asarray(g)]
        runs.append(np.stack(rows + ([predictions(b_runs[k], g)] if b_runs is not None else [])))

    def statistic(run: np.ndarray, idx: np.ndarray) -> float:
        gain = mcc(run[0, idx], run[1, idx])
        return gain - mcc(run[2, idx], run[1, idx]) if len(run) > 2 else gain

    return bootstrap_statistic(statistic, runs, n, name, one_run=one_run)


def decide(correct: dict[str, dict[str, list[list[float]]]], gold: dict[str, list[list[int]]] | None = None,
           one_run: bool = False) -> tuple[Verdict, dict[str, Estimate]]:
    """The rule of ``CLAIM``: ``correct[task]["static" | "contextual"]`` are per-seed, per-example 1/0 correctness
    in the same example order; ``gold[task]`` the per-seed labels of those examples (needed where the task's metric
    is MCC); ``one_run``: the probes are one run whatever the seed (cross-fitted). Returns the verdict and each
    task's estimate."""
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
        est = _gain(c["contextual"], c["static"], (gold or {}).get(task), task, "contextual", one_run)
        estimates[task] = est
        parts.append(decide_above(est, 0.0))
    return combine(parts), estimates


def _above(record: dict, task: str, metric: str, system: str, scores: list) -> Condition:
    """``system`` above ``task``'s trivial predictor: from the recorded interval of its score and the trivial score
    of the examples it was scored on (``intervals``), else from the recorded bootstrap interval of its MCC (an
    earlier record's ``mcc_intervals``), else from its per-seed scores (a t interval over seeds)."""
    from ptmlab.studies.common import above_trivial, eval_size
    from ptmlab.studies.verdict import ROUNDING

    iv = ((record.get("intervals") or {}).get(task) or {}).get(system)
    if isinstance(iv, dict):
        low, trivial = iv.get("low"), iv.get("trivial")
        margin = low - trivial if isinstance(low, int | float) and isinstance(trivial, int | float) else None
        return Condition.check(f"{task} {metric} of {system} minus the trivial predictor "
                               f"{float(trivial or 0):.4f} (lower end of its interval: {iv.get('method')})",
                               margin, ">", ROUNDING, missing="one seed gives no interval: not established")
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


def recomputed_from(record: dict) -> tuple[str, str]:
    """How ``restate`` recomputed ``record``'s verdict (``rederive``'s ``recompute`` block)."""
    from ptmlab.studies.evidence import recomputed_or_partly

    return recomputed_or_partly(record, "every seed's per-sentence correctness of both probes and the labels",
                                "the record's per-seed scores (a t interval over seeds)")


def restate(record: dict, name: str = "static-vs-contextual") -> Verdict | None:
    """The rule on the record's per-sentence records (``evidence``) where it keeps them; else on its per-seed scores
    (accuracy, or the row's ``metric``): per task, a paired t interval over seeds of contextual minus static (the
    recorded intervals pooled the seeds' copies of each example). None for a record of an earlier design without
    records (``intervals`` or ``mcc_intervals``: its rule's intervals came from per-example numbers not kept)."""
    from ptmlab.studies.evidence import evidence_of, unpack_runs
    from ptmlab.studies.verdict import paired_seeds

    ev = evidence_of(record)
    if ev:
        correct = {t: {k: [r.tolist() for r in unpack_runs(e[k])] for k in ("static", "contextual")}
                   for t, e in ev.items()}
        gold = {t: [_unlabels(g) for g in e["gold"]] for t, e in ev.items()}
        return decide(correct, gold, one_run=bool(record.get("probe_pool")))[0]
    if "mcc_intervals" in record or "intervals" in record:
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
