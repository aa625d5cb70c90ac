"""Study ``extraction`` (Q17, "Thieves on Sesame Street"): how much of a served classifier do RANDOM and WIKI
queries copy, against the query budget, and how far does each defence push that down, at what cost to legitimate
users?

Claim (Krishna et al., "Thieves on Sesame Street! Model Extraction of BERT-based APIs", ICLR 2020): an attacker
with no real data copies a served fine-tuned BERT classifier with RANDOM word-sequence queries, the copy agreeing
with the victim on over 90% of the dev set (SST-2, BERT-large victim 93.1%: RANDOM queries as many as the training
set give a copy of about 90% accuracy, Table 2).

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): the victim is above the
task's trivial predictor (majority-class accuracy) by more than two standard errors of a proportion over the dev
examples (one victim, no seeds to repeat): copying a victim that has learnt nothing shows nothing.

Verdict rule (written before the runs): the copy trained on the largest --budgets of RANDOM queries, without
defences, is compared with the victim on every dev example (1 when their labels agree, else 0), and with
--agreement-on dev,test on every sentence of the task's (unlabelled) test split as well; the mean agreement gets a
95% bootstrap interval over the examples (GLUE's test split has no labels, but agreement needs none, and neither
model saw those sentences). Supported when the interval lies above 0.90; not supported when it lies below 0.90;
inconclusive when it includes 0.90, or when the victim gives one label to 90% or more of the scored examples (a
constant copy would agree as much). The claim is made for a budget as large as the training set: a
smaller --budgets can only answer for that budget, and the results say which. The defences and adaptive attacks are
measured beside it (agreement and cost to legitimate users), not part of the rule.

Confirmatory design, fixed before its run: the full-budget run agreed on 0.9117 [0.8922, 0.9300] of the 872 dev
sentences, undecided against 0.90 because 872 examples give about ±0.019. The confirmatory run scores the 872 dev
and the 1,821 GLUE test sentences of SST-2 (2,693 in all, about ±0.011 at that agreement) with otherwise the same
settings: ``ptmlab study extraction --budget full --agreement-on dev,test --output D``.

Seeds: with ``--seeds 0,1,2`` the victim, the RANDOM queries and the copy at the largest budget are repeated for
every seed (the budget curve and the defences are measured for the first), and the agreement's interval is a
bootstrap over seeds, then examples, so that how much one victim and one copy happened to agree is in it. Every run
keeps each seed's per-example agreement (``evidence``), from which ``restate`` recomputes the verdict.

Budgets: ``--budget small`` trains tiny copies of a tiny random victim on 40 and 80 queries (it checks the
machinery; such a victim often answers one label, and the rule then says inconclusive); ``--budget full`` uses the
whole dev set and budgets up to 20,000 queries (``--victim-model mpnet --model mpnet`` gives the paper's 12-layer
size; not tried here, hours on a CPU).

The victim is served in-process on 127.0.0.1; every attack goes through the real API (keys, policies, audit).
Defences: label-only output, rounding, a daily budget (the attack stops at it), the query detector over the audit
log, and watermarking (verified on the copy). Adaptive attackers (``ptmlab/studies/extraction_adaptive.py``): a vote
over query variants against the watermark (``vote``), function-word padding against the detector acting with
``block`` (``padded``), and the defences' false alarms on real SST-2 / tweets / review / German text
(``false-alarms``).

It runs in this process under either ``--executor``: every attack goes through the one serving store (keys,
usage, audit log) that the defences read and reset.

Rough times per budget on 2 CPU cores and one GPU: docs/studies.md.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import StudyArgs, command_config, finetune_variant, parse_study_args, write_study
from ptmlab.studies.evidence import evidence_of, pack_runs, unpack_runs
from ptmlab.studies.verdict import INCONCLUSIVE, Claim, Verdict, bootstrap_mean, decide_above, hierarchical_bootstrap

CLAIM = Claim(
    study="extraction",
    claim="RANDOM word-sequence queries copy a served fine-tuned classifier: the copy agrees with the victim on over "
          "90% of the dev set.",
    source="Q17; Krishna et al., Thieves on Sesame Street, ICLR 2020",
    paper="SST-2, BERT-large victim 93.1%: RANDOM queries (as many as the training set) give a copy of about 90% "
          "accuracy (Table 2)",
    rule="the copy trained on the largest --budgets of RANDOM queries, without defences, is compared with the victim "
         "on every dev example (1 when their labels agree, else 0), and with --agreement-on dev,test on every "
         "sentence of the task's (unlabelled) test split as well; the mean agreement gets a 95% bootstrap interval "
         "over the examples (GLUE's test split has no labels, but agreement needs none, and neither model saw those "
         "sentences). Supported when the interval lies above 0.90; not supported when it lies below 0.90; "
         "inconclusive when it includes 0.90, or when the victim gives one label to 90% or more of the scored "
         "examples (a constant copy would agree as much). The claim is made for a budget as large as the training "
         "set: a smaller --budgets can only answer for that budget, and the results say which. The defences and "
         "adaptive attacks are measured beside it (agreement and cost to legitimate users), not part of the rule.",
    conditions=(
        "the victim above the task's majority-class accuracy by more than two standard errors over the dev "
        "examples",
    ),
)
THRESHOLD = 0.90


@dataclass(frozen=True)
class ExtractionStudyArgs(StudyArgs):
    victim: str = opt("", "run directory of the fine-tuned victim (default: fine-tune --victim-model on the task "
                          "first, into OUTPUT/victim)")
    victim_model: str = opt("minilm", "model fine-tuned as the victim when --victim is not given")
    task: str = opt("", "the victim's task (default: sst2 when GLUE data is present, else tweets)")
    train_file: str | None = opt(None, "training data of a --train-file task (for query lengths)")
    dev_file: str | None = opt(None, "dev data of a --train-file task")
    agreement_on: list[str] = opt(["dev"], "splits on which the rule compares the copy with the victim: dev, and "
                                           "test (the task's test split, unlabelled in GLUE: agreement needs no "
                                           "labels)")
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
    max_eval: int = opt(500, "dev examples for agreement (0: all)")
    max_length: int = opt(64, "max tokens")
    epochs: float = opt(3.0, "epochs of copy training")
    batch_size: int = opt(32, "batch size")
    lr: float = opt(1e-4, "copy learning rate")
    seed: int = opt(0, "seed")
    output: str = opt("runs/study-extraction", "output directory")

    def validate(self) -> None:
        super().validate()
        at_least(self, 0, "false_alarm_texts")


SMALL = dict(model="tiny", victim_model="tiny", max_train=64, max_eval=32, max_length=32, epochs=1.0, batch_size=16,
             budgets=["40", "80"], strategies=["random"], defences=["label", "vote", "padded", "false-alarms"],
             false_alarm_texts=30)
FULL = dict(max_eval=0, budgets=["1000", "5000", "20000"])


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


RERUN = ("the run kept no per-example agreement; the current code keeps it (evidence) and, with --seeds 0,1,2, "
         "repeats the victim and the copy over seeds")


@STUDIES.register("extraction", help="Q17: can a served model be copied with random queries? and which defences help")
def run(argv: list[str]) -> int:
    from ptmlab.serve import flag_keys, open_store, verify_watermark
    from ptmlab.serve.defences import read_queries
    from ptmlab.studies import extraction_adaptive as adaptive
    from ptmlab.studies.common import seed_dir, seed_list

    a = parse_study_args("extraction", ExtractionStudyArgs, argv, __doc__, small=SMALL, full=FULL)
    if not set(a.agreement_on) <= {"dev", "test"} or "dev" not in a.agreement_on:
        raise PtmlabError(f"--agreement-on {','.join(a.agreement_on)}: give dev or dev,test")
    test = load_test_split(a) if "test" in a.agreement_on else None  # before any training: a missing split fails fast
    out = Path(a.output)
    seeds = seed_list(a)
    given_victim = a.victim
    a = dataclasses.replace(a, seed=seeds[0])
    if not a.victim:
        finetune_variant(a, seed_dir(out, "victim", seeds[0], seeds), model=a.victim_model, seed=seeds[0])
        a = dataclasses.replace(a, victim=str(seed_dir(out, "victim", seeds[0], seeds)))
    budgets = sorted(int(b) for b in a.budgets)
    # every attack below runs again on a rerun, so the serving state (keys, usage, audit) starts empty each time:
    # a kept store would hold a second key of the same name
    shutil.rmtree(out / "state", ignore_errors=True)
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
    measured, counts, per_seed = None, {}, []
    if "random" in a.strategies:
        copies = {seeds[0]: (a, out / f"random-{top}")}
        for seed in seeds[1:]:  # the rule's copy again for every other seed: its own victim, queries and copy
            b = dataclasses.replace(a, seed=seed, victim=given_victim or str(seed_dir(out, "victim", seed, seeds)))
            if not given_victim:
                finetune_variant(b, Path(b.victim), model=b.victim_model, seed=seed)
            s, _ = _attack(b, store, out / f"random-{top}-seed{seed}", "random", top)
            rows.append({**_row(s, "random", top, "none", "-"), "seed": seed})
            copies[seed] = (b, out / f"random-{top}-seed{seed}")
        for b, copy_dir in copies.values():
            if test is not None:
                label_test_split(b, test, copy_dir)
            got, counts = agreement(copy_dir, a.agreement_on)
            if got is not None:
                per_seed.append(got)
        measured = (([g[0] for g in per_seed] if len(per_seed) > 1 else per_seed[0][0]),
                    max(g[1] for g in per_seed)) if per_seed and len(per_seed) == len(seeds) else None
    verdict = decide(measured, top, rows, a.agreement_on)
    write_study(out, f"Study: model extraction ({a.model} copy of {a.victim} on {a.task})", rows, verdict,
                [(_curve_plot([r for r in rows if "seed" not in r]), "agreement_curve",
                  "agreement with the victim against the query budget")],
                extra={"largest_budget": top, "agreement_examples": counts, "agreement_on": list(a.agreement_on),
                       "evidence": {"agreement": pack_runs([g[0] for g in per_seed]),
                                    "majority": [round(g[1], 6) for g in per_seed]} if per_seed else {}},
                claim=CLAIM, budget=a.budget, seeds=seeds, validity=validity)
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


def load_test_split(a: ExtractionStudyArgs):
    """The task's test split (its texts; labels are not needed), or a one-line error naming the fix."""
    from ptmlab.train.finetune import load_task_data

    test = load_task_data(_extract_cfg(a, Path(a.output), "random", 1), need_train=False).splits.get("test")
    if test is None or not len(test):
        raise PtmlabError(f"--agreement-on test: task '{a.task}' has no test split here: pass --test-file or give "
                          f"--agreement-on dev")
    return test


