"""Study ``long-attention`` (Q10, Q11): does self-attention's cost grow quadratically with length, and is
sliding-window + global attention (Longformer) the linear-cost answer for documents longer than 512 tokens?

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): for Q11, every compared
variant (truncate, window, chunk) is above the task's majority-class accuracy by a t interval over seeds
(``seed_accuracy``): variants near the majority class cannot show one way of reading long documents beating another.
Q10 (latency exponents) has no condition.

Choices (made before any reported number exists, never on the reported dev documents): the learning rate is
--lr, fixed before the run, unless --lrs lists candidates. Then ``choose_lr`` holds --choice-docs documents out of
the training split (a fixed seeded shuffle, ``choice_split``), fine-tunes the truncation variant at each candidate
on the other training documents (first seed, the study's epochs and --max-train), scores it on the held-out ones
and keeps the most accurate (the first given on a tie) for every variant and seed; the reported runs then train on
the training split and are scored on the dev split, which shares no document with the choosing part. results.json
records the candidates, their accuracies, the chosen one and the ids of the documents the choice read
(``lr_choice.chosen_on``, ``train:<id>``) beside those the verdict reads (``reported_on``, ``dev:<id>``). Which
variants are compared is fixed by --variants; nothing else is chosen.

Verdict rule (fixed before any number is seen; ``q10_verdict``, ``q11_verdict`` and ``decide`` implement it): the
claim is supported when both parts are, not supported when either part is not, inconclusive otherwise.
In short (the words of ``CLAIM.rule``): Q10: the full-attention (sdpa) latency exponent over the top quarter of the
lengths, one exponent per timing pass (--reps, each pass kept) with a t interval over the passes; supported when the
interval's lower end is at least 1.5, not supported when its upper end is below 1.5 with the longest length at least
2 x 6 x hidden tokens, else inconclusive (one timing per length included). Q11: the window-attention exponent and
two comparisons of dev accuracy, window minus truncation and window minus chunk-and-pool, each with a 95%
hierarchical bootstrap interval (seeds, then dev documents, so that the sampling noise of a few dozen documents is in
it; a paired t interval over seeds where per-document results are missing); supported when the exponent is <= 1.3
and both intervals lie above 0, not supported when the exponent is > 1.5 or either interval lies below 0, else
inconclusive (one seed included). The claim is supported when both parts are, not supported when either is not,
inconclusive otherwise; each part is shown with its own outcome.

Q10, full attention is quadratic. Batch-1 forward latency of a MiniLM-shaped encoder (6 layers, hidden 384, random
weights) with full attention (PyTorch's fused ``sdpa``; ``eager``, which stores the n x n scores, is reported beside
it where they fit in --eager-max-gb) is measured at every --lengths, each of --reps passes timed and kept
(``latency_reps``; ``latency_s`` is the best). The exponent is the log-log slope over the top quarter of the range
(max/4 .. max), once per pass, and its interval is a t interval over the passes: the timing noise is in it. Attention's
multiply-adds per token (2 n hidden) pass those of the projections and feed-forward (12 hidden^2) at n* = 6 x hidden
= 2,304 tokens, so the n^2 term can only dominate beyond n*.
- supported: the interval's lower end is >= 1.5;
- not supported: the longest length is >= 2 n* and the interval's upper end is below 1.5 (cost stays below
  quadratic where attention's share of the work dominates);
- inconclusive: anything else (lengths that stop before the n^2 term dominates, or one timing per length).

Q11, window attention is the linear-cost answer. Cost: the window implementation's exponent over the same range.
Accuracy: on --task (``longdocs``: which of 13 books a 2,000-4,000-token passage comes from) the same model is
fine-tuned with the same data, epochs and --seeds three ways: truncation to --short-length tokens, chunk-and-pool
(--short-length chunks, --long-stride apart, logits pooled by --long-pool) over --max-length tokens, and window
attention over --max-length tokens (the model converted by ``ptmlab longify``). Window minus truncation and window
minus chunk-and-pool (the same seed for each pair) get 95% hierarchical bootstrap intervals over seeds, then dev
documents: with 75 dev documents one document is 1.3 points of accuracy, noise a t interval over 3 seeds leaves out.
- supported: the window exponent is <= 1.3 and both intervals lie above 0;
- not supported: the window exponent is > 1.5, or either interval lies below 0;
- inconclusive: anything else (an interval that includes 0, one seed, or an exponent between 1.3 and 1.5).
Chunk-and-pool, the cheap way to read a whole document with a 512-token model, is the second comparison: window
attention is only the answer if it beats that too (without the chunk variant, the truncation comparison alone).
``--variants truncate,chunk,window,recurrence`` adds Transformer-XL-style segment recurrence (``--short-length``
segments in order, a memory of two segments), reported beside the rule, which it does not enter.

``--budget small`` runs the tiny random model on a synthetic long task (``ptmlab.longseq.synthetic``: class keywords
scattered over 240 filler words) at 64-256 tokens with one seed in about a minute: it checks the machinery, not
the claims (one seed is inconclusive by construction). The default budget runs 2 seeds at a batch of 16 documents
(38 optimizer steps over 2 epochs of the 300 training passages) at --lr. ``--budget full`` is the budget sized to
decide Q11 on 2 CPU cores, fixed before its run: 3 seeds, 3 passes per cost cell, all 300 training passages for 2
epochs at a batch of 4 documents (150 optimizer steps for the same compute: the committed 25-step run left
truncation near the majority class), dropout 0 in every variant alike (with attention dropout PyTorch's CPU
attention leaves its fused kernel: window training about 2x slower), and the learning rate chosen among 5e-5, 1e-4
and 2e-4 on 50 training passages held out of the choosing runs (``choose_lr``). Measured on 2 CPU cores: about 2.2
hours in all (the learning-rate choice 2-3 minutes per candidate; per seed truncate ~2 minutes, window ~16 and chunk
~22 at 0.67 and 0.48 documents per second; the cost curves 1.5 minutes); under an hour on one GPU (not measured).
What it could detect (±0.14 on window minus truncate, 75 dev documents) is about twice Longformer's +7.4 points on
Hyperpartisan; most of that interval is the noise of the 75 documents, which more seeds on the same documents do
not shrink (``Estimate.example_se``): the budget that would decide it is in results.json's reason.

It runs in this process under either ``--executor``: its table reports each variant's training speed, which
runs sharing a machine would distort.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import StudyArgs, command_config, parse_study_args, write_study
from ptmlab.studies.verdict import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    SUPPORTED,
    Claim,
    Estimate,
    Verdict,
    combine,
    detectable_effect,
    paired_seeds,
)

CLAIM = Claim(
    study="long-attention",
    claim="Self-attention's cost grows quadratically with the sequence length (Q10), and sliding-window + global "
          "attention (Longformer) is the linear-cost answer for documents longer than 512 tokens: linear cost, and "
          "more accurate than truncating to 512 (Q11).",
    source="Q10, Q11; Vaswani et al., NeurIPS 2017 (Table 1: O(n^2 d) per layer); Beltagy et al., Longformer, 2020",
    paper="Longformer-base vs RoBERTa-base truncated to 512: Hyperpartisan 94.8 vs 87.4 F1, IMDB 95.7 vs 95.3 "
          "accuracy (Table 7)",
    rule="Q10: the full-attention (sdpa) latency exponent over the top quarter of the lengths, one exponent per "
         "timing pass (--reps, each pass kept) with a t interval over the passes; supported when the interval's "
         "lower end is at least 1.5, not supported when its upper end is below 1.5 with the longest length at least "
         "2 x 6 x hidden tokens, else inconclusive (one timing per length included). "
         "Q11: the window-attention exponent and two comparisons of dev accuracy, window minus truncation and "
         "window minus chunk-and-pool, each with a 95% hierarchical bootstrap interval (seeds, then dev documents, "
         "so that the sampling noise of a few dozen documents is in it; a paired t interval over seeds where "
         "per-document results are missing); supported when the exponent is <= 1.3 and both intervals lie above 0, "
         "not supported when the exponent is > 1.5 or either interval lies below 0, else inconclusive (one seed "
         "included). The claim is supported when both parts are, not supported when either is not, inconclusive "
         "otherwise; each part is shown with its own outcome.",
    conditions=(
        "Q11: every compared variant above the task's majority-class accuracy by a t interval over seeds",
    ),
    # Hyperpartisan, the long-document task of Table 7: 94.8 vs 87.4 F1 (IMDB's +0.4 is on reviews mostly under
    # 512 tokens); read as accuracy points, the unit of Q11's window-minus-truncate estimate
    paper_effect=0.074,
    paper_part=1,
    metric="Q10: latency exponent of full attention; Q11: dev accuracy, window minus truncate (and minus chunk)",
    margin=1.5,
    parts=("Q10", "Q11"),
)

VARIANTS = ("truncate", "chunk", "window", "recurrence")
DEFAULT_VARIANTS = ("truncate", "chunk", "window")
IMPLS = {"eager": "eager", "sdpa": "sdpa", "window": "ptmlab_window"}
COST_HIDDEN = 384  # the MiniLM-shaped cost model (ptmlab.longseq.cost.MINILM_SHAPE)

SMALL = dict(model="tiny", task="synthetic-long", max_train=32, max_eval=32, max_length=512, short_length=64,
             window=64, long_stride=32, epochs=1.0, batch_size=16, eval_batch_size=64, lengths=["64", "128", "256"],
             reps=1, synthetic_words=240, seeds=["0"], lrs=["5e-5", "1e-3"], choice_docs=16)
FULL = dict(seeds=["0", "1", "2"], reps=3, batch_size=4, dropout=0.0, lrs=["5e-5", "1e-4", "2e-4"], choice_docs=50)


@dataclass(frozen=True)
class LongAttentionArgs(StudyArgs):
    model: str = opt("minilm", "model to fine-tune (the window variant uses its `ptmlab longify` conversion)")
    task: str = opt("longdocs", "task with long documents (longdocs, any --train-file task, or synthetic-long)")
    max_train: int | None = opt(None, "training documents (default: all)")
    max_eval: int | None = opt(None, "dev documents (default: all)")
    max_length: int = opt(4096, "tokens read per document by chunk and window")
    short_length: int = opt(512, "tokens kept by truncation, and the chunk length")
    window: int = opt(256, "window attention width (total, half each side)")
    long_stride: int = opt(256, "chunk-and-pool: tokens between chunk starts")
    long_pool: str = opt("mean", "chunk-and-pool: pool logits by mean or max", choices=["mean", "max"])
    variants: list[str] = opt(list(DEFAULT_VARIANTS), "strategies to compare (truncate, chunk, window; recurrence "
                               "on request: segments with a memory, reported beside the rule)")
    seeds: list[str] = opt(["0", "1"], "fine-tuning seeds (at least 2 for an interval; --budget full: 0,1,2)")
    epochs: float = opt(2.0, "epochs of every variant")
    batch_size: int = opt(16, "documents per optimizer step")
    eval_batch_size: int = opt(32, "evaluation batch (long evaluations read about this x 128 tokens per pass)")
    lengths: list[str] = opt(["512", "1024", "2048", "4096", "8192"], "lengths for the cost curves (Q10)")
    reps: int = opt(2, "best of N forward passes per cost cell")
    eager_max_gb: float = opt(2.0, "skip eager attention where its n x n scores would exceed this")
    synthetic_words: int = opt(2000, "synthetic-long task: filler words per document")
    lrs: list[str] = opt([], "candidate learning rates, chosen on --choice-docs training documents held out of the "
                             "choosing runs (never on the reported dev documents); empty: --lr, fixed before the run")
    choice_docs: int = opt(50, "training documents held out to choose among --lrs (with the synthetic task: made "
                               "beside the --max-train training documents)")
    output: str = opt("runs/study-long-attention", "output directory")

    @property
    def seed_list(self) -> list[int]:
        return _ints(self.seeds, "seeds")

    @property
    def lr_list(self) -> list[float]:
        try:
            lrs = [float(v) for v in self.lrs]
        except ValueError:
            raise PtmlabError(f"--lrs takes numbers separated by commas, got {','.join(self.lrs)}") from None
        if any(not lr > 0 for lr in lrs) or len(set(lrs)) != len(lrs):
            raise PtmlabError(f"--lrs {','.join(self.lrs)}: give distinct positive learning rates")
        return lrs

    @property
    def length_list(self) -> list[int]:
        return sorted(set(_ints(self.lengths, "lengths")))

    def validate(self) -> None:
        super().validate()
        bad = [v for v in self.variants if v not in VARIANTS]
        if bad or not self.variants:
            raise PtmlabError(f"--variants {bad or '[]'} unknown: choose from {', '.join(VARIANTS)}")
        if not self.seed_list:
            raise PtmlabError("--seeds is empty: give at least one seed (2 or more for an interval)")
        if len(set(self.length_list)) < 2 or min(self.length_list) < 8:
            raise PtmlabError(f"--lengths {','.join(self.lengths)}: give at least two lengths of 8 tokens or more")
        if len(self.lr_list) > 1 and self.choice_docs < 2:
            raise PtmlabError(f"--choice-docs {self.choice_docs}: choosing among --lrs needs at least 2 held-out "
                              f"training documents")
        at_least(self, 1, "window", "long_stride", "reps", "synthetic_words")
        at_least(self, 8, "short_length")
        at_least(self, 0, "choice_docs", "eager_max_gb")
        if self.short_length > self.max_length:
            raise PtmlabError(f"--short-length {self.short_length} exceeds --max-length {self.max_length}: the "
                              f"truncated input must be the shorter one")


def _ints(values: list[str], name: str) -> list[int]:
    try:
        return [int(v) for v in values]
    except ValueError:
        raise PtmlabError(f"--{name} takes whole numbers separated by commas, got {','.join(values)}") from None


# ----------------------------------------------------------------------------------------------- verdict rules
def q10_verdict(exponent: float | None, longest: int, hidden: int = COST_HIDDEN,
                interval: Estimate | None = None) -> Verdict:
    """Q10 from the full-attention latency exponent over the top of the range, with its interval over the repeated
    timings (``exponent_interval``): supported when the interval's lower end is at least 1.5, not supported when
    its upper end is below 1.5 with the longest length past twice the crossover (where attention's n^2 work
    dominates), inconclusive otherwise. Without repeated timings (one timing per length) nothing measures the
    timing noise: inconclusive, the point exponent reported."""
    crossover = 6 * hidden
    if exponent is None:
        return Verdict(INCONCLUSIVE, "fewer than two full-attention lengths were measured")
    said = f"full attention's latency grows as n^{exponent:.2f} up to {longest:,} tokens"
    if interval is None or not (math.isfinite(interval.low) and math.isfinite(interval.high)):
        return Verdict(INCONCLUSIVE, f"{said}, from one timing per length: no interval over repeated timings "
                                     f"(the rule needs --reps 2 or more, each pass's timings kept)", interval)
    det = detectable_effect(interval)
    said = f"full attention's latency exponent {interval.text(2)} up to {longest:,} tokens" + (
        "" if det is None else f"; could detect ±{det:.2f}")
    if interval.low >= 1.5:
        return Verdict(SUPPORTED, f"{said} (at least 1.5: the quadratic term dominates)", interval,
                       detectable_effect=det, thresholds=(1.5,))
    if longest >= 2 * crossover and interval.high < 1.5:
        return Verdict(NOT_SUPPORTED, f"{said}, below 1.5 although attention does most of the work beyond "
                                      f"{crossover:,} tokens", interval, detectable_effect=det, thresholds=(1.5,))
    return Verdict(INCONCLUSIVE, f"{said}; not resolved against 1.5" + (
        "" if longest >= 2 * crossover else f" (attention's n^2 work passes the linear layers' only beyond "
                                            f"~{crossover:,} tokens: measure up to {2 * crossover:,}+ to decide)"),
                   interval, detectable_effect=det, thresholds=(1.5,))


def exponent_interval(rows: list[dict], impl: str) -> Estimate | None:
    """``impl``'s latency exponent over the top quarter of the lengths with a t interval over the repeated timing
    passes: one exponent per pass (``latency_reps[i]`` of every length), the mean with its t interval. None when
    the rows keep one timing per length."""
    from ptmlab.longseq.cost import growth_exponent
    from ptmlab.studies.verdict import mean_interval

    mine = sorted((r for r in rows if r.get("impl") == impl and r.get("latency_s") is not None),
                  key=lambda r: r["length"])
    reps = [r.get("latency_reps") for r in mine]
    if not mine or not all(isinstance(x, list) and len(x) >= 2 for x in reps) or len({len(x) for x in reps}) != 1:
        return None
    hi = max(r["length"] for r in rows)
    lengths = [r["length"] for r in mine]
    per_pass = [growth_exponent(lengths, [x[i] for x in reps], lo=hi // 4, hi=hi) for i in range(len(reps[0]))]
    if any(e is None for e in per_pass):
        return None
    est = mean_interval(per_pass, f"{impl} latency exponent over {lengths[0]}-{hi} tokens")
    return Estimate(est.metric, est.value, est.low, est.high, est.n,
                    f"t over {est.n} repeated timing passes ({est.confidence:.0%})", est.df, est.confidence)


def _difference(acc: dict[str, list[float]], correct: dict | None, a: str, b: str, name: str):
    """``a`` minus ``b``: a hierarchical bootstrap over seeds then dev documents where every seed's per-document
    correctness is at hand (the same documents for both), else a paired t interval over the seeds' accuracies."""
    from ptmlab.studies.verdict import hierarchical_bootstrap

    runs = [(correct or {}).get(a), (correct or {}).get(b)]
    if all(r and all(x is not None for x in r) for r in runs) and len({len(x) for r in runs for x in r}) == 1 \
            and len(runs[0]) == len(runs[1]):
        return hierarchical_bootstrap(runs[0], runs[1], name)
    return paired_seeds(acc[a], acc[b], name)


