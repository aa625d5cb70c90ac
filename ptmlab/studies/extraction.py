"""Study ``extraction`` (Q17, "Thieves on Sesame Street"): how much of a served classifier do RANDOM and WIKI
queries copy, against the query budget, and how far does each defence push that down, at what cost to legitimate
users?

The victim is served in-process on 127.0.0.1; every attack goes through the real API (keys, policies, audit).
Defences: label-only output, rounding, a daily budget (the attack stops at it), the query detector over the audit
log, and watermarking (verified on the copy). Adaptive attackers (``ptmlab/studies/extraction_adaptive.py``): a
vote over query variants against the watermark (``vote``), function-word padding against the detector acting with
``block`` (``padded``), and the defences' false alarms on real SST-2 / tweets / review / German text
(``false-alarms``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import StudyArgs, command_config, finetune_variant, parse_study_args, write_study


@dataclass(frozen=True)
class ExtractionStudyArgs(StudyArgs):
    victim: str = opt("", "run directory of the fine-tuned victim (default: fine-tune --victim-model on the task "
                          "first, into OUTPUT/victim)")
    victim_model: str = opt("minilm", "model fine-tuned as the victim when --victim is not given")
    task: str = opt("", "the victim's task (default: sst2 when GLUE data is present, else tweets)")
    train_file: str | None = opt(None, "training data of a --train-file task (for query lengths)")
    dev_file: str | None = opt(None, "dev data of a --train-file task")
    model: str = opt("minilm", "the copy's model")
    strategies: list[str] = opt(["random", "wiki"], "query strategies")
    budgets: list[str] = opt(["250", "500", "1000"], "query budgets (the curve)")
    defences: list[str] = opt(["label", "rounded:1", "budget", "watermark", "detector", "vote", "padded",
                               "false-alarms"],
                              "defences measured at the largest budget with RANDOM queries, then the adaptive attacks "
                              "(vote: variant voting vs the watermark; padded: function-word padding vs the detector "
                              "with --detector-action block) and the detector's false alarms on real text")
    false_alarm_texts: int = opt(300, "real texts per source for the false-alarm measurement")
    corpus: str | None = opt(None, "text for WIKI queries (default WikiText-2 in shared data)")
    max_eval: int = opt(500, "dev examples for agreement")
    max_length: int = opt(64, "max tokens")
    epochs: float = opt(3.0, "epochs of copy training")
    batch_size: int = opt(32, "batch size")
    lr: float = opt(1e-4, "copy learning rate")
    seed: int = opt(0, "seed")
    output: str = opt("runs/study-extraction", "output directory")


SMALL = dict(model="tiny", victim_model="tiny", max_train=64, max_eval=32, max_length=32, epochs=1.0, batch_size=16,
             budgets=["40", "80"], strategies=["random"], defences=["label", "vote", "padded", "false-alarms"],
             false_alarm_texts=30)


def _extract_cfg(a: ExtractionStudyArgs, out: Path, strategy: str, budget: int, **kw):
    from ptmlab.extraction.extract import ExtractConfig

    return command_config(a, ExtractConfig, query_strategy=strategy, budget=budget, max_train=None, output=str(out),
                          victim_run=a.victim, victim="in-process", key="study", logging_steps=50, **kw)


def _attack(a, store, out: Path, strategy: str, budget: int, serve_kw: dict | None = None, key_kw: dict | None = None):
    from ptmlab.extraction.client import VictimClient
    from ptmlab.extraction.extract import run_extract
    from ptmlab.serve.app import create_app
    from ptmlab.serve.config import ServeConfig
    from ptmlab.serve.server import serve_in_thread

    key = store.create_key(out.name, rate=10_000, burst=10_000, **(key_kw or {}))
    app = create_app(a.victim, ServeConfig(**(serve_kw or {})), store)
    with serve_in_thread(app) as url:
        summary = run_extract(_extract_cfg(a, out, strategy, budget), VictimClient(url, key, max_wait=5))
    return summary, key


@STUDIES.register("extraction", help="Q17: can a served model be copied with random queries? and which defences help")
def run(argv: list[str]) -> int:
    from ptmlab.serve import flag_keys, open_store, verify_watermark
    from ptmlab.serve.defences import read_queries
    from ptmlab.studies import extraction_adaptive as adaptive

    a = parse_study_args("extraction", ExtractionStudyArgs, argv, __doc__, small=SMALL)
    out = Path(a.output)
    if not a.victim:
        finetune_variant(a, out / "victim", model=a.victim_model)
        a = dataclasses.replace(a, victim=str(out / "victim"))
    budgets = sorted(int(b) for b in a.budgets)
    store = open_store(str(out / "state"))
    rows = []
    for strategy in a.strategies:
        for b in budgets:
            s, _ = _attack(a, store, out / f"{strategy}-{b}", strategy, b)
            rows.append(_row(s, strategy, b, "none", "-"))
    top = budgets[-1]
    for d in a.defences:
        name = f"random-{top}-{d.replace(':', '')}"
        if d in ("label", "rounded:1", "rounded:2"):
            s, _ = _attack(a, store, out / name, "random", top, {"output_policy": d})
            cost = "no probabilities" if d == "label" else f"probabilities off by up to {0.5 * 10 ** -int(d[-1]):g}"
            rows.append(_row(s, "random", top, d, cost))
        elif d == "budget":
            cap = max(1, top // 4)
            s, _ = _attack(a, store, out / name, "random", cap, {}, {"daily_budget": cap})
            rows.append(_row(s, "random", cap, f"daily budget {cap}", f"legitimate users limited to {cap}/day"))
        elif d == "watermark":
            s, _ = _attack(a, store, out / name, "random", top, {"watermark_rate": 0.05})
            texts, pairs = read_queries(out / name / "queries.json")
            ver = verify_watermark(str(out / name), store, texts, pairs, store.resolve_key(name).id)
            rows.append(_row(s, "random", top, "watermark 5%", f"5% wrong answers; copy caught: "
                                                               f"{ver['watermarked']} (p={ver['p_value']:.1e})"))
        elif d == "detector":
            s, _ = _attack(a, store, out / name, "random", top, {"detector": True})
            flags = {r["name"]: r for r in flag_keys(store)}
            rows.append(_row(s, "random", top, "query detector",
                             f"attacker flagged: {flags[name]['flagged']} (score {flags[name]['mean_score']:.2f})"))
        elif d == "vote":
            v = adaptive.vote_attack(a.victim, store, max(100, top // 3), a.seed)
            rows.append(_info_row("vote x3 variants", v["queries"], "watermark 10%",
                                  f"{v['survived']}/{v['marked']} marks survive the attacker's vote "
                                  f"({v['survival']:.0%})"))
        elif d == "padded":
            try:
                s, _ = _attack(a, store, out / name, "padded", top, {"detector": True, "detector_action": "block"})
                rows.append(_row(s, "padded", top, "detector (block)", "attack not blocked"))
            except PtmlabError as e:
                kid = store.resolve_key(name).id
                answered = store.usage(kid).get(kid, {}).get("queries", 0)
                blocked = "403" in str(e)
                rows.append(_info_row("padded", top, "detector (block)",
                                      f"{'blocked' if blocked else 'stopped'} after {answered} answered queries; "
                                      f"no copy trained"))
        elif d == "false-alarms":
            for fa in adaptive.false_alarms(a.victim, store, a.false_alarm_texts, a.seed):
                rows.append(_info_row(f"legitimate {fa['source']}", fa["texts"], "query detector",
                                      f"false alarms: {fa['over_threshold']:.1%} of {fa['scored']} scored texts over "
                                      f"0.5 (mean {fa['mean_score']:.2f}); key flagged: {fa['flagged']}"))
        else:
            raise PtmlabError(f"unknown defence '{d}': choose from label, rounded:1, rounded:2, budget, watermark, "
                              f"detector, vote, padded, false-alarms")
    verdict = _verdict(rows, top)
    write_study(out, f"Study: model extraction ({a.model} copy of {a.victim} on {a.task})", rows, verdict,
                [(_curve_plot(rows), "agreement_curve", "agreement with the victim against the query budget")])
    return 0


def _row(s: dict, strategy: str, budget: int, defence: str, cost: str) -> dict:
    metric = s["main_metric"]
    return {"strategy": strategy, "budget": budget, "defence": defence, "agreement": s["agreement"],
            f"copy_{metric}": s["metrics"].get(metric), f"victim_{metric}": s["victim_metrics"].get(metric),
            "soft_labels": s["soft_labels"], "cost_to_users": cost}


def _info_row(strategy: str, budget: int, defence: str, cost: str) -> dict:
    """A row without a trained copy (adaptive attacks on the defences, false alarms)."""
    return {"strategy": strategy, "budget": budget, "defence": defence, "agreement": None, "soft_labels": None,
            "cost_to_users": cost}


def _verdict(rows: list[dict], top: int) -> str:
    base = [r for r in rows if r["defence"] == "none" and r["strategy"] == "random" and r["budget"] == top]
    if not base:
        return "no undefended RANDOM attack at the largest budget was run"
    agree = base[0]["agreement"]
    claim = "holds" if agree >= 0.9 else "does not hold at this budget"
    parts = [f"RANDOM queries ({top}) copy the victim to {agree:.1%} agreement: the >90% claim {claim}"]
    for r in rows:
        if r["defence"] != "none" and r["agreement"] is not None:
            parts.append(f"{r['defence']}: {r['agreement']:.1%} ({r['agreement'] - agree:+.1%})")
        elif r["defence"] != "none":
            parts.append(f"{r['strategy']} vs {r['defence']}: {r['cost_to_users']}")
    return "; ".join(parts) + "."


def _curve_plot(rows: list[dict]):
    from ptmlab.report.html import new_figure

    fig, ax = new_figure()
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        pts = [(r["budget"], r["agreement"]) for r in rows if r["strategy"] == strategy and r["defence"] == "none"]
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", label=strategy)
    ax.set_xscale("log")
    ax.set_xlabel("queries")
    ax.set_ylabel("agreement with victim")
    ax.legend()
    return fig

