"""Study ``anomaly`` (Li et al., ACL 2021): at which layer does a model notice a linguistic anomaly?

Gaussians per layer on a reference corpus, BLiMP accuracy per layer and field, and the surprisal gap per layer
on the psycholinguistic sets. The claim: morphosyntactic anomalies surface at earlier layers than semantic ones,
and commonsense ones hardly at all.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmlab.analysis.anomaly import DEFAULT_TEXT_DIR
from ptmlab.core.config import opt
from ptmlab.studies import STUDIES
from ptmlab.studies.common import StudyBase, parse_study_args, write_study

SHARED = DEFAULT_TEXT_DIR.parent


@dataclass(frozen=True)
class AnomalyStudyArgs(StudyBase):
    model: str = opt("minilm", "zoo name or model directory")
    blimp: str = opt(str(SHARED / "blimp"), "BLiMP folder")
    anomaly_sets: str = opt(str(SHARED / "anomaly"), "psycholinguistic sets folder")
    reference: str | None = opt(None, "reference text (default: WikiText-2 when present, else tweets)")
    max_sentences: int = opt(2000, "reference sentences")
    covariance: str = opt("full", "full, ledoit-wolf or diag", choices=["full", "ledoit-wolf", "diag"])
    include_special: bool = opt(False, "also score [CLS]/[SEP]")
    center: bool = opt(True, "centre token vectors on their sentence's mean (--no-center: the plain method)")
    per_phenomenon: int = opt(100, "BLiMP pairs per phenomenon")
    gaussians: str | None = opt(None, "saved Gaussians to reuse")
    heatmap_pairs: int = opt(2, "pairs whose token surprisal is plotted")
    batch_size: int = opt(64, "batch size")
    seed: int = opt(0, "seed")
    output: str = opt("runs/study-anomaly", "output directory")
    overwrite: bool = opt(True, "replace a previous analysis in the output")


def verdict(s: dict) -> str:
    parts = []
    if "per_field" in s:
        fields = {k: (int(np.argmax(v)), max(v)) for k, v in s["per_field"].items()}
        parts.append(f"BLiMP: best layer {s['best_layer']} ({s['best_accuracy']:.3f}); per field best layer "
                     + ", ".join(f"{k} {layer} ({acc:.3f})" for k, (layer, acc) in fields.items()))
        if "morphology" in fields and "semantics" in fields:
            earlier = fields["morphology"][0] <= fields["semantics"][0]
            parts.append(f"morphology peaks {'no later than' if earlier else 'later than'} semantics, so the claim "
                         f"that morphosyntactic anomalies surface earlier is "
                         f"{'supported' if earlier else 'not supported'} here")
    for r in s.get("psycholinguistic", []):
        gap = r["gap"]
        parts.append(f"{r['set']} {r['variant']}: max gap {max(gap):+.2f} at layer {int(np.argmax(gap))}")
    return "; ".join(parts) + "."


# what --budget small runs (tests, CI)
SMALL = {
    "model": "tiny",
    "max_sentences": 100,
    "per_phenomenon": 5,
    "heatmap_pairs": 1,
}


@STUDIES.register("anomaly", help="ACL 2021: layer-wise Gaussian anomaly detection on BLiMP and psycholinguistics")
def run(argv: list[str]) -> int:
    from ptmlab.analysis.runs import run_anomaly_analysis
    from ptmlab.core.rundir import RunDir

    a = parse_study_args("anomaly", AnomalyStudyArgs, argv, __doc__, small=SMALL)
    out = Path(a.output)
    analysis = out / "analysis"
    a = dataclasses.replace(a, blimp=a.blimp if Path(a.blimp).exists() else None,
                            anomaly_sets=a.anomaly_sets if Path(a.anomaly_sets).exists() else None,
                            output=str(analysis))
    s = run_anomaly_analysis(a, lambda: RunDir.create(analysis, True))
    rows = [{"group": "all", **{f"layer {i}": v for i, v in enumerate(s["per_layer"])}}] if "per_layer" in s else []
    rows += [{"group": k, **{f"layer {i}": v for i, v in enumerate(vals)}} for k, vals in s.get("per_field",
                                                                                                 {}).items()]
    rows += [{"group": f"{r['set']}: {r['variant']} (gap)", **{f"layer {i}": v for i, v in enumerate(r["gap"])}}
             for r in s.get("psycholinguistic", [])]
    write_study(out, f"Study: layer-wise anomaly detection ({a.model})", rows, verdict(s), extra={"summary": s})
    return 0