def label_test_split(a: ExtractionStudyArgs, test, copy_dir: Path) -> None:
    """The victim's and the copy's label ids on every example of ``test`` into ``copy_dir/predictions_test.json``,
    as ``predictions_dev.json`` holds them for the dev set (both models from their run directories: the undefended
    API answers the victim's own argmax, and the copy's ids are the victim's)."""
    from ptmlab.core.io import atomic_write_json
    from ptmlab.extraction.extract import run_labels

    atomic_write_json(copy_dir / "predictions_test.json",
                      {who: run_labels(run_dir, test, a.max_length, a.eval_batch_size)
                       for who, run_dir in (("victim", a.victim), ("copy", str(copy_dir)))})


def agreement(run_dir: Path, splits=("dev",)) -> tuple[tuple[list[float], float] | None, dict]:
    """Per example 1.0 / 0.0: the copy's label equals the victim's, over the dev set (``predictions_dev.json``)
    and, when ``splits`` names it, the test split (``predictions_test.json``, written by ``label_test_split``);
    the share of the victim's most frequent label over the same examples (what a constant copy would agree on);
    and the number of examples per split."""
    import json
    from collections import Counter

    agree, victim, counts = [], [], {}
    for split in splits:
        path = run_dir / f"predictions_{split}.json"
        if not path.is_file():
            return None, counts
        p = json.loads(path.read_text())
        agree += [float(c == v) for c, v in zip(p["copy"], p["victim"], strict=True)]
        victim += p["victim"]
        counts[split] = len(p["victim"])
    if not agree:
        return None, counts
    majority = Counter(victim).most_common(1)[0][1] / len(victim)
    return (agree, majority), counts


