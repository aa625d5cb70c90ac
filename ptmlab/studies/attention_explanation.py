"""Study ``attention-explanation`` (Q12, Jain & Wallace): is attention an explanation?

On a fine-tuned model (a run directory, or a zoo model fine-tuned here first), per dev example: Kendall's tau
between [CLS] attention and gradient / leave-one-out importance, and the output change when the last layer's
attention is permuted. The claim is supported when attention agrees only weakly with importance (median tau
below 0.3 while the two importance measures agree better with each other) and permuting attention often leaves
the prediction almost unchanged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ptmlab.core.config import opt
from ptmlab.studies import STUDIES
from ptmlab.studies.ablation import fine_tuned_model
from ptmlab.studies.common import SMALL_FINETUNE, StudyArgs, parse_study_args, write_study


@dataclass(frozen=True)
class ExplanationStudyArgs(StudyArgs):
    model: str = opt("minilm", "fine-tuned run directory, or a zoo model to fine-tune first")
    task: str = opt("", "task (default: sst2 when GLUE data is present, else tweets)")
    glue_dir: str | None = opt(None, "GLUE directory")
    max_train: int = opt(4000, "training examples when fine-tuning first")
    max_eval: int = opt(200, "dev examples to explain")
    max_length: int = opt(64, "max tokens")
    epochs: float = opt(1.0, "epochs when fine-tuning first")
    batch_size: int = opt(32, "batch size when fine-tuning first")
    permutations: int = opt(10, "attention permutations per example")
    seed: int = opt(0, "seed")
    output: str = opt("runs/study-attention-explanation", "output directory")
    overwrite: bool = opt(False, "rerun a fine-tuning that already finished")


SMALL = {**SMALL_FINETUNE, "max_eval": 12, "permutations": 3}  # what --budget small runs (tests, CI)


@STUDIES.register("attention-explanation", help="Q12: is attention an explanation? (Kendall tau, permutations)")
def run(argv: list[str]) -> int:
    from ptmlab.analysis import plots
    from ptmlab.analysis.explanation import explain
    from ptmlab.analysis.taskdata import load_analysis_input

    a = parse_study_args("attention-explanation", ExplanationStudyArgs, argv, __doc__, small=SMALL)
    out = Path(a.output)
    model = fine_tuned_model(a, out)
    inp = load_analysis_input(model, a, attn_implementation="eager", split="dev")
    res = [asdict(r) for r in explain(inp.model, inp.enc, set(inp.tokenizer.all_special_ids), a.permutations,
                                      a.seed)]
    keys = ("tau_last_grad", "tau_last_loo", "tau_mean_grad", "tau_mean_loo", "tau_grad_loo")
    med = {k: float(np.nanmedian([r[k] for r in res])) for k in keys}
    tvd = np.array([r["permutation_tvd"] for r in res])
    rows = [{"statistic": k, "median": med[k]} for k in keys] + \
        [{"statistic": "median output TVD after permutation", "median": float(np.median(tvd))},
         {"statistic": "share of examples with TVD < 0.05", "median": float((tvd < 0.05).mean())}]
    attn_best = max(med[k] for k in keys[:4])
    supported = attn_best < 0.3 and attn_best < med["tau_grad_loo"]
    verdict = (f"over {len(res)} examples the median Kendall tau between attention and importance is at most "
               f"{attn_best:+.3f} (gradient vs leave-one-out: {med['tau_grad_loo']:+.3f}); permuting the last "
               f"layer's attention moves the output by a median TVD of {np.median(tvd):.3f} and by less than 0.05 "
               f"for {100 * (tvd < 0.05).mean():.0f}% of examples. The claim that attention is not an explanation "
               f"is {'supported' if supported else 'not supported'} here.")
    figs = [(plots.histograms({k: [r[k] for r in res] for k in keys}, "Kendall tau", "attention vs importance"),
             "kendall_tau", "distribution of Kendall tau over examples"),
            (plots.scatter([r["max_attention"] for r in res], list(tvd), "max [CLS] attention (last layer)",
                           "median output TVD", "permutation counterfactual"), "permutation",
             "output change when the last layer's attention is permuted")]
    write_study(out, f"Study: attention vs explanation ({a.model} on {a.task})", rows, verdict, figs,
                extra={"examples": res})
    return 0