def q11_verdict(window_exponent: float | None, acc: dict[str, list[float]],
                correct: dict[str, list[list[float]]] | None = None) -> Verdict:
    """Q11 from window attention's exponent and per-seed dev accuracies per variant (one seed order); ``correct``:
    per variant, per seed, per dev document 1/0 correctness (the hierarchical bootstrap's input), where recorded."""
    if not acc.get("window") or not acc.get("truncate"):
        return Verdict(INCONCLUSIVE, "needs both the window and the truncate variants")
    est = _difference(acc, correct, "window", "truncate", "dev accuracy: window minus truncate")
    ests = [est]
    exp = "unmeasured" if window_exponent is None else f"n^{window_exponent:.2f}"
    said = (f"window attention costs {exp} and reaches {statistics.mean(acc['window']):.4f} accuracy vs "
            f"{statistics.mean(acc['truncate']):.4f} truncated, difference {est.text()}")
    if acc.get("chunk"):
        c = _difference(acc, correct, "window", "chunk", "dev accuracy: window minus chunk-and-pool")
        ests.append(c)
        rel = "as good as" if c.low <= 0 <= c.high else ("better than" if c.low > 0 else "worse than")
        said += f"; window is {rel} chunk-and-pool ({statistics.mean(acc['chunk']):.4f}; window minus chunk " \
                f"{c.text()})"
    if window_exponent is not None and window_exponent > 1.5:
        outcome = NOT_SUPPORTED
    elif any(e.high < 0 for e in ests):
        outcome = NOT_SUPPORTED
    elif window_exponent is not None and window_exponent <= 1.3 and all(e.low > 0 for e in ests):
        outcome = SUPPORTED
    else:
        outcome = INCONCLUSIVE
    if acc.get("recurrence"):
        said += f"; segment recurrence reaches {statistics.mean(acc['recurrence']):.4f}"
    return Verdict(outcome, said, est, detectable_effect=detectable_effect(est), thresholds=(0.0,))


