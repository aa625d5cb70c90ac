"""What the pre-training studies (``objectives``, ``span-corruption``, ``domain-adaptation``,
``tokenizers-downstream``) share: their options, one pre-training per variant and seed (reused when finished,
resumed when killed), fine-tuning it on every task, mean ± spread over seeds, and the noise-aware verdict rule.

Spread is the largest distance of a seed's number from the mean (half the range with two seeds), so ``mean ±
spread`` covers every seed's number: the table shows it. The verdicts do not rest on it: the claimed variant is
compared with each rival seed by seed (the same seed pre-trains and fine-tunes both), and the mean paired difference
gets a 95% Student-t interval (``studies.verdict.paired_seeds``); ``compare_rivals`` decides every rival against a
threshold and combines them. One seed gives an unbounded interval, so ``--budget small`` (one seed) always says
inconclusive: it checks the machinery, not the claim.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import at_least, build_config, opt, positive
from ptmlab.core.errors import PtmlabError
from ptmlab.data.shared import CORPORA, CORPUS_HELP, more_text, shared_data_dir
from ptmlab.studies.common import StudyArgs, finetune_run
from ptmlab.studies.verdict import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    Verdict,
    decide_above,
    decide_noninferior,
    paired_seeds,
    same_within_seeds,
)

# with --budget small: tiny subsets and ONE seed so that a study runs in about a minute on two cores (tests, CI);
# its verdict is then inconclusive by construction
SMALL_FINETUNE = dict(max_train=64, max_eval=64, max_length=32, batch_size=16, epochs=1.0, eval_batch_size=64,
                      seeds=["0"])
# with --budget full: three seeds and the whole dev sets
FULL_PRETRAIN = dict(seeds=["0", "1", "2"], max_eval=None)
# with --budget gpu, what every pre-training study's GPU budget shares (each adds its length of pre-training): the
# full budget, on the shared English text (WikiText-2 and the Gutenberg books, 1.73M minilm tokens, so that the
# thousands of steps it takes to leave the unigram plateau repeat the text less), in bf16 where the device has it,
# every model fine-tuned on its tasks' whole training sets (fine-tuning is seconds on a GPU; the trivial predictor
# is harder to beat with 2,000 rows)
GPU_PRETRAIN = dict(FULL_PRETRAIN, corpus="english", precision="auto", max_train=None)


@dataclass(frozen=True)
class PretrainStudyArgs(StudyArgs):
    """Pre-training options of a study (models from scratch), then the fine-tuning options every variant shares."""

    files: list[str] = opt([], "pre-training text: files or folders (default: the shared text --corpus names "
                               "when present, else the built-in tweets' training text)")
    corpus: str = opt("wikitext-2", CORPUS_HELP, choices=list(CORPORA))
    tokenizer: str = opt("minilm", "tokenizer of the models pre-trained from scratch")
    size: str = opt("mini", "named size of the models pre-trained from scratch: tiny mini small base")
    layers: int = opt(0, "transformer layers (0: from --size)")
    hidden: int = opt(0, "hidden size (0: from --size)")
    heads: int = opt(0, "attention heads (0: from --size)")
    ffn: int = opt(0, "feed-forward size (0: from --size)")
    block_size: int = opt(128, "tokens per pre-training block")
    pretrain_batch_size: int = opt(32, "blocks per pre-training step")
    pretrain_lr: float = opt(5e-4, "peak learning rate of pre-training")
    max_flops: float = opt(2e13, "pre-training FLOPs of every variant (6N per token plus attention)")
    eval_blocks: int = opt(256, "held-out blocks for the pre-training eval loss")
    seeds: list[str] = opt(["0", "1"], "seeds: each variant is pre-trained and fine-tuned once per seed")
    tasks: list[str] = opt([], "fine-tuning tasks (default: sst2 and mrpc when GLUE data is present, else tweets)")
    task: str = opt("", "unused by pre-training studies: see --tasks")
    model: str = opt("minilm", "unused by studies that pre-train from scratch")
    max_train: int | None = opt(2000, "training examples of every fine-tuning")
    max_eval: int | None = opt(872, "dev examples of every fine-tuning")
    max_length: int = opt(64, "max tokens of every fine-tuning")
    epochs: float = opt(2.0, "epochs of every fine-tuning (the same for every variant)")
    lr: float = opt(1e-4, "learning rate of every fine-tuning")
    precision: str = opt("fp32", "fp32, bf16, or auto, for pre-training and fine-tuning",
                         choices=["auto", "fp32", "bf16"])

    def validate(self) -> None:
        super().validate()
        check_seeds(self.seeds)
        if not self.max_flops > 0:
            raise PtmlabError(f"--max-flops must be positive, got {self.max_flops}")
        at_least(self, 1, "pretrain_batch_size")
        at_least(self, 8, "block_size")
        at_least(self, 0, "eval_blocks", "layers", "hidden", "heads", "ffn")  # 0: from --size
        positive(self, "pretrain_lr")


# ------------------------------------------------------------------------------------------------ inputs
def numbers(values: list, name: str, kind=float) -> list:
    """Comma-separated option values as numbers; PtmlabError naming the bad entry."""
    out = []
    for v in values:
        try:
            out.append(kind(v))
        except (TypeError, ValueError):
            raise PtmlabError(f"--{name} entry '{v}' is not a{'n integer' if kind is int else ' number'}") from None
    return out


def check_seeds(values: list) -> list[int]:
    """--seeds as distinct integers, at least one."""
    seeds = numbers(values, "seeds", int)
    if not seeds or len(set(seeds)) != len(seeds):
        raise PtmlabError(f"--seeds must be distinct and not empty, got {','.join(map(str, values))}")
    return seeds


def shared_dir() -> Path:
    """The shared data folder (``data.shared.shared_data_dir``), or where it would be when it is absent."""
    return shared_data_dir() or Path.cwd().parent / "shared" / "data"


def default_tasks() -> list[str]:
    from ptmlab.data.loaders import default_glue_dir

    return ["sst2", "mrpc"] if default_glue_dir() else ["tweets"]


def study_tasks(a) -> list[str]:
    """--tasks, else the defaults (only the first with --budget small)."""
    return list(a.tasks) or default_tasks()[:1 if a.budget == "small" else None]


def task_text_file(path: Path, task: str, glue_dir: str | None = None, limit: int | None = None) -> Path:
    """A task's training text (no labels), one document per example, written to ``path``."""
    from ptmlab.core.io import atomic_write_text
    from ptmlab.data.loaders import load_task

    text = load_task(task, glue_dir).splits["train"].text[:limit]
    atomic_write_text(path, "\n\n".join(" ".join(t.split()) for t in text) + "\n")
    return path


