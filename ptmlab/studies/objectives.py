"""Study ``objectives`` (Q2, Q6): which pre-training objective gives the best downstream score at equal compute?

Claim (Q6, from ELECTRA: Clark et al., ICLR 2020): replaced-token detection learns from every input position, not
only the 15% that are masked, so at equal pre-training compute ELECTRA fine-tunes better than masked-LM
objectives. The paper's number: ELECTRA-Small 79.9 GLUE dev against 75.1 for a BERT-Small trained with the same
compute (Table 1); at base size with equal compute, ELECTRA 85.0 against BERT 82.2 (Table 5).

Method: one small model per objective, pre-trained from scratch on the same text with the same tokenizer, block
size and batch, to the same training FLOPs (``--max-flops``: 6N per token plus attention, N counting every
trained parameter outside the embedding tables, ELECTRA's generator included; the budget becomes a step count,
so the runs' FLOPs agree to within one step, and the study checks and reports that they agree within 5%). The
encoder-only objectives (mlm, wwm, span, electra) train BERT/ELECTRA encoders, clm a GPT-2 decoder, t5 and bart
encoder-decoders of the same layer count per stack; every kept model is fine-tuned identically (transformers'
own sequence-classification heads: BERT/ELECTRA [CLS], GPT-2 last token, T5/BART decoder end) on SST-2 and MRPC
(the built-in tweets without the GLUE data), once per seed, and scored on the dev split.

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): every fine-tuned model
on every task is above the task's trivial predictor (majority-class accuracy, the all-positive F1, MCC 0) by a t
interval over seeds, and pre-training moved the held-out loss clearly below the unigram cross-entropy of the held-
out text (``unigram_entropy``; the largest token-prediction eval loss below 0.9 of it) before any pre-training is
compared downstream (``pretrain_common.pretrain_validity``).

Verdict rule (written before the runs): a run's score is the average over tasks of each task's main dev metric; for
every other objective, the per-seed difference ELECTRA minus that objective (the same seed for both) gets a 95%
paired t interval over seeds. Supported when every interval lies above 0; not supported when some interval lies
below 0 (another objective beats ELECTRA); inconclusive otherwise, with one seed (--budget small), or when the runs'
FLOPs differ by more than 5% (then the comparison is not at equal compute). Every objective at the same score on
every seed (the fine-tuned models cannot tell them apart) is inconclusive too.

Budgets: ``--budget small`` runs 5 objectives on a 1-layer model, one seed, in minutes (inconclusive by
construction); ``--budget full`` runs 3 seeds on the full dev sets. At 2e13 FLOPs (about 240 masked-LM steps of 32
blocks) every objective ends on the unigram plateau, so no budget that runs on 2 CPU cores can test the claim.
``--budget gpu`` is sized to decide it on one GPU: the full budget at 5e14 FLOPs per objective and seed (about 6,000
masked-LM steps, 14 passes over the shared English text: ``--corpus english``), bf16 where the device has it, every
model fine-tuned on its tasks' whole training sets; about an hour on one H100 (estimated from step counts, not
measured).
Rough times per budget on 2 CPU cores and one GPU: docs/studies.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import parse_study_args, write_study
from ptmlab.studies.pretrain_common import (
    FULL_PRETRAIN,
    GPU_PRETRAIN,
    SMALL_FINETUNE,
    PretrainStudyArgs,
    check_seeds,
    compare_rivals,
    flop_spread,
    pretrain_config,
    pretrain_grid,
    scores_figure,
    study_tasks,
    summary_rows,
)
from ptmlab.studies.verdict import INCONCLUSIVE, Claim, Verdict

CLAIM = Claim(
    study="objectives",
    claim="At equal pre-training compute, ELECTRA's replaced-token detection fine-tunes better than the other "
          "pre-training objectives (masked LM and its variants, causal LM, T5, BART).",
    source="Q2, Q6; Clark et al., ELECTRA, ICLR 2020",
    paper="ELECTRA-Small 79.9 vs BERT-Small 75.1 GLUE dev at the same compute (Table 1); base size 85.0 vs 82.2",
    rule="a run's score is the average over tasks of each task's main dev metric; for every other objective, the "
         "per-seed difference ELECTRA minus that objective (the same seed for both) gets a 95% paired t interval "
         "over seeds. Supported when every interval lies above 0; not supported when some interval lies below 0 "
         "(another objective beats ELECTRA); inconclusive otherwise, with one seed (--budget small), or when the "
         "runs' FLOPs differ by more than 5% (then the comparison is not at equal compute). Every objective at "
         "the same score on every seed (the fine-tuned models cannot tell them apart) is inconclusive too.",
    conditions=(
        "every fine-tuned model above its task's trivial predictor by a t interval over seeds",
        "pre-training moved the held-out loss below 0.9 x the unigram cross-entropy of the held-out text",
    ),
    paper_effect=0.048,
)

CLAIMED = "electra"
FLOP_TOLERANCE = 0.05
ARCH = {"mlm": "bert", "wwm": "bert", "span": "bert", "electra": "electra", "clm": "gpt2", "t5": "t5",
        "bart": "bart"}

SMALL = dict(objectives=["mlm", "wwm", "span", "electra", "clm"], size="tiny", layers=1, hidden=32, heads=2,
             ffn=64, block_size=32, pretrain_batch_size=8, pretrain_lr=2e-3, max_flops=4.5e8, eval_blocks=16,
             **SMALL_FINETUNE)
FULL = FULL_PRETRAIN
GPU = dict(GPU_PRETRAIN, max_flops=5e14)


@dataclass(frozen=True)
class ObjectivesArgs(PretrainStudyArgs):
    objectives: list[str] = opt(["mlm", "wwm", "span", "electra", "clm", "t5", "bart"],
                                "objectives to compare (each from scratch on its usual architecture)")
    output: str = opt("runs/study-objectives", "output directory")

    def validate(self) -> None:
        from ptmlab.pretrain.objectives import OBJECTIVES

        super().validate()
        for o in self.objectives:
            OBJECTIVES.get(o)
            if o not in ARCH:
                raise PtmlabError(f"objective '{o}' has no classification model to fine-tune in this study: "
                                  f"choose from {', '.join(ARCH)}")
        if CLAIMED not in self.objectives or len(self.objectives) < 2:
            raise PtmlabError(f"--objectives must include {CLAIMED} and at least one other objective")


def decide(scores: dict[str, list[float]], flop_gap: float) -> Verdict:
    """The rule of ``CLAIM``: ``scores`` are per-objective average dev scores, seed by seed in one seed order."""
    if flop_gap > FLOP_TOLERANCE:
        return Verdict(INCONCLUSIVE, f"the runs' FLOPs differ by {100 * flop_gap:.1f}% (> {100 * FLOP_TOLERANCE:.0f}%"
                                     f"): not an equal-compute comparison; raise --max-flops so every run takes more "
                                     f"steps")
    return compare_rivals(scores, CLAIMED, 0.0, "dev score")


def restate(record: dict, name: str = "objectives") -> Verdict | None:
    """The rule of ``CLAIM`` recomputed from the record's per-run scores (``per_seed``: each objective and seed's
    FLOPs and dev score per task)."""
    from ptmlab.studies.pretrain_common import flop_spread, summary_rows

    runs = [r for r in record.get("per_seed") or [] if isinstance(r, dict)]
    tasks = list(record.get("tasks") or [])
    if not runs or not tasks or not all(isinstance(r.get(t), int | float) for r in runs for t in tasks):
        return None
    return decide(summary_rows(runs, "objective", tasks)[1], flop_spread([r["flops"] for r in runs]))


@STUDIES.register("objectives", help="Q2/Q6: pre-training objectives at equal FLOPs (mlm wwm span electra clm t5 "
                                     "bart), fine-tuned; is ELECTRA best?")
def run(argv: list[str]) -> int:
    a = parse_study_args("objectives", ObjectivesArgs, argv, __doc__, small=SMALL, full=FULL, gpu=GPU)
    out = Path(a.output)
    tasks = study_tasks(a)
    cells = {(seed, obj): (out / f"{obj}-seed{seed}", seed) for seed in check_seeds(a.seeds) for obj in a.objectives}
    done = pretrain_grid(a, {(seed, obj): (d, seed, pretrain_config(a, d, seed, objective=obj, arch=ARCH[obj]))
                             for (seed, obj), (d, _) in cells.items()}, tasks)
    per_seed = []
    for (seed, obj), (s, scores) in done.items():
        m = s["metrics"]
        per_seed.append({"objective": obj, "seed": seed, "arch": s["architecture"], "steps": s["steps"],
                         "tokens": m["tokens"], "flops": m["flops"], "eval_loss": m["eval_loss"],
                         "unigram_entropy": s["corpus"].get("unigram_entropy"),
                         "tokens_per_second": m["tokens_per_second"], **scores})
    gap = flop_spread([r["flops"] for r in per_seed])
    rows, avg = summary_rows(per_seed, "objective", tasks)
    v = decide(avg, gap)
    fig = scores_figure(avg, "dev score (average over tasks)", f"objectives at {a.max_flops:.3g} FLOPs")
    write_study(out, "Study: pre-training objectives at equal compute", rows, v,
                [(fig, "objectives", "mean ± spread over seeds (dots: seeds)")],
                extra={"flop_spread": gap, "tasks": tasks, "per_seed": per_seed, "max_flops": a.max_flops},
                claim=CLAIM, budget=a.budget, seeds=check_seeds(a.seeds), validity=validity)
    return 0


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (``per_seed``, ``tasks``, ``unigram_entropy``)."""
    from ptmlab.studies.pretrain_common import pretrain_validity

    return pretrain_validity(record, "objective")