def decide(sdpa_exponent: float | None, longest: int, window_exponent: float | None,
           acc: dict[str, list[float]], hidden: int = COST_HIDDEN, correct: dict | None = None,
           sdpa_interval: Estimate | None = None) -> Verdict:
    """The rule of ``CLAIM``: both parts, each decided and shown (``combine``); the estimate is Q11's accuracy
    difference. ``sdpa_interval``: Q10's exponent with its interval over repeated timings."""
    q10 = q10_verdict(sdpa_exponent, longest, hidden, sdpa_interval)
    q11 = q11_verdict(window_exponent, acc, correct)
    joined = combine([q10, q11], names=["Q10", "Q11"])
    return Verdict(joined.outcome, joined.reason, q11.estimate, detectable_effect=joined.detectable_effect,
                   parts=joined.parts)


# ------------------------------------------------------------------------------------------------- measuring
def measure_costs(lengths: list[int], window: int, reps: int, eager_max_gb: float) -> list[dict]:
    """Latency (all cells first) then peak memory per (implementation, length) on the MiniLM-shaped model, fp32."""
    from ptmlab.core.progress import progress
    from ptmlab.longseq.cost import measure_forward, measure_peak_memory, minilm_shaped_model

    lengths = sorted(lengths)
    model = minilm_shaped_model(max(lengths), window=window)
    rows = [{"impl": impl, "dtype": "fp32", "length": n, "latency_s": None, "peak_mb": None}
            for n in lengths for impl in IMPLS]
    cells = [r for r in rows if not (r["impl"] == "eager" and 12 * r["length"] ** 2 * 8 / 2**30 > eager_max_gb)]
    for phase in ("latency", "memory"):  # memory last: measuring it slows the allocator (ptmlab.longseq.cost)
        for r in progress(cells, desc=f"cost ({phase})"):
            model.set_attn_implementation(IMPLS[r["impl"]])
            if phase == "latency":  # each pass timed and kept: Q10's exponent gets an interval over the passes
                r["latency_reps"] = [measure_forward(model, r["length"], "cpu", reps=1, warmup=i == 0)
                                     for i in range(reps)]
                r["latency_s"] = min(r["latency_reps"])
            else:
                r["peak_mb"] = measure_peak_memory(model, r["length"], "cpu")
    return rows