def tweets_text_file(out: Path, limit: int | None = None) -> Path:
    """The built-in tweets' training text, written under ``out``."""
    return task_text_file(out / "tweets-train.txt", "tweets", limit=limit)


def corpus_files(a, out: Path) -> list[str]:
    """--files, else the shared text --corpus names (WikiText-2, with --corpus english the Gutenberg books too), else
    the tweets' training text."""
    if a.files:
        return list(a.files)
    wiki = shared_dir() / "text" / "wikitext-2"
    if wiki.is_dir():
        return [str(wiki), *more_text(a.corpus, out / "data")]
    if a.corpus != "wikitext-2":
        raise PtmlabError(f"--corpus {a.corpus} needs the shared text (../shared/data/text): pass --files instead")
    return [str(tweets_text_file(out))]


# ------------------------------------------------------------------------------------------------ runs
def pretrain_config(a, out: Path, seed: int, **overrides):
    """The ``PretrainConfig`` of one variant: the study's model, data and budget, then ``overrides``."""
    from ptmlab.pretrain.config import PretrainConfig

    values = dict(files=corpus_files(a, out.parent), tokenizer=a.tokenizer, size=a.size, layers=a.layers,
                  hidden=a.hidden, heads=a.heads, ffn=a.ffn, block_size=a.block_size,
                  batch_size=a.pretrain_batch_size, lr=a.pretrain_lr, max_flops=a.max_flops,
                  eval_blocks=a.eval_blocks, seed=seed, precision=a.precision, output=str(out), overwrite=True,
                  eval_steps=0, save_steps=200, logging_steps=10)
    values.update(overrides)
    return build_config(PretrainConfig, values, source="study")


