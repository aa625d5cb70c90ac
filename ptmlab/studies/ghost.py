"""Study ``ghost`` (GhostBERT, Huang et al. ACL 2021): do cheap ghost features recover what pruning removed?

From one fine-tuned model, heads and FFN neurons are pruned (``--heads``/``--ffn``, default half of each; no
recovery yet), then three variants get the same fine-tuning budget: (a) the pruned model, (b) the pruned model with
ghost modules (``ptmlab ghost``), and (c) a model pruned less (``--params`` target) so that it has as many
parameters as (b). GhostBERT's claim holds here when (b) beats both (a) and (c).
"""

from __future__ import annotations

from dataclasses import dataclass

from ptmlab.core.config import opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import SMALL_FINETUNE, parse_study_args, write_study
from ptmlab.studies.compress_common import CompressStudyArgs


@dataclass(frozen=True)
class GhostStudyArgs(CompressStudyArgs):
    heads: float = opt(0.5, "fraction of attention heads pruned, in [0, 1)")
    ffn: float = opt(0.5, "fraction of FFN neurons pruned in every layer, in [0, 1)")
    ghost_kernel: int = opt(3, "kernel size of the ghost modules' depthwise convolution (odd)")
    tolerance: float = opt(0.005, "a dev difference within this counts as a tie")
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


@STUDIES.register("ghost", help="GhostBERT: pruned vs pruned + ghost modules vs pruned to equal parameters")
def run(argv: list[str]) -> int:
    from ptmlab.models.latency import parameter_count
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.studies.common import finetune_variant
    from ptmlab.studies.compress_common import change_run, measure_run, measurer, prune_run, start

    a = parse_study_args("ghost", GhostStudyArgs, argv, __doc__, small=SMALL)
    out, ft = start(a)
    meas = measurer(a, load_tokenizer(ft))
    params_ft = parameter_count(load_model(ft))

    raw = out / "pruned-raw"
    prune_run(a, ft, raw, heads=a.heads, ffn=a.ffn)
    finetune_variant(a, out / "pruned", model=str(raw), test=False)
    g = change_run(a, "ghost", str(raw), out / "ghost", ghost_kernel=a.ghost_kernel)
    target = g["params"]
    if target >= params_ft:
        raise PtmlabError(f"the ghost model has {target:,} parameters, no fewer than the unpruned {params_ft:,}: "
                          f"prune more (--heads/--ffn) or use a smaller --ghost-kernel")
    equal_raw = out / "equal-raw"
    frac = equal_params_fraction(load_model(ft), target)
    prune_run(a, ft, equal_raw, heads=frac, ffn=frac)
    finetune_variant(a, out / "equal", model=str(equal_raw), test=False)

    pruned_label = f"heads -{a.heads:.0%}, FFN -{a.ffn:.0%}"
    rows = [measure_run(meas, "fine-tuned (unpruned)", ft),
            measure_run(meas, f"pruned ({pruned_label}), no fine-tuning", raw),
            measure_run(meas, "(a) pruned + fine-tuning", out / "pruned"),
            measure_run(meas, "(b) pruned + ghost + fine-tuning", out / "ghost", ghost_params=g["ghost_params"]),
            measure_run(meas, "(c) pruned to (b)'s params + fine-tuning", out / "equal")]
    base = rows[0]
    for r in rows:
        r["speedup_b32"] = round(base["latency_b32_ms"] / r["latency_b32_ms"], 2)
        r.setdefault("ghost_params", 0)
    rows[-1]["params_vs_b"] = round(rows[-1]["params"] / rows[3]["params"] - 1, 4)
    cols = ["variant", "dev", "params", "ghost_params", "size_mb", "latency_b32_ms", "speedup_b32"]
    fig = _plot(rows, meas.spec.main_metric)
    write_study(out, f"Study: GhostBERT ghost modules ({a.task}, kernel {a.ghost_kernel})", rows,
                verdict(rows, meas.spec.main_metric, a.tolerance), [(fig, "ghost", "dev metric per variant")],
                extra={"metric": meas.spec.main_metric, "fine_tuned": ft, "heads": a.heads, "ffn": a.ffn,
                       "ghost_kernel": a.ghost_kernel, "equal_params_fraction": frac},
                columns=cols)
    return 0


def _plot(rows: list[dict], metric: str):
    from ptmlab.report.plots import bar_plot

    names = ["unpruned", "pruned, no tuning", "(a) pruned", "(b) + ghost", "(c) equal params"]
    return bar_plot(names, [r["dev"] for r in rows], f"dev {metric}", "GhostBERT study")


def verdict(rows: list[dict], metric: str, tol: float) -> str:
    ft, _, a, b, c = rows
    lost = ft["dev"] - a["dev"]
    gain_a, gain_c = b["dev"] - a["dev"], b["dev"] - c["dev"]
    recovered = (f"{gain_a / lost:.0%} of the {lost:.4f} that pruning + fine-tuning lost" if lost > tol
                 else "pruning + fine-tuning lost nothing to recover")
    beats_a, beats_c = gain_a > tol, gain_c > tol
    state = ("supported" if beats_a and beats_c else "partly supported" if beats_a or beats_c else "not supported")
    return (f"ghost modules ({b['ghost_params']:,} parameters, {b['params']:,} in all) give {b['dev']:.4f} {metric} "
            f"against {a['dev']:.4f} for the same pruned model fine-tuned alone ({gain_a:+.4f}; {recovered}) and "
            f"{c['dev']:.4f} for a model pruned less to the same size ({c['params']:,} parameters; {gain_c:+.4f}); "
            f"the unpruned model has {ft['dev']:.4f}. Batch-32 speed-up over the unpruned model: ghost "
            f"{b['speedup_b32']}x, pruned {a['speedup_b32']}x, equal-size {c['speedup_b32']}x. GhostBERT's claim "
            f"that cheap ghost features recover accuracy and beat an equally large pruned model is {state} here "
            f"(ties within {tol:g}; one seed).")
