"""Study ``anomaly`` (Li et al., ACL 2021): at which layer does a model notice a linguistic anomaly?

Claim (A7): morphosyntactic anomalies surface at earlier layers than semantic ones, and commonsense anomalies hardly
at all. Source: ACL 2021, Li, Zhu & Rudzicz, "How is BERT surprised? Layerwise detection of linguistic anomalies".
Paper: BLiMP best-layer accuracy BERT-base 0.742, RoBERTa-base 0.830; morphosyntactic anomalies peak in early-middle
layers, semantic ones later; commonsense anomalies (Urbach & Kutas) give no surprisal at any layer.

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): the detector at the
chosen variant and layer is above chance (0.5: the anomalous sentence of a pair picked at random) on the held-out
phenomena, by its 95% bootstrap interval (``held_out_at_chosen_layer``): peak layers of a detector at chance mean
nothing.

Rule: variant and layer chosen on half the BLiMP phenomena, numbers from the other half; part 1 (morphology earlier)
supported when the 95% bootstrap interval of (semantics peak layer - morphology peak layer) is above 0.5, not
supported when below; part 2 (commonsense hardly at all), every layer reported, none chosen: supported when every
layer's share of more-surprising anomalies has a one-sided 95% upper bound below 0.65, not supported when some
layer's lower bound, Bonferroni-corrected over the layers, is above 0.65; the claim supported when both parts are,
not supported when either is not, otherwise inconclusive.

In detail. Honest selection first: BLiMP phenomena are split by name (sorted; even positions form the development
half, odd positions the held-out half). The scoring variant (``--variants``: centred token vectors or the plain
method) and the reported layer are chosen on the development half; every number in the verdict is measured on the
held-out half. Part 1 (morphology earlier): the peak layer of semantics minus the peak layer of morphology on
held-out pairs, with a 95% bootstrap over pairs (resampled within each field, peaks recomputed): supported when the
interval is above 0.5 (morphology peaks at least one layer earlier), not supported when below 0.5 (same layer or
later), inconclusive otherwise. Part 2 (commonsense hardly at all): on the commonsense set (``urbach-kutas``), per
layer, the share of rows where the anomalous sentence is more surprising (a row's value averaged over the reference
samples), with a normal interval over rows; no layer is chosen on the rows it is reported on. Supported when every
layer's one-sided 95% upper bound is below 0.65 (each layer shown below it: an intersection-union test, no
correction needed); not supported when some layer's lower bound, Bonferroni-corrected over the layers (one-sided
1 - 0.05/L), is above 0.65; inconclusive otherwise. The claim is both parts; a part whose data are absent is
inconclusive. The committed result was decided by an earlier part 2 that read the best of the layers on the same
rows; judged again by this rule from each layer's recorded share (with the largest spread a share can have,
p(1 - p)/n: conservative, since the rows are averaged over the reference samples) it is exploratory; a rerun keeps
the per-row shares (``evidence``).

Method: Gaussians per layer on a reference corpus (one fit per seed, each on its own reference sample: ``--seeds``;
a pair's correctness is averaged over seeds), BLiMP accuracy per layer and field, and the surprisal gap per layer on
the psycholinguistic sets. ``--budget full``: mpnet (12 layers, the paper's size), seeds 0,1,2; every sentence is
encoded once and scored under the Gaussians of both variants and every seed. With every BLiMP pair
(``--per-phenomenon 1000``: 51,000 pairs) it took 55 minutes on 2 CPU cores.

Its seeds are reference samples of one model's features, an analysis rather than training runs: it runs in
this process under either ``--executor``.

Budgets and rough times on 2 CPU cores and one GPU: docs/studies.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmlab.analysis.anomaly import DEFAULT_TEXT_DIR
from ptmlab.core.config import at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import StudyBase, parse_study_args, write_study
from ptmlab.studies.evidence import rounded, unrounded
from ptmlab.studies.verdict import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    SUPPORTED,
    Claim,
    Estimate,
    Verdict,
    bootstrap_mean,
    combine,
)

CLAIM = Claim(
    study="anomaly",
    claim="morphosyntactic anomalies surface at earlier layers than semantic ones, and commonsense anomalies hardly "
          "at all (A7)",
    source="ACL 2021: Li, Zhu & Rudzicz, How is BERT surprised? Layerwise detection of linguistic anomalies",
    paper="BLiMP best-layer accuracy BERT-base 0.742, RoBERTa-base 0.830; morphosyntax peaks earlier than "
          "semantics; commonsense anomalies give no surprisal at any layer",
    rule="variant and layer chosen on half the BLiMP phenomena, numbers from the other half; part 1 (morphology "
         "earlier) supported when the 95% bootstrap interval of (semantics peak layer - morphology peak layer) is "
         "above 0.5, not supported when below; part 2 (commonsense hardly at all), every layer reported, none "
         "chosen: supported when every layer's share of more-surprising anomalies has a one-sided 95% upper bound "
         "below 0.65, not supported when some layer's lower bound, Bonferroni-corrected over the layers, is above "
         "0.65; the claim supported when both parts are, not supported when either is not, otherwise inconclusive.",
    conditions=(
        "held-out pair accuracy at the chosen layer above chance (0.5) by its 95% interval",
    ),
    metric="part 1: semantics minus morphology peak layer (held-out BLiMP); part 2: per layer, the share of "
           "commonsense anomalies more surprising",
    margin=0.65,
    parts=("morphology earlier", "commonsense hardly at all"),
)
SHARED = DEFAULT_TEXT_DIR.parent
COMMONSENSE = "urbach-kutas"
VARIANTS = {"centred": True, "plain": False}


@dataclass(frozen=True)
class AnomalyStudyArgs(StudyBase):
    model: str = opt("minilm", "zoo name or model directory")
    blimp: str = opt(str(SHARED / "blimp"), "BLiMP folder")
    anomaly_sets: str = opt(str(SHARED / "anomaly"), "psycholinguistic sets folder")
    reference: str | None = opt(None, "reference text (default: WikiText-2 when present, else tweets)")
    max_sentences: int = opt(2000, "reference sentences")
    covariance: str = opt("full", "full, ledoit-wolf or diag", choices=["full", "ledoit-wolf", "diag"])
    include_special: bool = opt(False, "also score [CLS]/[SEP]")
    variants: list[str] = opt(["centred", "plain"], "scoring variants to choose from on the development phenomena: "
                                                   "centred (token vectors centred on their sentence), plain")
    per_phenomenon: int = opt(100, "BLiMP pairs per phenomenon (0: every pair)")
    batch_size: int = opt(64, "batch size")
    seed: int = opt(0, "seed of the reference sample")
    seeds: list[str] = opt([], "reference samples (seeds) to average each pair over, e.g. 0,1,2 (empty: --seed)")
    output: str = opt("runs/study-anomaly", "output directory")
    overwrite: bool = opt(True, "replace a previous analysis in the output")

    def validate(self) -> None:
        bad = [v for v in self.variants if v not in VARIANTS]
        if bad or not self.variants:
            raise PtmlabError(f"--variants {','.join(self.variants)} is not valid: choose from centred, plain")
        at_least(self, 1, "max_sentences", "batch_size")
        at_least(self, 0, "per_phenomenon")


# what --budget small runs (tests, CI)
SMALL = {"model": "tiny", "max_sentences": 100, "per_phenomenon": 5}
FULL = {"model": "mpnet", "seeds": ["0", "1", "2"]}  # what --budget full runs


def split_phenomena(phenomena: list[str]) -> tuple[set[str], set[str]]:
    """(development, held-out): the sorted phenomenon names at even and at odd positions."""
    names = sorted(set(phenomena))
    return set(names[0::2]), set(names[1::2])


def peak_gap(morph: np.ndarray, sem: np.ndarray, resamples: int = 2000, seed: int = 0) -> Estimate:
    """Semantics' peak layer minus morphology's, from per-pair correctness [pairs, layers] of each field, with a
    percentile bootstrap over pairs (resampled within each field)."""
    rng = np.random.default_rng(seed)
    value = int(sem.mean(0).argmax()) - int(morph.mean(0).argmax())
    gaps = [int(sem[rng.integers(0, len(sem), len(sem))].mean(0).argmax())
            - int(morph[rng.integers(0, len(morph), len(morph))].mean(0).argmax()) for _ in range(resamples)]
    lo, hi = np.quantile(gaps, [0.025, 0.975])
    return Estimate("semantics peak layer minus morphology peak layer", float(value), float(lo), float(hi),
                    len(morph) + len(sem), f"bootstrap over {len(morph) + len(sem)} pairs (95%)")


def every_layer(means, ses, n: int, how: str, ceiling: float = 0.65) -> Verdict:
    """Part 2 from each layer's share of more-surprising anomalies (``means``) and its standard error (``ses``)
    over ``n`` rows: supported when every layer's one-sided 95% upper bound is below ``ceiling``, not supported
    when some layer's Bonferroni-corrected lower bound (one-sided ``1 - 0.05/L``) is above it, else inconclusive.
    The estimate is the highest layer's share with its corrected interval."""
    from scipy.stats import norm

    from ptmlab.studies.verdict import detectable_effect

    means, ses = [float(x) for x in means], [float(x) for x in ses]
    n_layers = len(means)
    z1, zb = float(norm.ppf(0.95)), float(norm.ppf(1 - 0.05 / n_layers))
    top = int(np.argmax(means))
    est = Estimate(f"commonsense: share of anomalies more surprising, layer {top} (the highest of {n_layers})",
                   means[top], means[top] - zb * ses[top], means[top] + zb * ses[top], n,
                   f"normal interval over {n} rows, Bonferroni over {n_layers} layers, {how}",
                   None, 1 - 0.1 / n_layers)
    det = detectable_effect(est)
    uppers = [m + z1 * s for m, s in zip(means, ses, strict=True)]
    lowers = [m - zb * s for m, s in zip(means, ses, strict=True)]
    above = [k for k, lo in enumerate(lowers) if lo > ceiling]
    said = (f"every layer reported: the highest, layer {top}, {means[top]:.3f} (Bonferroni-corrected "
            f"[{lowers[top]:.3f}, {means[top] + zb * ses[top]:.3f}]; {how})"
            + ("" if det is None else f"; could detect ±{det:.4f}"))
    if all(u < ceiling for u in uppers):
        return Verdict(SUPPORTED, f"{said}: every layer's one-sided 95% upper bound is below {ceiling:g} (the "
                                  f"highest {max(uppers):.3f})", est, detectable_effect=det, thresholds=(ceiling,))
    if above:
        return Verdict(NOT_SUPPORTED, f"{said}: layers {above} have corrected lower bounds above {ceiling:g}", est,
                       detectable_effect=det, thresholds=(ceiling,))
    return Verdict(INCONCLUSIVE, f"{said}: no layer's corrected lower bound is above {ceiling:g}, and layers "
                                 f"{[k for k, u in enumerate(uppers) if u >= ceiling]} have upper bounds at or "
                                 f"above it", est, detectable_effect=det, thresholds=(ceiling,))


