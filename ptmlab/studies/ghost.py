"""Study ``ghost`` (GhostBERT, Huang et al. ACL 2021): do cheap ghost features recover what pruning removed?

Claim: ghost modules (cheap depthwise-convolution features) added to a pruned model recover accuracy, beating both
the same pruned model fine-tuned alone and a model pruned less to the same parameter count. Source: ACL 2021, Huang
et al., "GhostBERT: Generate More Features with Cheap Operations for BERT". Paper: on GLUE, ghost modules on a
BERT-base pruned to 1/2-1/12 width recover most of the loss (e.g. +0.5 to +2 average points over the pruned model).

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): the reference, the
unpruned fine-tuned model, has at least the training epochs of the pruned models compared with it (``train_epochs``:
the unpruned model's fine-tuning against the fine-tuning before pruning plus the recovery fine-tuning after it), so
that the ghost modules are not credited with training the reference never had; the variants (a), (b) and (c) are
each above the task's trivial predictor by a t interval over seeds.

Rule: hierarchical bootstrap (seeds, then dev examples, 95%) of ghost minus pruned and of ghost minus equal-size:
supported when both intervals are above 0, not supported when either is below 0, otherwise inconclusive.

In detail: two paired comparisons (hierarchical bootstrap: seeds, then dev examples, 95%): (b) ghost minus (a)
pruned, and (b) ghost minus (c) equal-size. Each part is supported when its interval is above 0, not supported when
below 0, inconclusive when it includes 0. Supported when both parts are, not supported when either is not, inconclusive
otherwise.

From one fine-tuned model, heads and FFN neurons are pruned (``--heads``/``--ffn``, default three quarters of each,
a quarter of the width left, inside the paper's 1/2 to 1/12: a setting where pruning costs, so that there is
something to recover; no recovery yet), then three variants get the same fine-tuning budget, once per seed
(``--seeds``; ``--budget full``: seeds 0,1,2 and the whole dev set): (a) the pruned model, (b) the pruned model with
ghost modules (``ptmlab ghost``), and (c) a model pruned less (``--params`` target) so that it has as many parameters
as (b). The reference, the unpruned fine-tuned model, gets the same recovery fine-tuning once per seed (it is
fine-tuned again for ``--epochs``), so it has had as much training as the pruned models; its per-seed scores are
recorded beside theirs, and how much the recovered pruned model (a) trails it is the cost of pruning.

Budgets: ``--budget small``: the tiny model, 64 training rows, one seed (a mechanics check, a minute or two on 2 CPU
cores). Default: minilm on 2,000 SST-2 rows, 1 epoch per fine-tuning, 3 seeds x 4 fine-tunings (about 40 minutes on
2 free CPU cores, a few minutes on one GPU). ``--budget full`` adds the whole dev set (872 examples; about an hour on
2 CPU cores, under 10 minutes on one GPU); an inconclusive result states the seeds that would decide it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ptmlab.core.config import opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import FULL_FINETUNE, SMALL_FINETUNE, parse_study_args, write_study
from ptmlab.studies.compress_common import CompressStudyArgs
from ptmlab.studies.evidence import pack_runs
from ptmlab.studies.verdict import INCONCLUSIVE, Claim, Verdict, combine, decide_above, hierarchical_bootstrap

CLAIM = Claim(
    study="ghost",
    claim="ghost modules on a pruned model beat the same pruned model and a model pruned less to the same size",
    source="ACL 2021: Huang et al., GhostBERT: Generate More Features with Cheap Operations for BERT",
    paper="GLUE: ghost modules on BERT-base pruned to 1/2-1/12 width recover most of the loss, about +0.5 to +2 "
          "average points over the pruned model",
    rule="hierarchical bootstrap (seeds, then dev examples, 95%) of ghost minus pruned and of ghost minus "
         "equal-size: supported when both intervals are above 0, not supported when either is below 0, otherwise "
         "inconclusive",
    conditions=(
        "the unpruned reference trained at least as long as the pruned models compared with it",
        "the variants (a), (b) and (c) each above the task's trivial predictor by a t interval over seeds",
    ),
    paper_effect=0.005,
)


@dataclass(frozen=True)
class GhostStudyArgs(CompressStudyArgs):
    heads: float = opt(0.75, "fraction of attention heads pruned, in [0, 1)")
    ffn: float = opt(0.75, "fraction of FFN neurons pruned in every layer, in [0, 1)")
    ghost_kernel: int = opt(3, "kernel size of the ghost modules' depthwise convolution (odd)")
    output: str = opt("runs/study-ghost", "output directory")

    def validate(self) -> None:
        from ptmlab.compress.ghost import check_kernel
        from ptmlab.compress.targets import check_fraction

        super().validate()
        check_fraction("heads", self.heads)
        check_fraction("ffn", self.ffn)
        if not (self.heads or self.ffn):
            raise PtmlabError("nothing to prune: give --heads or --ffn above 0")
        check_kernel(self.ghost_kernel)


def equal_params_fraction(model, target: int) -> float:
    """The one fraction of heads and FFN neurons whose removal (as ``head_mask`` / ``ffn_mask`` count it: heads
    globally, at least one per layer; FFN per layer) leaves the parameter count closest to ``target``."""
    import math

    from ptmlab.compress.surgery import ffn_per_layer, head_dim, heads_per_layer
    from ptmlab.compress.targets import prunable_params
    from ptmlab.models.latency import parameter_count

    heads, ffn = heads_per_layer(model), ffn_per_layer(model)
    per_head, per_neuron = prunable_params(model.config.hidden_size, head_dim(model))
    total = parameter_count(model)

    def left(f: float) -> int:
        n_heads = min(math.ceil(round(f * sum(heads), 6)), sum(heads) - len(heads))
        n_ffn = sum(min(w - 1, math.ceil(round(f * w, 6))) for w in ffn)
        return total - n_heads * per_head - n_ffn * per_neuron

    return min((i / 10000 for i in range(10000)), key=lambda f: (abs(left(f) - target), f))


SMALL = {**SMALL_FINETUNE, "latency_repeats": 1, "importance_examples": 32}  # what --budget small runs (tests, CI)
FULL = dict(FULL_FINETUNE)  # what --budget full runs: seeds 0,1,2 and the whole dev set


@STUDIES.register("ghost", help="GhostBERT: pruned vs pruned + ghost modules vs pruned to equal parameters")
def run(argv: list[str]) -> int:
    from ptmlab.models.latency import parameter_count
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.studies.common import finetune_run, seed_dir, seed_list
    from ptmlab.studies.compress_common import change_run, dev_correctness, measure_run, measurer, prune_run, start
    from ptmlab.studies.executor import Run, run_grid

    a = parse_study_args("ghost", GhostStudyArgs, argv, __doc__, small=SMALL, full=FULL)
    seeds = seed_list(a)
    out, ft = start(a)
    meas = measurer(a, load_tokenizer(ft))
    params_ft = parameter_count(load_model(ft))

    raw = out / "pruned-raw"
    prune_run(a, ft, raw, heads=a.heads, ffn=a.ffn)
    equal_raw = out / "equal-raw"
    correct: dict[str, list] = {"pruned": [], "ghost": [], "equal": [], "unpruned": []}
    dirs = {(k, seed): seed_dir(out, k, seed, seeds) for seed in seeds for k in correct}
    # two rounds of the grid: (a) and (b) for every seed, then (c), pruned to (b)'s parameter count
    first = {}
    for seed in seeds:
        # the reference gets the recovery fine-tuning too: as much training as the pruned models
        first["unpruned", seed] = finetune_run(a, dirs["unpruned", seed], model=ft, seed=seed, test=False)
        first["pruned", seed] = finetune_run(a, dirs["pruned", seed], model=str(raw), seed=seed, test=False)
        first["ghost", seed] = Run(change_run, dirs["ghost", seed], (a, "ghost", str(raw), dirs["ghost", seed]),
                                   dict(ghost_kernel=a.ghost_kernel, seed=seed))
    first = run_grid(a, first)
    g = first["ghost", seeds[-1]]
    target = g["params"]
    if target >= params_ft:
        raise PtmlabError(f"the ghost model has {target:,} parameters, no fewer than the unpruned {params_ft:,}: "
                          f"prune more (--heads/--ffn) or use a smaller --ghost-kernel")
    frac = equal_params_fraction(load_model(ft), target)
    prune_run(a, ft, equal_raw, heads=frac, ffn=frac)
    run_grid(a, {seed: finetune_run(a, dirs["equal", seed], model=str(equal_raw), seed=seed, test=False)
                 for seed in seeds})
    for seed in seeds:
        for k in correct:
            correct[k].append(dev_correctness(meas, load_model(str(dirs[k, seed]))))

    last = {k: seed_dir(out, k, seeds[-1], seeds) for k in correct}
    pruned_label = f"heads -{a.heads:.0%}, FFN -{a.ffn:.0%}"
    rows = [measure_run(meas, "unpruned, fine-tuned again as long as the recovery", last["unpruned"]),
            measure_run(meas, f"pruned ({pruned_label}), no fine-tuning", raw),
            measure_run(meas, "(a) pruned + fine-tuning", last["pruned"]),
            measure_run(meas, "(b) pruned + ghost + fine-tuning", last["ghost"], ghost_params=g["ghost_params"]),
            measure_run(meas, "(c) pruned to (b)'s params + fine-tuning", last["equal"])]
    base = rows[0]
    for r in rows:
        r["speedup_b32"] = round(base["latency_b32_ms"] / r["latency_b32_ms"], 2)
        r.setdefault("ghost_params", 0)
    for r, k in zip([rows[0], *rows[2:]], ("unpruned", "pruned", "ghost", "equal"), strict=True):
        if all(c is not None for c in correct[k]):
            r["dev_mean_over_seeds"] = round(float(np.mean(np.concatenate(correct[k]))), 4)
            r["per_seed"] = [round(float(np.mean(c)), 4) for c in correct[k]]
    rows[-1]["params_vs_b"] = round(rows[-1]["params"] / rows[3]["params"] - 1, 4)
    cols = ["variant", "dev", "dev_mean_over_seeds", "params", "ghost_params", "size_mb", "latency_b32_ms",
            "speedup_b32"]
    fig = _plot(rows, meas.spec.main_metric)
    write_study(out, f"Study: GhostBERT ghost modules ({a.task}, kernel {a.ghost_kernel})", rows,
                decide(correct), [(fig, "ghost", "dev metric per variant (the last seed's runs)")],
                extra={"metric": meas.spec.main_metric, "fine_tuned": ft, "heads": a.heads, "ffn": a.ffn,
                       "ghost_kernel": a.ghost_kernel, "equal_params_fraction": frac,
                       # every model had the first fine-tuning and one more (the reference's second, the recovery)
                       "train_epochs": {"reference": 2 * a.epochs, "compared": 2 * a.epochs},
                       "evidence": None if any(c is None for runs in correct.values() for c in runs) else
                       {"correct": {k: pack_runs(runs) for k, runs in correct.items()}}},
                columns=cols, claim=CLAIM, budget=a.budget, seeds=seeds, validity=validity)
    return 0


def decide(correct: dict[str, list]) -> Verdict:
    """The rule of ``CLAIM`` on per-seed, per-example dev correctness of ``pruned``, ``ghost`` and ``equal``."""
    if any(c is None for runs in correct.values() for c in runs):
        return Verdict(INCONCLUSIVE, "no per-example correctness (a regression task): the bootstrap rule cannot run")
    parts = [decide_above(hierarchical_bootstrap(correct["ghost"], correct[k], f"accuracy of ghost minus {name}"), 0.0)
             for k, name in (("pruned", "the same pruned model"), ("equal", "the equal-size pruned model"))]
    return combine(parts)


def _plot(rows: list[dict], metric: str):
    from ptmlab.report.plots import bar_plot

    names = ["unpruned", "pruned, no tuning", "(a) pruned", "(b) + ghost", "(c) equal params"]
    return bar_plot(names, [r["dev"] for r in rows], f"dev {metric}", "GhostBERT study")


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (``train_epochs``; per-seed scores of (a), (b), (c))."""
    from ptmlab.studies.common import above_trivial, reference_budget, task_of

    rows = record.get("rows") or []
    systems = {str(r.get("variant", "?"))[:3]: r.get("per_seed") or [] for r in rows
               if str(r.get("variant", "")).startswith(("(a)", "(b)", "(c)"))}
    return reference_budget(record, "unpruned reference") + above_trivial(
        record, task_of(record), str(record.get("metric") or "accuracy"), systems or {"(b)": []})