def pretrain_variant(cfg, overwrite: bool = False) -> dict:
    """Run one pre-training; a finished run (summary.json) is reused, a killed one resumed from its checkpoint."""
    from ptmlab.pretrain.run import run_pretrain
    from ptmlab.studies.common import finished_variant

    out = Path(cfg.output)
    if not overwrite:
        done = finished_variant(out, cfg)
        if done is not None:
            return done
        if (out / "checkpoint").is_dir():
            return run_pretrain(cfg, resume=True, command="study")
    return run_pretrain(cfg, command="study")


def pretrain_grid(a, cells: dict, tasks: list[str]) -> dict:
    """Pre-train every cell of a study's grid and fine-tune each model on every task (into
    ``<run dir>-ft-<task>``), as two rounds of independent runs on the study's executor (``executor.run_grid``).

    ``cells`` maps a key to ``(run_dir, seed, PretrainConfig)``; returns ``{key: (pre-training summary, {task: main
    dev metric})}``, keys in the order given."""
    from ptmlab.studies.executor import Run, run_grid

    pre = run_grid(a, {k: Run(pretrain_variant, d, (cfg, a.overwrite)) for k, (d, _, cfg) in cells.items()})
    ft = run_grid(a, {(k, t): finetune_run(a, d.parent / f"{d.name}-ft-{t}", model=str(d), task=t, seed=seed,
                                           test=False) for k, (d, seed, _) in cells.items() for t in tasks})
    return {k: (pre[k], {t: float(ft[k, t]["metrics"][ft[k, t]["main_metric"]]) for t in tasks}) for k in cells}


# ------------------------------------------------------------------------------------------------ numbers
def mean_spread(values: list[float]) -> tuple[float, float]:
    """Mean and the largest distance from it: ``mean ± spread`` covers every value."""
    if not values:
        raise ValueError("no values")
    mean = sum(values) / len(values)
    return mean, max(abs(v - mean) for v in values)


def fmt(values: list[float], digits: int = 4) -> str:
    m, s = mean_spread(values)
    return f"{m:.{digits}f} ± {s:.{digits}f}"


def margin(a: list[float], b: list[float]) -> tuple[float, float]:
    """(mean(a) - mean(b), the noise margin: the larger of the two spreads)."""
    (ma, sa), (mb, sb) = mean_spread(a), mean_spread(b)
    return ma - mb, max(sa, sb)


def compare_rivals(scores: dict[str, list[float]], claimed: str, threshold: float = 0.0,
                   metric: str = "score") -> Verdict:
    """The claimed variant against every rival, paired by seed: each mean difference ``claimed - rival`` with its
    t interval is decided by ``decide_above(est, 0)`` when the claimed variant must be better, and by
    ``decide_noninferior(est, -m)`` (one-sided 95% bounds) when it must be no worse than ``m`` below. Supported when
    every comparison is, not supported when any is not, else inconclusive; the estimate shown is the deciding
    comparison (the one that refutes, else the least certain).

    Every variant at the same score on every seed (every fine-tuned model predicting one class, as happens when a
    pre-training budget leaves the models untrained for the task) is inconclusive whatever the threshold: such a
    tie says the downstream cannot separate the variants, not that they are equal."""
    if claimed not in scores or len(scores) < 2:
        raise PtmlabError(f"the verdict needs '{claimed}' and at least one rival, got {sorted(scores)}")
    def rule(est):  # superiority: the two-sided interval above 0; non-inferiority: a one-sided bound above -m
        return decide_above(est, threshold) if threshold >= 0 else decide_noninferior(est, threshold)

    parts = {k: dataclasses.replace(rule(paired_seeds(scores[claimed], v, f"{metric}: {claimed} minus {k}")),
                                    name=f"against {k}")
             for k, v in scores.items() if k != claimed}
    if len(scores[claimed]) > 1 and same_within_seeds(scores):
        seeds = ", ".join(f"{x:.4f}" for x in scores[claimed])
        return Verdict(INCONCLUSIVE, f"downstream does not separate the variants: every variant has the same {metric} "
                                     f"on each seed ({seeds}), as when every fine-tuned model predicts one class; "
                                     f"a larger pre-training budget or longer fine-tuning is needed",
                       next(iter(parts.values())).estimate)
    return combine_parts(list(parts.values()))