def commonsense_rows(matrix: np.ndarray, ceiling: float = 0.65) -> Verdict:
    """Part 2 from the per-row, per-layer values [rows, layers] (each row's share over the reference samples)."""
    n = len(matrix)
    return every_layer(matrix.mean(0), matrix.std(0, ddof=1) / np.sqrt(n), n, "rows' own spread", ceiling)


def decide(morph: np.ndarray | None, sem: np.ndarray | None, commonsense: np.ndarray | None,
           ceiling: float = 0.65, part1: Verdict | None = None, part2: Verdict | None = None) -> Verdict:
    """The rule of ``CLAIM`` on held-out per-pair correctness of morphology and semantics and per-row correctness of
    the commonsense set (each [items, layers]; None when absent). ``part1`` / ``part2``: a part already decided (a
    record's own, when its per-item numbers are not kept)."""
    if part1 is None and (morph is None or sem is None or not len(morph) or not len(sem)):
        part1 = Verdict(INCONCLUSIVE, "no held-out morphology or semantics pairs to compare")
    elif part1 is None:
        est = peak_gap(morph, sem)
        out = SUPPORTED if est.low > 0.5 else NOT_SUPPORTED if est.high < 0.5 else INCONCLUSIVE
        word = {SUPPORTED: "morphology peaks earlier", NOT_SUPPORTED: "morphology peaks no earlier",
                INCONCLUSIVE: "not resolved"}[out]
        part1 = Verdict(out, f"semantics minus morphology peak layer {est.text(1)}: {word}", est, thresholds=(0.5,))
    if part2 is None and (commonsense is None or not len(commonsense)):
        part2 = Verdict(INCONCLUSIVE, f"no commonsense set ({COMMONSENSE}) to test")
    elif part2 is None:
        part2 = commonsense_rows(np.asarray(commonsense, dtype=float), ceiling)
    return combine([part1, part2], names=["morphology earlier", "commonsense hardly at all"])