def restate(record: dict, name: str = "ghost") -> Verdict:
    """From the record's per-example records (``evidence``) when it carries them: the rule itself. A committed
    record whose intervals pooled the seeds' copies of each example: paired t intervals over its per-seed scores,
    and without them no seed-level interval can be computed from it."""
    from ptmlab.studies.evidence import evidence_of, unpack_runs

    ev = evidence_of(record).get("correct")
    if isinstance(ev, dict) and {"ghost", "pruned", "equal"} <= set(ev):
        return decide({k: unpack_runs(v) for k, v in ev.items()})
    rows = record.get("rows") or []
    if all(isinstance(r.get("per_seed"), list) for r in rows if str(r.get("variant", "")).startswith("(")):
        from ptmlab.studies.verdict import paired_seeds

        ps = {str(r["variant"])[:3]: r["per_seed"] for r in rows if str(r.get("variant", "")).startswith("(")}
        return combine([decide_above(paired_seeds(ps["(b)"], ps[k], f"accuracy of ghost minus {what}"), 0.0)
                        for k, what in (("(a)", "the same pruned model"), ("(c)", "the equal-size pruned model"))])
    return Verdict(INCONCLUSIVE, "the recorded intervals pool the seeds' copies of each dev example as independent "
                                 "examples, and the per-seed scores a seed-level interval needs were not recorded")