def combine_parts(parts: list[Verdict]) -> Verdict:
    """``verdict.combine`` that keeps one estimate: the part that refutes (lowest upper bound), else the part
    with the lowest lower bound (the one nearest to failing)."""
    from ptmlab.studies.verdict import combine

    if len(parts) == 1:
        return parts[0]
    joined = combine(parts)
    with_est = [p for p in parts if p.estimate is not None]
    if not with_est:
        return joined
    refuting = [p for p in with_est if p.outcome == NOT_SUPPORTED]
    key = refuting or with_est
    pick = min(key, key=lambda p: p.estimate.high if refuting else p.estimate.low)
    return Verdict(joined.outcome, joined.reason, pick.estimate, detectable_effect=joined.detectable_effect,
                   parts=joined.parts)


def flop_spread(flops: list[float]) -> float:
    """(max - min) / max of the runs' training FLOPs: 0 is exactly equal compute."""
    return (max(flops) - min(flops)) / max(flops) if flops and max(flops) > 0 else 0.0


def summary_rows(per_seed: list[dict], key: str, tasks: list[str]) -> tuple[list[dict], dict[str, list[float]]]:
    """One row per variant (``key``) with mean ± spread of each task and of their average; and the average
    scores per variant, seed by seed (for the verdict)."""
    order = list(dict.fromkeys(r[key] for r in per_seed))
    rows, avg = [], {}
    for v in order:
        runs = [r for r in per_seed if r[key] == v]
        avg[v] = [sum(r[t] for t in tasks) / len(tasks) for r in runs]
        row = {key: v, "seeds": len(runs)}
        for col in ("steps", "tokens", "flops"):
            if col in runs[0]:
                row[col] = runs[0][col]
        if "eval_loss" in runs[0]:
            row["pretrain_eval_loss"] = fmt([r["eval_loss"] for r in runs], 3)
        if all(isinstance(r.get("unigram_entropy"), int | float) for r in runs):
            row["unigram_entropy"] = fmt([r["unigram_entropy"] for r in runs], 3)  # the loss to beat clearly
        for t in tasks:
            row[t] = fmt([r[t] for r in runs])
        if len(tasks) > 1:
            row["average"] = fmt(avg[v])
        rows.append(row)
    return rows, avg


def scores_figure(avg: dict[str, list[float]], ylabel: str, title: str):
    """Mean ± spread per variant, with every seed's number as a dot."""
    from ptmlab.report.html import new_figure

    names = list(avg)
    fig, ax = new_figure(max(4.0, 0.9 * len(names) + 2), 3.6)
    for i, n in enumerate(names):
        m, s = mean_spread(avg[n])
        ax.errorbar([i], [m], yerr=[s], fmt="o", color="tab:blue", capsize=4)
        ax.plot([i] * len(avg[n]), avg[n], ".", color="tab:gray")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return fig


# ------------------------------------------------------------------------------------------------ validity
LM_OBJECTIVES = ("mlm", "wwm", "span", "clm", "t5", "bart")  # eval loss is a cross-entropy over tokens
UNIGRAM_RATIO = 0.9   # eval loss below this share of the unigram cross-entropy: pre-training learnt something