def top_exponent(rows: list[dict], impl: str, key: str = "latency_s") -> float | None:
    """Growth exponent of ``impl``'s ``key`` over the top quarter of the measured lengths."""
    from ptmlab.longseq.cost import growth_exponent

    pts = sorted((r["length"], r[key]) for r in rows if r["impl"] == impl and r[key] is not None)
    if not pts:
        return None
    hi = max(r["length"] for r in rows)
    return growth_exponent([p[0] for p in pts], [p[1] for p in pts], lo=hi // 4, hi=hi)


def _variant(a: LongAttentionArgs, out_dir: Path, files: dict, **overrides) -> dict:
    """Fine-tune one (strategy, seed) variant through ``finetune``'s long-input plan; reuse a finished one."""
    from ptmlab.longseq.runs import plan_long_finetune
    from ptmlab.studies.common import finished_variant
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    cfg = command_config(a, FinetuneConfig, output=str(out_dir), test=False, **files, **overrides)
    plan = plan_long_finetune(cfg)
    done = finished_variant(out_dir, plan.cfg, a.overwrite)
    if done is not None:
        return done
    return run_finetune(plan.cfg, command="study", loss_fn=plan.loss_fn, evaluator=plan.evaluator)


def _long_model(a: LongAttentionArgs, out: Path) -> str:
    from ptmlab.longseq.pipeline import LongifyConfig, run_longify

    path = out / "long-model"
    if not (path / "config.json").is_file() or a.overwrite:
        run_longify(LongifyConfig(model=a.model, max_length=a.max_length, window=a.window, output=str(path)))
    return str(path)


CHOICE_SEED = 1234  # the fixed shuffle that picks the choosing documents out of the training split


def choice_split(n_train: int, n_choice: int) -> tuple[list[int], list[int]]:
    """(fit, choose): positions in the training split, the choosing part ``n_choice`` documents drawn by a fixed
    seeded shuffle, the rest to train the choosing runs on. Both sorted, disjoint, together the whole split."""
    if not 2 <= n_choice < n_train:
        raise PtmlabError(f"--choice-docs {n_choice} must be at least 2 and below the {n_train} training documents")
    idx = list(range(n_train))
    random.Random(CHOICE_SEED).shuffle(idx)
    return sorted(idx[n_choice:]), sorted(idx[:n_choice])


def _task_data(a: LongAttentionArgs, files: dict, seed: int, **overrides):
    """The task's data exactly as a run with these options loads it (``--max-train`` / ``--max-eval`` included)."""
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.train.args import FinetuneConfig

    return load_task_data(command_config(a, FinetuneConfig, output="unused", test=False, seed=seed, **files,
                                         **overrides))


def choose_lr(a: LongAttentionArgs, out: Path, files: dict, setting: dict) -> dict | None:
    """The learning-rate choice of the module docstring (None without candidates to choose among): the truncation
    variant (``setting``) at every --lrs candidate, trained on the training split less the choosing part and
    scored on the choosing part. Returns the record written to results.json as ``lr_choice``."""
    import json

    from ptmlab.core.io import atomic_write_text
    from ptmlab.data.tasks import TASKS

    lrs = a.lr_list
    if len(lrs) < 2:
        return None
    data = _task_data(a, files, a.seed_list[0], max_train=None)
    train = data.splits["train"]
    fit, choose = choice_split(len(train), a.choice_docs)
    names = list(data.spec.extra.get("label_names") or data.spec.labels)
    folder = out / "choose-lr"
    parts = {}
    for part, idx in (("fit", fit), ("choose", choose)):
        path = folder / f"{part}.jsonl"
        atomic_write_text(path, "".join(json.dumps({"text": train.text[i], "label": str(names[train.label[i]])},
                                                   ensure_ascii=False) + "\n" for i in idx))
        parts[part] = str(path)
    task = a.task if a.task not in TASKS else "custom"  # a registered task read from files is a custom one
    accuracy = {}
    for lr in lrs:
        s = _variant(a, folder / f"truncate-lr{lr:g}", {"train_file": parts["fit"], "dev_file": parts["choose"]},
                     seed=a.seed_list[0], lr=lr, task=task, max_eval=None, **setting)
        accuracy[f"{lr:g}"] = float(s["metrics"]["accuracy"])
    chosen = max(lrs, key=lambda lr: accuracy[f"{lr:g}"])  # the first given on a tie
    ids = train.ids or list(range(len(train)))
    return {"candidates": lrs, "chosen": chosen, "variant": "truncate", "seed": a.seed_list[0],
            "accuracy": accuracy, "choice_docs": len(choose), "fit_docs": len(fit),
            "chosen_on": [f"train:{ids[i]}" for i in choose]}


def run_variants(a: LongAttentionArgs, out: Path) -> tuple[list[dict], dict[str, list[float]], int, dict,
                                                           dict | None]:
    """Fine-tune every variant and seed (at the learning rate ``choose_lr`` picks, where --lrs gives candidates);
    returns per-variant rows, per-seed accuracies, the dev size, per variant, per seed, per dev document 1/0
    correctness (None where a run wrote no dev predictions), and the choice record (``lr_choice``, or None)."""
    from ptmlab.studies.common import dev_correct

    files: dict = {}
    if a.task == "synthetic-long":
        from ptmlab.longseq.synthetic import write_long_task

        n_train, n_dev = a.max_train or 300, a.max_eval or 100
        n_train += a.choice_docs if len(a.lr_list) > 1 else 0
        paths = write_long_task(out / "data", n_train, n_dev, a.synthetic_words, seed=0)
        files = {"train_file": paths["train"], "dev_file": paths["dev"]}
    settings = {
        "truncate": dict(model=a.model, max_length=a.short_length, long_strategy="truncate"),
        "chunk": dict(model=a.model, max_length=a.max_length, long_strategy="chunk", long_chunk=a.short_length),
        "window": dict(max_length=a.max_length, long_strategy="window"),
        # a memory of two segments, so that the last segment of a 9-segment document reaches the first through a
        # 6-layer model's chain of memories (reach = memory segments x layers)
        "recurrence": dict(model=a.model, max_length=a.max_length, long_strategy="recurrence",
                           long_chunk=a.short_length, long_memory=2 * a.short_length),
    }
    choice = choose_lr(a, out, files, settings["truncate"])
    lr = {"lr": choice["chosen"]} if choice else {"lr": a.lr_list[0]} if a.lr_list else {}
    if choice:  # the documents every reported run is scored on, as each seed's run loads them
        choice["reported_on"] = sorted({f"dev:{i}" for s in a.seed_list for i in _dev_ids(a, files, s)})
    if "window" in a.variants:
        settings["window"]["model"] = _long_model(a, out)
    rows, acc, n_dev, correct = [], {}, 0, {}
    for v in a.variants:
        summaries = [_variant(a, out / f"{v}-seed{s}", files, seed=s, **lr, **settings[v]) for s in a.seed_list]
        acc[v] = [float(s["metrics"]["accuracy"]) for s in summaries]
        correct[v] = [dev_correct(out / f"{v}-seed{s}") for s in a.seed_list]
        n_dev = summaries[0]["eval_examples"]
        f1 = [float(s["metrics"].get("macro_f1", float("nan"))) for s in summaries]
        tokens = a.short_length if v == "truncate" else a.max_length
        rows.append({"part": "Q11", "variant": v, "max_tokens": tokens, "accuracy": statistics.mean(acc[v]),
                     "accuracy_seeds": " ".join(f"{x:.4f}" for x in acc[v]), "macro_f1": statistics.mean(f1),
                     "train_s": statistics.mean(s["train_seconds"] for s in summaries),
                     "train_docs_per_s": statistics.mean(s["train_examples_per_second"] for s in summaries)})
    return rows, acc, n_dev, correct, choice


def _dev_ids(a: LongAttentionArgs, files: dict, seed: int) -> list:
    dev = _task_data(a, files, seed).splits["dev"]
    return dev.ids or list(range(len(dev)))


@STUDIES.register("long-attention", help="Q10/Q11: is full attention quadratic, and window attention the linear "
                                         "answer? cost curves + longdocs accuracy (truncate vs chunk vs window)")
def run(argv: list[str]) -> int:
    a = parse_study_args("long-attention", LongAttentionArgs, argv, __doc__, small=SMALL, full=FULL)
    out = Path(a.output)
    # fine-tuning first: memory measurement slows the allocator
    var_rows, acc, n_dev, correct, choice = run_variants(a, out)
    cost_rows = measure_costs(a.length_list, a.window, a.reps, a.eager_max_gb)
    longest = max(a.length_list)
    exp = {impl: top_exponent(cost_rows, impl) for impl in IMPLS}
    mem = {impl: top_exponent(cost_rows, impl, "peak_mb") for impl in IMPLS}
    verdict = decide(exp["sdpa"], longest, exp["window"], acc, correct=correct,
                     sdpa_interval=exponent_interval(cost_rows, "sdpa"))
    exp_rows = [{"part": "Q10", "variant": f"{impl} attention", "max_tokens": longest,
                 "latency_exponent": exp[impl], "memory_exponent": mem[impl],
                 "latency_s_longest": next((r["latency_s"] for r in cost_rows
                                            if r["impl"] == impl and r["length"] == longest), None)}
                for impl in IMPLS]
    from ptmlab.longseq.cost import scaling_plot
    from ptmlab.report.plots import bar_plot

    figures = [(scaling_plot(cost_rows, "MiniLM-shaped forward, batch 1, fp32"), "cost",
                "latency and peak extra memory vs length (log-log)")]
    if var_rows:
        figures.append((bar_plot([r["variant"] for r in var_rows], [r["accuracy"] for r in var_rows],
                                 "dev accuracy (mean over seeds)", f"{a.task}: {a.model}"), "accuracy",
                        "dev accuracy per long-input strategy"))
    columns = ["part", "variant", "max_tokens", "accuracy", "accuracy_seeds", "macro_f1", "train_s",
               "train_docs_per_s", "latency_exponent", "memory_exponent", "latency_s_longest"]
    write_study(out, f"Study: long attention ({a.model} on {a.task}, budget {a.budget})", exp_rows + var_rows,
                verdict, figures, extra={"cost_rows": cost_rows, "seed_accuracy": acc, "dev_examples": n_dev,
                                         "seed_correct": correct, "lr_choice": choice},
                columns=columns, claim=CLAIM, budget=a.budget, seeds=a.seed_list, validity=validity)
    return 0


RESTATES_RECORDED_INTERVALS = True  # restate recomputes the hierarchical intervals from seed_correct


def recomputed_from(record: dict) -> tuple[str, str]:
    """How ``restate`` recomputed ``record``'s verdict (``rederive``'s ``recompute`` block)."""
    timings = all(isinstance(r.get("latency_reps"), list) for r in record.get("cost_rows") or [] if r.get("latency_s"))
    q10 = "every timing pass (latency_reps)" if timings else "one timing per length (no interval over passes)"
    if isinstance(record.get("seed_correct"), dict):
        return "recomputed", f"every seed's per-document correctness (seed_correct); Q10 from {q10}"
    return "partly recomputed", f"per-seed accuracies (seed_accuracy); Q10 from {q10}"


def restate(record: dict, name: str = "long-attention") -> Verdict | None:
    """The rule of ``CLAIM`` on a record's own numbers: both exponents from its cost rows, Q11 from its per-seed
    accuracies (and per-document correctness where recorded), so a record made under an older rule is judged by
    this one."""
    cost = [r for r in record.get("cost_rows") or [] if isinstance(r, dict) and r.get("length")]
    acc = record.get("seed_accuracy")
    if not cost or not isinstance(acc, dict):
        return None
    correct = record.get("seed_correct") if isinstance(record.get("seed_correct"), dict) else None
    return decide(top_exponent(cost, "sdpa"), max(int(r["length"]) for r in cost), top_exponent(cost, "window"),
                  acc, correct=correct, sdpa_interval=exponent_interval(cost, "sdpa"))


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (``seed_accuracy``: per variant, per-seed dev accuracy)."""
    from ptmlab.studies.common import above_trivial, task_of

    acc = record.get("seed_accuracy") if isinstance(record.get("seed_accuracy"), dict) else {}
    size = record.get("dev_examples") if isinstance(record.get("dev_examples"), int) else 0
    return above_trivial(record, task_of(record, "longdocs"), "accuracy", acc or {"window": []}, size)