RESTATES_RECORDED_INTERVALS = True  # part 1 as recorded; part 2 from the per-layer shares the rows hold


def recomputed_from(record: dict) -> tuple[str, str]:
    """How ``restate`` recomputed ``record``'s verdict (``rederive``'s ``recompute`` block)."""
    from ptmlab.studies.evidence import evidence_of

    if evidence_of(record).get("commonsense"):
        return "partly recomputed", ("part 2 from every commonsense row's per-layer share (evidence); part 1's "
                                     "bootstrap over held-out pairs as the run recorded it")
    return "partly recomputed", ("part 2 from each layer's recorded share with the largest spread a share can have "
                                 "(p(1 - p)/n, conservative); part 1 as the run recorded it")


def restate(record: dict, name: str = "anomaly") -> Verdict | None:
    """The rule of ``CLAIM`` from the record: part 1 as the run recorded it (its per-pair numbers are not kept);
    part 2 from the per-row shares (``evidence.commonsense``) where kept, else from each layer's share in the rows
    with the largest spread a share of n rows can have, ``p(1 - p)/n``."""
    from ptmlab.studies.evidence import evidence_of, unrounded

    parts = [Verdict.from_part(p) for p in record.get("parts") or [] if isinstance(p, dict)]
    if not parts or parts[0] is None:
        return None
    ev = evidence_of(record).get("commonsense")
    if ev:
        part2 = commonsense_rows(np.array([unrounded(row) for row in ev]))
    else:
        shares = next((r for r in record.get("rows") or [] if str(r.get("group", "")).startswith(f"{COMMONSENSE}:")),
                      None)
        old = parts[1].estimate if len(parts) > 1 and parts[1] is not None else None
        if shares is None or old is None or not old.n:
            return None
        means = [float(v) for k, v in sorted(((k, v) for k, v in shares.items() if k.startswith("layer ")),
                                             key=lambda kv: int(kv[0].split()[1]))]
        ses = [max(float(np.sqrt(p * (1 - p) / old.n)), 1e-12) for p in means]
        part2 = every_layer(means, ses, old.n, "spread bounded by p(1 - p)/n")
    return decide(None, None, None, part1=parts[0], part2=part2)