def decide(measured: tuple[list, float] | None, top: int, rows: list[dict] | None = None,
           splits=("dev",)) -> Verdict:
    """The rule of ``CLAIM`` on (per-example agreement, the victim's majority-label share; with several seeds, one
    agreement list per victim/copy seed and the largest majority share) at the largest budget: a bootstrap over the
    examples for one seed, over seeds then examples for several; the defences (``rows``) are described after it,
    not part of it."""
    if not measured or not len(measured[0]):
        return Verdict(INCONCLUSIVE, "no undefended RANDOM attack at the largest budget was run")
    agree, majority = measured
    what = f"{'+'.join(splits)} agreement of the RANDOM copy with the victim ({top} queries)"
    several = not isinstance(agree[0], int | float)
    est = hierarchical_bootstrap(agree, None, what) if several and len(agree) > 1 else \
        bootstrap_mean(list(agree[0]) if several else agree, what)
    v = decide_above(est, THRESHOLD)
    if majority >= THRESHOLD:
        v = Verdict(INCONCLUSIVE, f"{v.reason}, but the victim gives one label to {majority:.0%} of the scored "
                                  f"examples: a constant copy would agree as much", est)
    base = est.value
    parts = [v.reason]
    for r in rows or []:
        if "seed" in r:  # the rule's copy of another seed, in the interval above
            continue
        if r["defence"] != "none" and r["agreement"] is not None:
            parts.append(f"{r['defence']}: {r['agreement']:.1%} ({r['agreement'] - base:+.1%})")
        elif r["defence"] != "none":
            parts.append(f"{r['strategy']} vs {r['defence']}: {r['cost_to_users']}")
    return Verdict(v.outcome, "; ".join(parts), est)


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


def recomputed_from(record: dict) -> tuple[str, str]:
    """How ``restate`` recomputed ``record``'s verdict (``rederive``'s ``recompute`` block)."""
    return "recomputed", "every victim/copy seed's per-example agreement (evidence)"


def restate(record: dict, name: str = "extraction") -> Verdict | None:
    """The rule on the record's per-example agreement (``evidence``); None for a record without it."""
    ev = evidence_of(record)
    runs = [r.tolist() for r in unpack_runs(ev.get("agreement") or [])]
    if not runs:
        return None
    top = record.get("largest_budget") or 0
    measured = (runs if len(runs) > 1 else runs[0], max(ev.get("majority") or [0.0]))
    return decide(measured, int(top), record.get("rows"), tuple(record.get("agreement_on") or ("dev",)))


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (rows' ``victim_accuracy``)."""
    from ptmlab.studies.common import one_model_above, task_of

    victims = [r.get("victim_accuracy") for r in record.get("rows") or []
               if isinstance(r.get("victim_accuracy"), int | float)]
    several = any("seed" in r for r in record.get("rows") or [])  # one victim per seed: the weakest must clear it
    return one_model_above(record, task_of(record), "accuracy", min(victims) if victims else None,
                           "the weakest victim" if several else "the victim")
