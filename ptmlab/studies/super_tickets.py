"""Study ``super-tickets`` (Liang et al., ACL 2021, "Super Tickets in Pre-Trained Language Models").

Heads and FFN neurons are scored on the fine-tuned model (``ptmlab.compress.importance``); for each ratio of the
grid the same fraction of heads and of FFN neurons is removed from the *pretrained* model (the survivors keep their
pretrained values: the base zoo model is loaded and the fine-tuned model's keep-masks applied with the pruning
surgery), and every ticket is fine-tuned with the same budget. Ratio 0 is the unpruned pretrained model under that
budget. The claim: mildly pruned tickets beat the unpruned model, and past a phase transition they fall below it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptmlab.core.config import opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import SMALL_FINETUNE, parse_study_args, write_study
from ptmlab.studies.compress_common import CompressStudyArgs


@dataclass(frozen=True)
class SuperTicketsArgs(CompressStudyArgs):
    ratios: list[str] = opt(["0", "0.1", "0.2", "0.3", "0.4", "0.5"], "fractions of heads and FFN neurons removed "
                                                                       "together, each in [0, 1)")
    base: str = opt("", "the pretrained model the tickets rewind to (default: the model the fine-tuned run started "
                        "from)")
    tolerance: float = opt(0.0, "a ticket must beat the unpruned model by more than this to count")
    output: str = opt("runs/study-super-tickets", "output directory")

    def validate(self) -> None:
        from ptmlab.studies.compress_common import parse_ratios

        super().validate()
        parse_ratios(self.ratios)


def base_model(a: SuperTicketsArgs, ft: str) -> str:
    """``--base``, else the model the fine-tuned run was trained from, else the study's ``--model``."""
    from ptmlab.core.rundir import RunDir

    if a.base:
        return a.base
    try:
        cfg = RunDir(ft).read_config()
    except Exception:
        cfg = {}
    return str(cfg.get("model") or a.model)


def build_ticket(base: str, keep_heads: dict, keep_ffn: dict, spec, labels, seed: int):
    """The pretrained ``base`` with a task head (seeded) and everything but the kept heads / neurons removed."""
    from ptmlab.compress.surgery import prune_structure
    from ptmlab.core.seed import set_seed
    from ptmlab.models.zoo import load_model

    set_seed(seed)
    model = load_model(base, num_labels=spec.num_labels, regression=spec.kind == "regression", label_names=labels)
    if keep_heads or keep_ffn:
        prune_structure(model, heads=keep_heads, ffn=keep_ffn)
    return model


# what --budget small runs (tests, CI)
SMALL = {
    **SMALL_FINETUNE,
    "latency_repeats": 1,
    "importance_examples": 32,
    "ratios": ["0", "0.3"],
}