def _correct(a: AnomalyStudyArgs, pairs, sets, seeds: list[int]) -> dict[str, tuple[np.ndarray, dict]]:
    """Per variant of ``a.variants``: per-pair BLiMP correctness [pairs, layers] and per-set, per-column
    psycholinguistic correctness, averaged over the reference samples of ``seeds``. Every sentence is encoded once:
    the Gaussians of every variant and seed score it from the same forward pass."""
    from dataclasses import replace

    from ptmlab.analysis.anomaly import Encoder
    from ptmlab.analysis.runs import fit_or_load

    enc = Encoder.load(a.model, include_special=a.include_special, batch_size=a.batch_size)
    keys = [(v, seed) for v in a.variants for seed in seeds]
    fits = []
    for v, seed in keys:
        variant = replace(enc, center=VARIANTS[v])  # the same weights, this variant's token vectors
        fits.append((fit_or_load(variant, _FitArgs(a.reference, a.max_sentences, seed, a.covariance), a.model)[0],
                     VARIANTS[v]))
    good = enc.scores_many(fits, [p.good for p in pairs])
    bad = enc.scores_many(fits, [p.bad for p in pairs])
    psy = [{} for _ in keys]
    for name, (header, rows) in sets.items():
        columns = [enc.scores_many(fits, [r[c] for r in rows]) for c in range(len(header))]
        for k in range(len(keys)):
            for c in range(1, len(header)):  # the correct sentence (column 0) less surprising than the variant
                psy[k][(name, header[c])] = (columns[0][k] > columns[c][k]).astype(float)
    out = {}
    for v in a.variants:
        ks = [k for k, (var, _) in enumerate(keys) if var == v]
        out[v] = (np.mean([(good[k] > bad[k]).astype(float) for k in ks], 0),
                  {col: np.mean([psy[k][col] for k in ks], 0) for col in psy[ks[0]]})
    return out


@dataclass(frozen=True)
class _FitArgs:
    """What ``fit_or_load`` reads: the reference sample of one seed, never saved Gaussians."""

    reference: str | None
    max_sentences: int
    seed: int
    covariance: str
    gaussians: str | None = None