def main_metric(task: str) -> str:
    """The main dev metric of a registered task ("accuracy" when the task is unknown here)."""
    from ptmlab.data.tasks import TASKS

    return TASKS.get(task).main_metric if task in TASKS else "accuracy"


def pretrain_validity(record: dict, key: str, lm_only: bool = True) -> list:
    """The validity conditions every pre-training study shares, on a results record whose ``per_seed`` holds one
    dict per (variant ``key``, seed) with ``eval_loss`` and a score per task of ``tasks``:

    - every fine-tuned model above its task's trivial predictor (majority class, all-positive F1, MCC 0) by a t
      interval over seeds: at chance, no pre-training can beat another downstream;
    - pre-training moved the held-out loss clearly below the unigram cross-entropy of the held-out text
      (each run's ``unigram_entropy``, recorded by its pre-training, else the record's; nats): the largest ratio
      of a token-predicting run's eval loss to it (``lm_only``: the objectives of ``LM_OBJECTIVES``; ELECTRA's
      discriminator loss is not one) below ``UNIGRAM_RATIO`` (``unigram_condition``).
    Numbers the record lacks make the condition unmet with value null."""
    from ptmlab.studies.common import above_trivial, eval_size

    runs = [r for r in record.get("per_seed") or [] if isinstance(r, dict)]
    conds = []
    for task in record.get("tasks") or []:
        systems: dict[str, list[float]] = {}
        for r in runs:
            if isinstance(r.get(task), int | float):
                systems.setdefault(str(r.get(key)), []).append(float(r[task]))
        conds += above_trivial(record, task, main_metric(task), systems or {"every variant": []},
                               eval_size(record, 500))
    lm = [r for r in runs if not lm_only or r.get("objective", "mlm") in LM_OBJECTIVES]
    return conds + [unigram_condition(lm, "largest held-out LM loss / unigram cross-entropy of the held-out text",
                                      record)]


def unigram_condition(runs: list[dict], condition: str, record: dict | None = None, pick=max):
    """The condition every pre-training study checks: ``pick`` (``max``: every run must pass; ``min``: the best
    run) of each run's ``eval_loss / unigram_entropy`` below ``UNIGRAM_RATIO``. A run's ``unigram_entropy`` is its
    own (what its pre-training recorded for its corpus and held-out blocks), else the record's. Runs without an
    ``eval_loss`` are left out; a run without an entropy, or no run at all, makes the value null (unmet)."""
    from ptmlab.studies.verdict import Condition

    fallback = (record or {}).get("unigram_entropy")
    ratios = []
    for r in runs:
        loss = r.get("eval_loss")
        if not isinstance(loss, int | float) or isinstance(loss, bool):
            continue
        entropy = r.get("unigram_entropy", fallback)
        if not isinstance(entropy, int | float) or not entropy > 0:
            ratios = []
            break
        ratios.append(float(loss) / float(entropy))
    return Condition.check(condition, pick(ratios) if ratios else None, "<", UNIGRAM_RATIO)


def unigram_entropy(tokenizer, train_texts: list[str], eval_texts: list[str]) -> float:
    """The unigram cross-entropy (nats per token) of ``eval_texts`` under the token frequencies of ``train_texts``
    (``pretrain.corpus.unigram_cross_entropy``: add-one smoothed over the vocabulary, special tokens left out), for
    texts at hand. Every pre-training run records the same number for its own corpus and held-out blocks
    (``corpus.unigram_entropy`` in its summary), which the studies copy beside each run's eval loss."""
    import numpy as np

    from ptmlab.pretrain.corpus import unigram_cross_entropy

    def ids(texts):
        return np.asarray([i for t in texts for i in tokenizer(t, add_special_tokens=False)["input_ids"]], np.int64)

    train = ids(train_texts)
    counts = np.bincount(train, minlength=len(tokenizer)) if len(train) else np.zeros(len(tokenizer), np.int64)
    return unigram_cross_entropy(counts, ids(eval_texts), getattr(tokenizer, "all_special_ids", None) or ())