@STUDIES.register("super-tickets", help="Liang et al.: rewound pruned tickets vs the unpruned model across ratios")
def run(argv: list[str]) -> int:
    from ptmlab.compress.importance import compute_importance
    from ptmlab.compress.surgery import heads_per_layer, mask_to_keep
    from ptmlab.compress.targets import ffn_mask, head_mask
    from ptmlab.data.encode import encode_split
    from ptmlab.data.loaders import subset
    from ptmlab.data.taskdata import label_names, load_task_data
    from ptmlab.models.latency import parameter_count
    from ptmlab.models.loader import save_model
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.studies.common import finetune_variant
    from ptmlab.studies.compress_common import parse_ratios, start

    a = parse_study_args("super-tickets", SuperTicketsArgs, argv, __doc__, small=SMALL)
    ratios = parse_ratios(a.ratios)
    if 0.0 not in ratios:
        ratios = [0.0, *ratios]  # the unpruned model under the same budget is the reference line
    out, ft = start(a)
    base = base_model(a, ft)
    data = load_task_data(a)
    spec, labels = data.spec, label_names(data)
    tokenizer = load_tokenizer(ft)
    if load_tokenizer(base).get_vocab() != tokenizer.get_vocab():
        raise PtmlabError(f"base model '{base}' has a different vocabulary from the fine-tuned model: pass the "
                          f"pretrained model it was fine-tuned from with --base")
    scored = load_model(ft)
    config_heads = scored.config.num_attention_heads
    if getattr(scored.config, "ptmlab_modifications", None) or set(heads_per_layer(scored)) != {config_heads}:
        raise PtmlabError(f"'{ft}' is already modified (pruned, ...): super tickets score an unpruned fine-tuned "
                          f"model")
    enc = encode_split(tokenizer, subset(data.splits["train"], a.importance_examples, a.seed), a.max_length)
    imp = compute_importance(a.importance, scored, enc, tokenizer.pad_token_id or 0)
    metric = spec.main_metric
    rows = []
    for r in ratios:
        name = f"ticket-{r:g}"
        if r == 0:
            s = finetune_variant(a, out / name, model=base, test=False)
        else:
            keep_h, keep_f = mask_to_keep(head_mask(imp, r)), mask_to_keep(ffn_mask(imp, r))
            init = out / "tickets-init" / name
            if not (init / "config.json").is_file() or a.overwrite:
                save_model(build_ticket(base, keep_h, keep_f, spec, labels, a.seed), tokenizer, init)
            s = finetune_variant(a, out / name, model=str(init), test=False)
        rows.append({"ratio": r, metric: s["metrics"][metric], "params": s["params"],
                     "heads": sum(heads_per_layer(load_model(str(out / name))))})
    ft_metric = _fine_tuned_metric(ft, metric)
    unpruned = rows[0][metric]
    for row in rows:
        row["vs_unpruned"] = round(row[metric] - unpruned, 4)
    best = max(rows[1:], key=lambda x: (x[metric], x["ratio"])) if len(rows) > 1 else None
    transition = phase_transition(rows, metric, unpruned)
    fig = _plot(rows, metric, unpruned, best, transition, a)
    write_study(out, f"Study: super tickets ({base} on {a.task})", rows,
                verdict(rows, metric, best, transition, a.tolerance),
                [(fig, "super_tickets", f"dev {metric} of each ticket against the ratio of heads and FFN removed")],
                extra={"metric": metric, "base": base, "fine_tuned": ft, "fine_tuned_dev": ft_metric,
                       "unpruned_params": parameter_count(scored), "best_ticket": best,
                       "phase_transition": transition, "importance": a.importance})
    return 0


def _fine_tuned_metric(ft: str, metric: str):
    from ptmlab.core.rundir import RunDir

    try:
        return RunDir(ft).summary()["metrics"].get(metric)
    except Exception:
        return None


def phase_transition(rows: list[dict], metric: str, unpruned: float) -> float | None:
    """The first ratio from which every ticket is below the unpruned model (None: never, in this grid)."""
    below = None
    for row in rows[1:]:
        if row[metric] < unpruned:
            below = row["ratio"] if below is None else below
        else:
            below = None
    return below


def _plot(rows, metric, unpruned, best, transition, a):
    from ptmlab.report.html import new_figure

    fig, ax = new_figure()
    xs = [r["ratio"] for r in rows]
    ax.plot(xs, [r[metric] for r in rows], "o-", label="ticket (rewound to pretrained, fine-tuned)")
    ax.axhline(unpruned, color="gray", ls="--", lw=1, label=f"unpruned model ({unpruned:.4f})")
    if best is not None:
        ax.plot([best["ratio"]], [best[metric]], "*", color="tab:red", ms=14, label=f"best ticket ({best['ratio']:g})")
    if transition is not None:
        ax.axvline(transition, color="tab:orange", ls=":", lw=1.5, label=f"phase transition ({transition:g})")
    ax.set_xlabel("fraction of heads and FFN neurons removed")
    ax.set_ylabel(f"dev {metric}")
    ax.set_title(f"super tickets: {a.max_train} examples, {a.epochs:g} epoch(s) each")
    ax.legend(fontsize=7)
    return fig


def verdict(rows: list[dict], metric: str, best: dict | None, transition: float | None, tol: float) -> str:
    unpruned = rows[0][metric]
    if best is None:
        return "the study needs at least one ratio above 0 to compare tickets with the unpruned model."
    margin = best[metric] - unpruned
    wins = margin > tol
    trans = (f"from ratio {transition:g} on every ticket is below the unpruned model (phase transition)"
             if transition is not None else "no ticket in the grid falls below the unpruned model for good, so no "
                                            "phase transition shows")
    after_best = transition is not None and transition > best["ratio"]
    state = "supported" if wins and after_best else "partly supported" if wins else "not supported"
    return (f"the best ticket removes {best['ratio']:.0%} of heads and FFN neurons ({best['params']:,} parameters) "
            f"and reaches {best[metric]:.4f} {metric}, {margin:+.4f} against the unpruned model under the same "
            f"budget ({unpruned:.4f}); {trans}. The claim that mildly pruned super tickets beat the full model "
            f"before a phase transition is {state} here (one seed; differences of a point are within dev-set noise).")
