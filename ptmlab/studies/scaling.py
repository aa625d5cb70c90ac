"""Study ``scaling`` (Q8, Q19): a sweep of model sizes x FLOP budgets on the shared text, with the compute frontier,
power-law fits and two verdicts.

Claims. Q8 (Kaplan et al. 2020, "Scaling laws for neural language models"; Hoffmann et al. 2022): under a fixed
compute budget, parameters and training steps should grow together, so the loss-optimal size grows with the budget
(Kaplan: N_opt ∝ C^0.73; Hoffmann: C^0.50). Q19 (Kaplan et al. 2020; Li et al. 2020, "Train large, then compress"):
larger models reach a given loss in fewer steps and can even be faster in wall-clock time.

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): pre-training moved the
held-out loss clearly below the unigram cross-entropy of the held-out text (``unigram_entropy``) in every cell the
rule compares, so that sizes are compared off the unigram plateau: every size's seed-mean loss at the smallest and at
the largest budget (Q8's two budgets) below 0.9 of it, and Q19's target loss (the worst size's best loss) below 0.9
of it (a target on the plateau asks which size reaches the unigram loss first, not which learns faster).

Verdict rule (fixed before the runs; ``ptmlab.scaling.analysis`` and ``decide``): Q8 compares the optimum set of
sizes (final held-out losses tied within --loss-tolerance or two standard errors across seeds) at the smallest and
the largest budget: supported when every optimal size at the largest budget is larger than every optimal size at the
smallest and the optimum never moves down, not supported when it is unambiguously the same size or smaller, else
inconclusive (ties, or the optimum at the edge of the grid). Q19 compares the tokens each size needs to reach the
worst size's best held-out loss (seed-averaged curves): supported when the largest size needs at most (1 - --margin)
times the smallest size's tokens, by more than one evaluation interval, and cost falls with size; not supported when
it needs at least as many; else inconclusive. With one seed the seed noise of the losses is unmeasured and both
parts are inconclusive. The claim is supported when both parts are, not supported when either is not, inconclusive
otherwise; Q19's wall-clock half is reported beside it. Each part is shown with its own outcome. What the run could
detect: Q8's loss difference between two sizes that its tie rule (the tolerance, or two standard errors of the
difference) would resolve with 80% probability, ``max(tolerance, 2 x SE) + z(0.8) x SE`` with SE the median standard
error of a difference of two cells' seed-mean losses.

Every run is an ordinary pre-training run (masked LM, BERT architecture) with a small WordPiece vocabulary trained
on the training text first, so tiny models spend their compute in the transformer rather than in a 30k-word softmax.

Budgets: ``--budget small`` sweeps three tiny sizes over three small budgets with one seed (inconclusive by
construction); the default grid (2x64, 4x128, 4x256 at 1e11-3e12 FLOPs, 256 held-out blocks, the WikiText-2
validation and test text) runs two seeds, ``--budget full`` three (about 25 minutes on 2 cores); its two larger
sizes end on the unigram plateau and the optimum lies below the sizes tried. ``--budget gpu`` is sized to decide
the claim on one GPU: 4x128, 4x256, 6x384 and 8x512 at 1e13, 1e14 and 1e15 FLOPs, three seeds, blocks of 128 tokens,
32 per step, rate 1e-3 (2e-3 risks the largest size diverging), on the shared English text (``--corpus english``,
about 3 times WikiText-2's); 4.4e15 FLOPs and some 70,000 steps per seed (48,000 of them 4x128's at 1e15), about
an hour on one H100 (estimated from step counts, not measured: the small sizes' short steps are bound by kernel
launches). An earlier default (1x32-4x128 at 3e10-3e11) gave its larger models 5-59 steps: too few to say anything
(docs/scaling.md).

Its runs go through ``ptmlab scale`` and its own parallel workers (``--workers``), not the study executor.

Rough times per budget on 2 CPU cores and one GPU: docs/studies.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import at_least, build_config, opt, positive
from ptmlab.core.errors import PtmlabError
from ptmlab.data.shared import CORPORA, CORPUS_HELP
from ptmlab.studies import STUDIES
from ptmlab.studies.common import StudyBase, parse_study_args, write_study
from ptmlab.studies.verdict import INCONCLUSIVE, Claim, Estimate, Verdict, combine

CLAIM = Claim(
    study="scaling",
    claim="Under a fixed compute budget parameters and training should grow together, so the loss-optimal model size "
          "grows with the budget (Q8); larger models reach a given loss in fewer tokens (Q19).",
    source="Q8, Q19; Kaplan et al. 2020; Hoffmann et al. 2022; Li et al. 2020, Train large, then compress",
    paper="N_opt grows as C^0.73 (Kaplan) or C^0.50 (Hoffmann); larger models are more sample-efficient (Kaplan, "
          "Figure 2)",
    rule="Q8 compares the optimum set of sizes (final held-out losses tied within --loss-tolerance or two standard "
         "errors across seeds) at the smallest and the largest budget: supported when every optimal size at the "
         "largest budget is larger than every optimal size at the smallest and the optimum never moves down, not "
         "supported when it is unambiguously the same size or smaller, else inconclusive (ties, or the optimum at "
         "the edge of the grid). Q19 compares the tokens each size needs to reach the worst size's best held-out "
         "loss (seed-averaged curves): supported when the largest size needs at most (1 - --margin) times the "
         "smallest size's tokens, by more than one evaluation interval, and cost falls with size; not supported when "
         "it needs at least as many; else inconclusive. With one seed the seed noise of the losses is unmeasured and "
         "both parts are inconclusive. The claim is supported when both parts are, not supported when either is not, "
         "inconclusive otherwise; Q19's wall-clock half is reported beside it.",
    conditions=(
        "every size's held-out loss at the smallest and at the largest budget below 0.9 x the unigram cross-entropy "
        "of the held-out text",
        "Q19's target loss below 0.9 x the unigram cross-entropy of the held-out text",
    ),
    metric="Q8: the loss-optimal size at the smallest and largest budgets; Q19: tokens the largest size needs to "
           "reach the target loss, over the smallest size's",
    margin=0.1,
    parts=("Q8", "Q19"),
)

SMALL = dict(sizes=["1x16", "2x32", "2x64"], budgets=["1e9", "2.5e9", "6e9"], block_size=32, batch_size=16,
             eval_blocks=32, evals=16, vocab_size=2048, seeds=["0"])
FULL = dict(seeds=["0", "1", "2"])
# --budget gpu: the sizes and budgets past the plateau the CPU grid ends on (module docstring)
GPU = dict(FULL, corpus="english", sizes=["4x128", "4x256", "6x384", "8x512"], budgets=["1e13", "1e14", "1e15"],
           block_size=128, batch_size=32, lr=1e-3)


@dataclass(frozen=True)
class ScalingStudyArgs(StudyBase):
    output: str = opt("runs/study-scaling", "output directory (the sweep is under OUTPUT/sweep)")
    sizes: list[str] = opt(["2x64", "4x128", "4x256"], "model sizes LAYERSxHIDDEN[xHEADS]")
    budgets: list[str] = opt(["1e11", "3e11", "1e12", "3e12"], "training-FLOP budgets")
    seeds: list[str] = opt(["0", "1"], "seeds (each size x budget once per seed; one seed is inconclusive)")
    files: list[str] = opt([], "training text (default: the shared text --corpus names)")
    corpus: str = opt("wikitext-2", CORPUS_HELP, choices=list(CORPORA))
    tokenizer: str = opt("", "tokenizer (default: a WordPiece of --vocab-size trained on the training text)")
    vocab_size: int = opt(4096, "vocabulary of the trained WordPiece tokenizer")
    objective: str = opt("mlm", "pre-training objective")
    block_size: int = opt(64, "tokens per block")
    batch_size: int = opt(16, "blocks per step")
    lr: float = opt(2e-3, "peak learning rate")
    evals: int = opt(20, "held-out evaluations per run")
    eval_blocks: int = opt(256, "held-out blocks per evaluation")
    workers: int = opt(1, "worker processes (wall-clock numbers then share the CPUs)")
    loss_tolerance: float = opt(0.02, "Q8 tie tolerance in nats")
    margin: float = opt(0.1, "Q19 margin")

    def validate(self) -> None:
        at_least(self, 1, "vocab_size", "batch_size", "evals", "workers")
        at_least(self, 8, "block_size")
        at_least(self, 0, "eval_blocks", "loss_tolerance")
        positive(self, "lr")
        if not 0 <= self.margin < 1:
            raise PtmlabError(f"--margin must be in [0, 1), got {self.margin}")


def default_text(corpus: str = "wikitext-2", folder: Path | None = None) -> list[str]:
    """The shared WikiText-2 validation and test files, and what ``corpus`` adds to them (``data.shared``, written
    in ``folder``)."""
    from ptmlab.data.shared import more_text, shared_data_dir

    root = shared_data_dir()
    paths = [root / "text" / "wikitext-2" / f"{part}.txt" for part in ("valid", "test")] if root else []
    if not paths or not all(p.is_file() for p in paths):
        raise PtmlabError("the shared text (../shared/data/text/wikitext-2/valid.txt and test.txt) is not on this "
                          "machine: pass --files with English text files")
    return [str(p) for p in paths] + more_text(corpus, folder or Path("."))


def study_tokenizer(a: ScalingStudyArgs, files: list[str], out: Path) -> str:
    """The given tokenizer, or a WordPiece trained on ``files`` once and kept under OUT/tokenizer."""
    if a.tokenizer:
        return a.tokenizer
    from ptmlab.pretrain.corpus import expand_paths
    from ptmlab.tokenization.corpora import file_source
    from ptmlab.tokenization.train import train_and_save

    target = out / f"tokenizer-{a.vocab_size}"
    if not (target / "tokenizer.json").is_file():
        sources = [file_source(p) for p in expand_paths(files)]
        train_and_save(["wordpiece"], sources, a.vocab_size, target, lowercase=True)
    return str(target)


def decide(q8: dict, q19_tokens: dict, n_seeds: int, growth: dict | None = None, cells: list | None = None,
           loss_tolerance: float = 0.02) -> Verdict:
    """The rule of ``CLAIM`` from ``scaling.analysis``'s Q8 and Q19 (tokens) results, each part shown; the estimate
    is the fitted growth exponent of the optimal size (N_opt ~ C^a, ± two standard errors) when there is one, and
    Q8's detectable effect (``q8_detectable``) comes from the cells' standard errors."""
    est = None
    if growth and growth.get("a") is not None and growth.get("a_stderr") is not None:
        a, se = float(growth["a"]), float(growth["a_stderr"])
        est = Estimate("growth exponent a of the optimal size (N_opt ~ C^a)", a, a - 2 * se, a + 2 * se,
                       int(growth.get("n", 0)), "power-law fit ± 2 standard errors")
    det = q8_detectable(cells or [], loss_tolerance) if n_seeds >= 2 else None
    if n_seeds < 2:
        return Verdict(INCONCLUSIVE, f"one seed: the seed noise of the losses is unmeasured (Q8 would say "
                                     f"{q8['verdict']}: {q8['reason']}; Q19 tokens {q19_tokens['verdict']}: "
                                     f"{q19_tokens['reason']})", est)
    could = "" if det is None else f" (could detect a loss difference of ±{det:.4f} nats between two sizes)"
    parts = [Verdict(q8["verdict"], f"{q8['reason']}{could}", detectable_effect=det),
             Verdict(q19_tokens["verdict"], str(q19_tokens["reason"]))]
    joined = combine(parts, names=["Q8", "Q19 (tokens)"])
    return Verdict(joined.outcome, joined.reason, est, detectable_effect=joined.detectable_effect or det,
                   parts=joined.parts)


def q8_detectable(cells: list, loss_tolerance: float) -> float | None:
    """The loss difference (nats) between two sizes at one budget that Q8's tie rule would resolve with 80%
    probability: ``max(tolerance, 2 x SE) + z(0.8) x SE``, SE the median standard error of a difference of two cells'
    seed-mean losses (``sqrt(2) x`` the median cell's). None without the cells' standard errors."""
    import math
    import statistics

    from scipy.stats import norm

    ses = [float(c["se"]) for c in cells if isinstance(c, dict) and isinstance(c.get("se"), int | float)]
    if not ses:
        return None
    se = math.sqrt(2) * statistics.median(ses)
    return max(float(loss_tolerance), 2 * se) + float(norm.ppf(0.8)) * se


def recomputed_from(record: dict) -> tuple[str, str]:
    """How ``restate`` recomputed ``record``'s verdict (``rederive``'s ``recompute`` block)."""
    return "partly recomputed", ("Q8 from every run's final held-out loss (rows); Q19 as the sweep recorded it: "
                                 "the learning curves it reads are not kept in results.json")


def restate(record: dict, name: str = "scaling") -> Verdict | None:
    """The rule of ``CLAIM`` from the record: Q8 recomputed from its rows (each finished run's final held-out loss:
    the cells' seed means and standard errors, then ``scaling.analysis.optimal_size_verdict``), Q19 as the run
    recorded it (its learning curves are not kept), every part shown."""
    import math

    import numpy as np

    from ptmlab.scaling.analysis import optimal_size_verdict

    q8, q19 = record.get("q8"), (record.get("q19") or {}).get("tokens")
    seeds = (record.get("run") or {}).get("seeds") or []
    if not isinstance(q8, dict) or not isinstance(q19, dict):
        return None
    groups: dict = {}
    for r in record.get("rows") or []:
        if r.get("status") == "done" and isinstance(r.get("eval_loss"), int | float):
            groups.setdefault((r["params"], r["budget"]), []).append(float(r["eval_loss"]))
    cells: dict = {}
    for (n, b), losses in groups.items():
        se = float(np.std(losses, ddof=1) / math.sqrt(len(losses))) if len(losses) > 1 else 0.0
        cells.setdefault(b, {})[n] = (float(np.mean(losses)), se)
    tol = _option(record, "loss_tolerance", 0.02)
    if cells:
        q8 = {**optimal_size_verdict(cells, tol), "growth": q8.get("growth")}
    listed = [{"params": n, "budget": b, "eval_loss": v[0], "se": v[1]} for b in sorted(cells)
              for n, v in sorted(cells[b].items())] or record.get("cells")
    return decide(q8, q19, len(seeds), q8.get("growth"), listed, tol)


def _option(record: dict, name: str, default: float) -> float:
    """A float option of the record's command (``--loss-tolerance 0.05``), else ``default``."""
    import shlex

    words = shlex.split(str((record.get("run") or {}).get("command") or ""))
    flag = "--" + name.replace("_", "-")
    for i, w in enumerate(words):
        if w == flag and i + 1 < len(words):
            return float(words[i + 1])
        if w.startswith(flag + "="):
            return float(w.split("=", 1)[1])
    return default


@STUDIES.register("scaling", help="Q8/Q19: sizes x FLOP budgets; compute frontier, power laws, optimal size")
def run(argv: list[str]) -> int:
    from ptmlab.scaling.config import ScaleConfig
    from ptmlab.scaling.plots import frontier_plot, isoflop_plot, tokens_plot
    from ptmlab.scaling.report import COLUMNS
    from ptmlab.scaling.sweep import run_sweep

    a = parse_study_args("scaling", ScalingStudyArgs, argv, __doc__, small=SMALL, full=FULL, gpu=GPU)
    out = Path(a.output)
    files = a.files or default_text(a.corpus, out / "data")
    values = {k: getattr(a, k) for k in ("sizes", "budgets", "seeds", "objective", "block_size", "batch_size", "lr",
                                         "evals", "eval_blocks", "workers", "loss_tolerance", "margin")}
    cfg = build_config(ScaleConfig, {**values, "files": files, "tokenizer": "minilm", "output": str(out / "sweep"),
                                     "overwrite": a.overwrite}, source="study")  # inputs checked first
    from dataclasses import replace

    cfg = replace(cfg, tokenizer=study_tokenizer(a, files, out))
    r = run_sweep(cfg)
    columns = [c for c in COLUMNS if c not in ("name", "flops")]
    figures = []
    if r["curves"]:
        figures = [(frontier_plot(r), "frontier", "held-out loss vs training FLOPs, with the frontier and its fit"),
                   (tokens_plot(r), "loss_vs_tokens", "held-out loss vs tokens per size (Q19)"),
                   (isoflop_plot(r), "isoflop", "final loss vs size per budget (Q8)")]
    extra = {k: r[k] for k in ("q8", "q19", "fit_compute", "fit_params", "frontier", "cells", "pending")}
    seeds = [int(x) for x in a.seeds]
    v = decide(r["q8"], r["q19"]["tokens"], len(seeds), r["q8"].get("growth"), r["cells"], a.loss_tolerance)
    extra["sweep_verdict"] = r["verdict"]  # the sweep's own text, both Q19 halves included
    write_study(out, "Study: scaling (Q8, Q19)", r["rows"], v, figures, extra=extra, columns=columns, claim=CLAIM,
                budget=a.budget, seeds=seeds, validity=validity)
    return 0


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (rows: ``budget``, ``size``, ``eval_loss`` and
    ``unigram_entropy``, the run's held-out unigram cross-entropy; ``q19.target_loss``): every size off the plateau
    at Q8's two budgets (each cell's seed-mean loss), and Q19's target off it."""
    from ptmlab.studies.pretrain_common import unigram_condition
    from ptmlab.studies.verdict import Condition

    rows = [r for r in record.get("rows") or [] if isinstance(r.get("eval_loss"), int | float)]
    budgets = sorted({r.get("budget") or 0 for r in rows})
    conds = []
    for which, b in (("smallest", budgets[0] if budgets else None), ("largest", budgets[-1] if budgets else None)):
        cells = {}
        for r in rows:
            if r.get("budget") == b:
                cells.setdefault(r.get("size") or r.get("params"), []).append(r)
        means = [{"eval_loss": sum(x["eval_loss"] for x in runs) / len(runs),
                  "unigram_entropy": _mean_entropy(runs)} for runs in cells.values()]
        conds.append(unigram_condition(means, f"worst size's seed-mean held-out loss at the {which} budget / "
                                              "unigram cross-entropy", record, pick=max))
    target = (record.get("q19") or {}).get("target_loss")
    entropies = [float(r["unigram_entropy"]) for r in rows if isinstance(r.get("unigram_entropy"), int | float)]
    ratio = float(target) / (sum(entropies) / len(entropies)) if isinstance(target, int | float) and entropies \
        else None
    conds.append(Condition.check("Q19's target loss / unigram cross-entropy", ratio, "<", 0.9))
    return conds


def _mean_entropy(runs: list[dict]):
    """The cell's runs' mean unigram cross-entropy (None when a run did not record one)."""
    hs = [r.get("unigram_entropy") for r in runs]
    return sum(hs) / len(hs) if all(isinstance(h, int | float) for h in hs) and hs else None
