"""Study ``compression`` (Q16): which compression family gives the best accuracy per size and per speed, and can
a model be halved without losing accuracy?

Claim: compressing a fine-tuned model to half its transformer-layer parameters keeps its accuracy within one point,
and so does storing its weights in 8 bits: two parts, each decided on its own numbers. Source: Q16 (pruning, low
rank, quantization, weight sharing, distillation; Gordon et al. 2020, Zafrir et al. 2019 Q8BERT, Sanh et al. 2019).
Paper: Q8BERT keeps BERT-base's GLUE accuracy within about 1% at 4x smaller; DistilBERT halves the layers and keeps
97% of the score; pruning 30-40% of weights costs nothing.

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): the reference has at
least the training epochs of the compressed models compared with it (``train_epochs``: the reference is the fine-
tuned model fine-tuned again for ``--epochs``, against the fine-tuning before compression plus the recovery or
distillation after it), so that compression is not credited with training the reference never had; the reference
and the chosen compressed model are above the task's trivial predictor by a t interval over seeds
(``dev_per_seed``).

Rule: two parts, each a non-inferiority test at the margin 0.01: "half the layer parameters" (prune, lowrank,
share, distill) and "8-bit weights" (torch-int8, onnx-int8). In each part even dev positions choose the family's
most accurate method, odd positions test it against the fine-tuned model (hierarchical bootstrap: seeds, then
examples): supported when the one-sided 95% lower bound of the accuracy change is above -0.01, not supported when
the one-sided 95% upper bound is below -0.01, otherwise inconclusive. The claim needs both parts: not supported when
either is not, supported when both are.

In detail: the claim names two ways to compress, and one that keeps accuracy must not carry the other: each part is
decided and shown on its own. Within a part, dev examples at even positions choose the most accurate method of that
part, odd positions test it against the fine-tuned model with a hierarchical bootstrap (seeds, then examples; t over
seeds). The per-size and per-speed picks and the Pareto front are reported beside the verdict.

From one fine-tuned model, every method aims at the same budget where it can: ``--keep`` of the transformer
layers' parameters (embeddings are left alone by every method):

- ``prune``: heads and FFN neurons removed alike (``ptmlab prune --params``) + recovery fine-tuning;
- ``lowrank``: one rank ratio for every encoder Linear so the factors hold ``--keep`` of their weights + recovery;
- ``share``: ``round(keep x layers)`` groups of consecutive layers sharing weights (ALBERT) + recovery;
- ``distill``: a ``layers:K`` student (K = ``round(keep x layers)``) trained with ``soft_ce`` from the model;
- ``torch-int8`` / ``onnx-int8``: the reference's parameters, stored in 8 bits (no training).

The reference every method is measured against (the ``none`` row) is the fine-tuned model fine-tuned again for
``--epochs`` (in ``OUTPUT/reference``): as much training as the recovered and distilled models had, so what they
lose is the cost of compression, not of the recovery the reference never had; the 8-bit methods quantize it.

Each row is the compression table's row (``ptmlab.compress.measure``: dev metric, parameters, size on disk,
batch-1/32 latency, speed-up and size ratio against the fine-tuned model), with the layer-parameter share it
landed at; the plot is the compression Pareto plot (dev against batch-32 latency). With several ``--seeds`` the
whole study is repeated per seed (its own fine-tuned model, recoveries and student, in ``OUTPUT/seed-S``), rows are
means over seeds and the verdict pools the seeds' dev examples. ``--budget full``: mpnet, seeds 0,1,2 and the whole
dev set.

The committed result (nine seeds, ``--seeds 3,4,5,6,7,8,9,10,11 --max-eval 0``, sized from seeds 0-2, which are
not pooled into it) was decided by an earlier rule that let the most accurate method of either part decide the
whole claim (8-bit alone supported it while every half-layer method lost more than a point); judged again by this
rule from its per-seed scores it is exploratory, and its intervals are over seeds on the whole dev set until a rerun
records the per-example correctness (``evidence``) this rule's held-out intervals need.

It runs in this process under either ``--executor``: each seed's methods time their latency, which runs
sharing a machine would distort.

Budgets and rough times on 2 CPU cores and one GPU: docs/studies.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import FULL_FINETUNE, SMALL_FINETUNE, command_config, parse_study_args, write_study
from ptmlab.studies.compress_common import CompressStudyArgs
from ptmlab.studies.evidence import pack_runs
from ptmlab.studies.verdict import INCONCLUSIVE, Claim, Verdict, combine, decide_noninferior

CLAIM = Claim(
    study="compression",
    claim="a fine-tuned model compressed to half its layer parameters keeps its accuracy within one point, and so "
          "does one stored in 8-bit weights",
    source="Q16; Zafrir et al. 2019 (Q8BERT), Sanh et al. 2019 (DistilBERT), Gordon et al. 2020",
    paper="Q8BERT within about 1% of BERT-base at 4x smaller; DistilBERT keeps 97% with half the layers",
    rule="two parts, each a non-inferiority test at the margin 0.01: \"half the layer parameters\" (prune, lowrank, "
         "share, distill) and \"8-bit weights\" (torch-int8, onnx-int8). In each part even dev positions choose the "
         "family's most accurate method, odd positions test it against the fine-tuned model (hierarchical "
         "bootstrap: seeds, then examples): supported when the one-sided 95% lower bound of the accuracy change is "
         "above -0.01, not supported when the one-sided 95% upper bound is below -0.01, otherwise inconclusive. The "
         "claim needs both parts: not supported when either is not, supported when both are.",
    conditions=(
        "the fine-tuned reference trained at least as long as the compressed models compared with it",
        "the reference and each part's chosen compressed model above the task's trivial predictor by a t interval "
        "over seeds",
    ),
    paper_effect=0.01,
    metric="dev accuracy change of the chosen compressed model against the fine-tuned model, per part",
    margin=0.01,
    parts=("half the layer parameters", "8-bit weights"),
)

# the row every method is measured against
REFERENCE = "fine-tuned, then again as long as the recovery (fp32)"
METHODS = ("prune", "lowrank", "share", "distill", "torch-int8", "onnx-int8")
# the claim's two parts and the methods each is decided by
FAMILIES = {"half the layer parameters": ("prune", "lowrank", "share", "distill"),
            "8-bit weights": ("torch-int8", "onnx-int8")}


@dataclass(frozen=True)
class CompressionStudyArgs(CompressStudyArgs):
    methods: list[str] = opt(list(METHODS), "methods: prune, lowrank, share, distill, torch-int8, onnx-int8")
    keep: float = opt(0.5, "share of the transformer layers' parameters each method keeps, in (0, 1)")
    tolerance: float = opt(0.01, "'no accuracy loss' for the speed verdict: within this of the fine-tuned model")
    output: str = opt("runs/study-compression", "output directory")

    def validate(self) -> None:
        super().validate()
        bad = [m for m in self.methods if m not in METHODS]
        if bad:
            raise PtmlabError(f"unknown method '{bad[0]}': choose from {', '.join(METHODS)}")
        if not self.methods:
            raise PtmlabError(f"--methods is empty: choose from {', '.join(METHODS)}")
        if not 0 < self.keep < 1:
            raise PtmlabError(f"--keep {self.keep} is out of range: give a fraction in (0, 1)")
        at_least(self, 0, "tolerance")


def layer_params(model) -> int:
    """Parameters held by the transformer layers (shared layers counted once)."""
    from ptmlab.models.structure import structure_of

    layers = structure_of(model).layer_list(model)
    return sum(p.numel() for p in {id(p): p for p in layers.parameters()}.values())


def rank_ratio_for(model, keep: float) -> float:
    """The rank ratio at which the factorised encoder Linears hold ``keep`` of their weights (layers that would
    not shrink stay whole, as ``low_rank`` does)."""
    from ptmlab.compress.magnitude import encoder_linears

    shapes = [(m.in_features, m.out_features) for m in encoder_linears(model).values()]
    full = sum(i * o for i, o in shapes)

    def held(ratio: float) -> int:
        total = 0
        for i, o in shapes:
            r = max(1, math.ceil(round(ratio * min(i, o), 6)))
            total += r * (i + o) if r * (i + o) < i * o else i * o
        return total

    lo, hi = 1e-4, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if held(mid) <= keep * full else (lo, mid)
    return round(lo, 6)


SMALL = {**SMALL_FINETUNE, "latency_repeats": 1, "importance_examples": 32}  # what --budget small runs (tests, CI)
FULL = {**FULL_FINETUNE, "model": "mpnet"}  # what --budget full runs


@STUDIES.register("compression", help="Q16: pruning, low rank, int8, sharing and distillation at one budget")
def run(argv: list[str]) -> int:
    from dataclasses import replace

    from ptmlab.compress.measure import add_ratios, pareto_figure, pareto_front
    from ptmlab.studies.common import seed_list

    a = parse_study_args("compression", CompressionStudyArgs, argv, __doc__, small=SMALL, full=FULL)
    out = Path(a.output)
    seeds = [a.seed] if Path(a.model).is_dir() else seed_list(a)  # a given fine-tuned model: one model, one seed
    per_seed, correct = [], {}
    for seed in seeds:
        # one seed: the variants sit in OUTPUT itself; several: OUTPUT/seed-S holds one seed's fine-tuned model and
        # every method run from it, so a stopped run resumes at the variant it stopped on
        sub = out if len(seeds) == 1 else out / f"seed-{seed}"
        rows, corr, info = one_seed(replace(a, seed=seed, seeds=[], output=str(sub)))
        per_seed.append(rows)
        for m, c in corr.items():
            correct.setdefault(m, []).append(c)
    rows = mean_rows(per_seed)
    add_ratios(rows, rows[0])
    front = pareto_front(rows)
    for r in rows:
        r["pareto"] = r in front
    metric = info["metric"]
    cols = ["variant", "budget", "dev", *(["dev_per_seed"] if len(seeds) > 1 else []), "params", "layer_params_kept",
            "size_mb", "latency_b32_ms", "speedup_b32", "size_ratio", "pareto"]
    fig = pareto_figure(rows, front, f"{a.task}: dev {metric} against batch-32 latency")
    v, chosen = decide(correct, a.tolerance)
    evidence = None if any(c is None for runs in correct.values() for c in runs) else {
        "correct": {m: pack_runs(runs) for m, runs in correct.items()}}
    write_study(out, f"Study: compression families at one budget ({a.task}, keep {a.keep:g})", rows, v,
                [(fig, "pareto", "dev metric against batch-32 latency (means over seeds); the red line joins "
                                 "variants nothing beats on both")],
                extra={"metric": metric, "fine_tuned": info["fine_tuned"], "keep": a.keep, "params": info["params"],
                       # every trained model had the first fine-tuning and one more (the reference's second, the
                       # recovery or the distillation); the 8-bit methods quantize the reference
                       "train_epochs": {"reference": 2 * a.epochs, "compared": 2 * a.epochs},
                       "layer_params": info["layer_params"], "summary": summary(rows, metric, a.tolerance,
                                                                                len(seeds)),
                       "chosen_methods": chosen, "tolerance": a.tolerance,
                       "selection": "per part, dev examples at even positions choose the method; odd positions "
                                    "report (seeds, then examples)", "evidence": evidence},
                columns=cols, claim=CLAIM, budget=a.budget, seeds=seeds, validity=validity)
    return 0


def one_seed(a) -> tuple[list[dict], dict, dict]:
    """Every method of ``a.methods`` from one fine-tuned model (``a.seed``), into ``a.output``: the measurement rows
    (the reference first: the fine-tuned model fine-tuned again), each method's per-example dev correctness
    (``none``: the reference's) and what the results record about the model."""
    import tempfile

    from ptmlab.compress.quantize import OrtModel, export_onnx, int8_state, onnx_int8, torch_int8
    from ptmlab.core.io import atomic_save_file
    from ptmlab.models.latency import parameter_count, size_on_disk_mb
    from ptmlab.models.structure import structure_of
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.studies.common import finetune_variant
    from ptmlab.studies.compress_common import change_run, dev_correctness, measure_run, measurer, once, start

    out, ft = start(a)
    ref_dir = out / "reference"
    # the reference gets the recovery fine-tuning too: as much training as the compressed models; it has the
    # architecture of ``ft`` (what the structural methods and the student start from), so it gives the counts
    finetune_variant(a, ref_dir, model=ft, seed=a.seed, test=False)
    reference = load_model(str(ref_dir))
    meas = measurer(a, load_tokenizer(ft))
    n_layers = structure_of(reference).num_layers(reference)
    total, in_layers = parameter_count(reference), layer_params(reference)
    k = min(n_layers - 1, max(1, round(a.keep * n_layers)))
    rows = [measure_run(meas, REFERENCE, ref_dir, method="none", budget="all")]
    correct = {"none": dev_correctness(meas, reference)}
    for method in a.methods:
        run_dir = out / method
        if method == "prune":
            from ptmlab.compress.prune import PruneConfig, run_prune

            frac = (1 - a.keep) * in_layers / total
            cfg = command_config(a, PruneConfig, model=ft, output=str(run_dir), params=frac, recover_epochs=a.epochs)
            once(a, run_dir, lambda cfg=cfg: run_prune(cfg))
            rows.append(measure_run(meas, f"pruned heads+FFN ({frac:.1%} of all params)", run_dir,
                                    budget=f"keep {a.keep:g} of layer params"))
        elif method == "lowrank":
            ratio = rank_ratio_for(reference, a.keep)
            change_run(a, "lowrank", ft, run_dir, rank_ratio=ratio)
            rows.append(measure_run(meas, f"low rank (rank ratio {ratio:.3f})", run_dir,
                                    budget=f"keep {a.keep:g} of Linear weights"))
        elif method == "share":
            change_run(a, "share", ft, run_dir, groups=k)
            rows.append(measure_run(meas, f"shared ({k} groups of {n_layers} layers)", run_dir,
                                    budget=f"{k}/{n_layers} layers"))
        elif method == "distill":
            from ptmlab.distill.config import DistillConfig
            from ptmlab.distill.pipeline import run_distill

            cfg = command_config(a, DistillConfig, teacher=ft, student=f"layers:{k}", losses=["soft_ce"],
                               output=str(run_dir))
            once(a, run_dir, lambda cfg=cfg: run_distill(cfg, command="study"))
            rows.append(measure_run(meas, f"distilled (layers:{k}, soft_ce)", run_dir,
                                    budget=f"{k}/{n_layers} layers"))
        elif method == "torch-int8":
            q = torch_int8(reference)
            with tempfile.TemporaryDirectory() as tmp:
                atomic_save_file(int8_state(q), Path(tmp) / "model.safetensors")
                size = round(size_on_disk_mb(Path(tmp) / "model.safetensors"), 2)
            rows.append(meas.row("torch int8 (dynamic)", q, size, params=total))
            correct[method] = dev_correctness(meas, q)
            rows[-1]["budget"] = "all params, 8-bit"
        elif method == "onnx-int8":
            run_dir.mkdir(parents=True, exist_ok=True)
            q8 = run_dir / "model.onnx"
            if not q8.is_file() or a.overwrite:
                fp = export_onnx(reference, run_dir / "model_fp32.onnx")
                onnx_int8(fp, q8)
                fp.unlink()
            ort = OrtModel(q8, reference.config)
            rows.append(meas.row("onnx int8 (onnxruntime)", ort, round(size_on_disk_mb(q8), 2), params=total))
            correct[method] = dev_correctness(meas, ort)
            rows[-1]["budget"] = "all params, 8-bit"
        rows[-1]["method"] = method
        if method not in correct:
            correct[method] = dev_correctness(meas, load_model(str(run_dir)))
    for r in rows:
        m = None if r["method"] in ("none", "torch-int8", "onnx-int8") else load_model(str(out / r["method"]))
        r["layer_params_kept"] = 1.0 if m is None else round(layer_params(m) / in_layers, 3)
    return rows, correct, {"metric": meas.spec.main_metric, "fine_tuned": ft, "params": total,
                           "layer_params": in_layers}


def mean_rows(per_seed: list[list[dict]]) -> list[dict]:
    """One row per variant: the first seed's row with its numbers replaced by the mean over seeds (dev, size,
    latency, layer share), and ``dev_per_seed`` when there are several seeds."""
    if len(per_seed) == 1:
        return [dict(r) for r in per_seed[0]]
    rows = []
    for variants in zip(*per_seed, strict=True):
        row = dict(variants[0])
        for key, value in row.items():
            if isinstance(value, float) and all(isinstance(v.get(key), int | float) for v in variants):
                row[key] = round(sum(v[key] for v in variants) / len(variants), 6)
        row["dev_per_seed"] = [round(v["dev"], 4) for v in variants]
        rows.append(row)
    return rows


def decide(correct: dict, tol: float = 0.01) -> tuple[Verdict, dict[str, str]]:
    """The rule of ``CLAIM`` on per-example dev correctness of the fine-tuned model (``none``) and of each method,
    one list per seed (``correct[m][k]``: seed k's; the same seed's methods start from the same fine-tuned model):
    per part of ``FAMILIES`` that ran, the method its even half chooses, tested on the odd half (non-inferiority at
    ``-tol``, one-sided 95% bounds). Returns the verdict and each part's chosen method."""
    from ptmlab.studies.common import choose_then_test

    if not any(m != "none" for m in correct):
        return Verdict(INCONCLUSIVE, "no compression method ran"), {}
    if any(c is None for runs in correct.values() for c in runs):
        return Verdict(INCONCLUSIVE, "no per-example correctness (a regression task): the bootstrap rule cannot "
                                     "run"), {}
    parts, names, chosen = [], [], {}
    for part, family in FAMILIES.items():
        methods = {m: correct[m] for m in family if m in correct}
        if not methods:
            parts.append(Verdict(INCONCLUSIVE, f"no method of this part ran ({', '.join(family)})"))
        else:
            best, _, est = choose_then_test(methods, correct["none"], "held-out accuracy change against the "
                                                                        "fine-tuned model")
            chosen[part] = best
            parts.append(decide_noninferior(est, -tol, f"{best} (chosen on the even half): held-out accuracy "
                                                        "change"))
        names.append(part)
    return combine(parts, names=names), chosen


def summary(rows: list[dict], metric: str, tol: float, n_seeds: int = 1) -> str:
    """The per-size and per-speed picks and the Pareto front, in words (beside the verdict)."""
    base, variants = rows[0], rows[1:]
    if not variants:
        return "no compression method ran."
    small = [r for r in variants if (r.get("size_ratio") or 0) >= 1.5]
    size_pick = max(small, key=lambda r: (r["dev"], r["size_ratio"])) if small else \
        max(variants, key=lambda r: (r.get("size_ratio") or 0, r["dev"]))
    keep_acc = [r for r in variants if r["dev"] >= base["dev"] - tol]
    speed_pick = max(keep_acc, key=lambda r: r["speedup_b32"]) if keep_acc else max(variants, key=lambda r: r["dev"])
    front = ", ".join(r["method"] for r in variants if r.get("pareto")) or "none"
    parts = [f"the reference has {base['dev']:.4f} {metric} at {base['size_mb']} MB",
             f"best accuracy per size: {size_pick['method']} ({size_pick['variant']}: {size_pick['dev']:.4f}, "
             f"{size_pick['size_ratio']}x smaller" + (", the most accurate of the variants at least 1.5x smaller)"
                                                       if small else "; nothing reached 1.5x smaller)"),
             f"best speed {'without losing more than ' + format(tol, 'g') if keep_acc else 'at any accuracy'}: "
             f"{speed_pick['method']} ({speed_pick['variant']}: {speed_pick['speedup_b32']}x at batch 32, "
             f"{speed_pick['dev']:.4f})",
             f"compressed methods on the latency Pareto front: {front}"]
    seeds = "One seed" if n_seeds == 1 else f"Means over {n_seeds} seeds"
    return "; ".join(parts) + f". {seeds} and one machine's CPU timing; dev differences of a point are noise."


RESTATES_RECORDED_INTERVALS = True  # the rule's parts were never computed by the legacy run: restated per seed


def recomputed_from(record: dict) -> tuple[str, str]:
    """How ``restate`` recomputed ``record``'s verdict (``rederive``'s ``recompute`` block)."""
    from ptmlab.studies.evidence import recomputed_or_partly

    return recomputed_or_partly(
        record, "every seed's per-example correctness of the reference and of each method",
        "per part, a paired t over the seeds' whole-dev scores (rows' dev_per_seed), the choosing half included; the "
        "rule's held-out intervals need the per-example records a rerun keeps")


def chosen_methods(record: dict) -> dict[str, str]:
    """Each part's chosen method as the record names it (``chosen_methods``; a record of the one-choice rule has
    ``chosen_method``, the method of whichever part it belongs to)."""
    got = record.get("chosen_methods")
    if isinstance(got, dict):
        return {str(k): str(v) for k, v in got.items() if v}
    one = record.get("chosen_method")
    chosen = {part: one for part, family in FAMILIES.items() if one in family} if one else {}
    means = {str(r.get("method")): sum(r["dev_per_seed"]) / len(r["dev_per_seed"]) for r in record.get("rows") or []
             if isinstance(r.get("dev_per_seed"), list) and r["dev_per_seed"]}
    for part, family in FAMILIES.items():  # a part the record did not choose for: its best whole-dev method
        ran = [m for m in family if m in means]
        if part not in chosen and ran:
            chosen[part] = max(ran, key=means.get)
    return chosen


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (``train_epochs``; rows' ``dev_per_seed``): the reference
    and every part's chosen method above the trivial predictor."""
    from ptmlab.studies.common import above_trivial, reference_budget, task_of

    rows = record.get("rows") or []
    chosen = set(chosen_methods(record).values())
    systems = {str(r.get("method")): r.get("dev_per_seed") or [] for r in rows
               if r.get("method") == "none" or r.get("method") in chosen}
    return reference_budget(record, "fine-tuned reference") + above_trivial(
        record, task_of(record), str(record.get("metric") or "accuracy"), systems or {"none": []})


def restate(record: dict, name: str = "compression") -> Verdict | None:
    """The rule of ``CLAIM`` from the record: from its per-example records (``evidence``: each seed's correctness
    of the reference and of every method) when it carries them; else, per part, the method with the best mean
    whole-dev score against the fine-tuned model, a paired t interval over the seeds' whole-dev scores (the choosing
    half included: an exploratory restatement, not the held-out test)."""
    import dataclasses

    from ptmlab.studies.evidence import evidence_of, unpack_runs
    from ptmlab.studies.verdict import paired_seeds

    tol = float(record.get("tolerance") or 0.01)  # the option's default when the record does not say
    ev = evidence_of(record)
    if isinstance(ev.get("correct"), dict) and "none" in ev["correct"]:
        return decide({m: unpack_runs(v) for m, v in ev["correct"].items()}, tol)[0]
    ps = {str(r.get("method")): r.get("dev_per_seed") for r in record.get("rows") or []
          if isinstance(r.get("dev_per_seed"), list)}
    if "none" not in ps or len(ps) < 2:
        return None
    parts, names = [], []
    for part, family in FAMILIES.items():
        ran = [m for m in family if m in ps]
        names.append(part)
        if not ran:
            parts.append(Verdict(INCONCLUSIVE, f"no method of this part ran ({', '.join(family)})"))
            continue
        best = max(ran, key=lambda m: sum(ps[m]) / len(ps[m]))  # ties: the first method
        est = paired_seeds(ps[best], ps["none"], "accuracy change against the fine-tuned model")
        est = dataclasses.replace(est, method=est.method + ", whole dev, choosing half included")
        parts.append(decide_noninferior(est, -tol, f"{best} (best on the whole dev set): accuracy change"))
    return combine(parts, names=names)