@STUDIES.register("anomaly", help="ACL 2021: layer-wise Gaussian anomaly detection on BLiMP and psycholinguistics")
def run(argv: list[str]) -> int:
    from ptmlab.analysis import plots
    from ptmlab.analysis.anomaly import load_anomaly_sets, load_blimp
    from ptmlab.studies.common import seed_list

    a = parse_study_args("anomaly", AnomalyStudyArgs, argv, __doc__, small=SMALL, full=FULL)
    if not Path(a.blimp).exists():
        raise PtmlabError(f"BLiMP folder '{a.blimp}' does not exist: pass the BLiMP data folder with --blimp")
    seeds = seed_list(a)
    out = Path(a.output)
    pairs = load_blimp(a.blimp, a.per_phenomenon or None)
    sets = load_anomaly_sets(a.anomaly_sets) if Path(a.anomaly_sets).exists() else {}
    dev_names, held_names = split_phenomena([p.phenomenon for p in pairs])
    dev = np.array([p.phenomenon in dev_names for p in pairs])
    held = ~dev
    if not dev.any() or not held.any():
        raise PtmlabError(f"BLiMP folder '{a.blimp}' holds fewer than two phenomena: the study chooses on one half of "
                          f"the phenomena and reports on the other")
    results = _correct(a, pairs, sets, seeds)
    choose = {v: float(c[dev].mean(0).max()) for v, (c, _) in results.items()}
    chosen = max(choose, key=lambda v: (choose[v], v == "centred"))
    correct, psy = results[chosen]
    layer = int(correct[dev].mean(0).argmax())
    at_layer = bootstrap_mean(correct[held][:, layer], f"held-out accuracy at layer {layer} (chosen on dev)")
    fields = np.array([p.field for p in pairs])
    per_field = {f: [round(float(x), 4) for x in correct[held & (fields == f)].mean(0)]
                 for f in sorted(set(fields[held]))}

    def field(name):
        m = held & (fields == name)
        return correct[m] if m.any() else None

    commonsense = next((c for (name, _), c in psy.items() if name == COMMONSENSE), None)
    if commonsense is not None:  # decided from the values results.json keeps, so that they give it again
        commonsense = np.array([unrounded(rounded(row)) for row in np.asarray(commonsense, dtype=float)])
    v = decide(field("morphology"), field("semantics"), commonsense)
    rows = [{"group": f"{var} ({'chosen' if var == chosen else 'not chosen'}), {part} phenomena",
             **{f"layer {i}": round(float(x), 4) for i, x in enumerate(c[mask].mean(0))}}
            for var, (c, _) in results.items() for part, mask in (("dev", dev), ("held-out", held))]
    rows += [{"group": f"held-out {k}", **{f"layer {i}": x for i, x in enumerate(vals)}}
             for k, vals in per_field.items()]
    rows += [{"group": f"{name}: {col} (share more surprising)",
              **{f"layer {i}": round(float(x), 4) for i, x in enumerate(c.mean(0))}} for (name, col), c in psy.items()]
    held_curve = correct[held].mean(0)
    fig = plots.layer_lines({"held-out (all)": [float(x) for x in held_curve], **per_field}, "accuracy",
                            f"BLiMP accuracy per layer, held-out phenomena ({chosen})", hline=0.5)
    write_study(out, f"Study: layer-wise anomaly detection ({a.model})", rows, v,
                [(fig, "blimp_layers", "held-out accuracy per layer, overall and per field")],
                extra={"chosen_variant": chosen, "dev_best_layer_accuracy": choose, "chosen_layer": layer,
                       "held_out_at_chosen_layer": at_layer.to_dict(),
                       "held_out_best_layer_accuracy": round(float(held_curve.max()), 4),
                       "held_out_best_layer": int(held_curve.argmax()),
                       "selection": "phenomena sorted by name: even positions choose the variant and layer (dev), "
                                    "odd positions report (held-out)",
                       "dev_phenomena": sorted(dev_names), "held_out_phenomena": sorted(held_names),
                       "pairs": {"dev": int(dev.sum()), "held_out": int(held.sum())}, "model": a.model,
                       "evidence": None if commonsense is None else
                       {"commonsense": [rounded(row) for row in np.asarray(commonsense, dtype=float)]}},
                claim=CLAIM, budget=a.budget, seeds=seeds, validity=validity)
    return 0


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (``held_out_at_chosen_layer``: value and interval)."""
    from ptmlab.studies.verdict import Condition

    held = record.get("held_out_at_chosen_layer") if isinstance(record.get("held_out_at_chosen_layer"), dict) else {}
    return [Condition.check("held-out pair accuracy at the chosen layer, lower end of its 95% interval",
                            held.get("low"), ">", 0.5)]
