"""Re-derive committed study results from their own numbers, without retraining.

    python -m ptmlab.studies.rederive                  # every studies/results/<study>/results.json, rewritten
    python -m ptmlab.studies.rederive --check          # exit 1 when a results.json is not what its numbers give

For each ``<study>/results.json`` the study's module gives, from the record alone:

- ``restate(record) -> Verdict`` (optional): the rule's verdict recomputed from the record's numbers: its per-example
  records (``evidence``, ``ptmlab.studies.evidence``) where it carries them, else its per-seed scores (or, for a rule
  that counts units, each unit's recorded interval). A record whose rule rests on a hierarchical bootstrap (seeds,
  then examples) but that carries no per-example records is not restated from per-seed scores (that would narrow
  its interval and, where half of the dev set chose a variant, let that half in) unless the module says its
  ``restate`` reads the record's own intervals (``RESTATES_RECORDED_INTERVALS``); its recorded rule verdict then
  stands, and ``recompute`` says so;
- ``validity(record) -> list[Condition]``: the study's validity conditions on the record's numbers (a number the
  record lacks is an unmet condition with value null);

and ``common.judge`` turns them into the outcome, the validity block and the detectable effect, exactly as a new run
does (``common.write_study``). The study's current ``Claim`` (with its conditions) replaces the recorded one, and
absolute machine paths are made portable (``common.portable``). Each record gets:

- ``recompute``: ``{"status", "from"}``: ``recomputed`` (interval, conditions and outcome from the records it
  holds), ``partly recomputed`` (the outcome from recorded intervals a rerun would recompute) or ``as recorded``
  (the run did not keep what its interval was computed from; ``rerun`` says what would);
- ``preregistration``: the status checked again (``prereg.recheck``): a result is confirmatory only when its
  preregistration was committed before its run and the rule that judges it now is the rule that ran.

Running it twice changes nothing.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_write_json
from ptmlab.studies.common import output_of
from ptmlab.studies.verdict import INCONCLUSIVE, OUTCOMES, Estimate, Verdict, detectable_effect

RESULTS = Path("studies/results")
# what judge writes: dropped before a record is judged again
_JUDGED = ("outcome", "reason", "estimate", "validity", "detectable_effect", "paper_effect", "rule", "verdict",
           "parts", "recompute", "preregistration")
RECOMPUTED, PARTLY, AS_RECORDED = "recomputed", "partly recomputed", "as recorded"
RERUN = "a rerun of the current code keeps the per-example records its interval is computed from (evidence)"


def module_of(name: str, studies=None):
    """The module that registers study ``name``."""
    if studies is None:
        from ptmlab.studies import load_all

        studies = load_all()
    if name not in studies:
        raise PtmlabError(f"'{name}' is not a registered study")
    return sys.modules[studies.get(name).__module__]


def claim_of(module, name: str):
    """The ``Claim`` a module declares for study ``name`` (None when it declares none)."""
    from ptmlab.studies.verdict import Claim

    found = []
    for value in vars(module).values():
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else [value]
        found += [c for c in items if isinstance(c, Claim) and c.study == name]
    return found[0] if found else None


_INTERVAL = re.compile(r"(-?\d+\.\d+) \[(-?\d+\.\d+), (-?\d+\.\d+)\] \(([^()]*(?:\([^()]*\))?[^()]*)\)")


def _estimate(match: re.Match, metric: str = "") -> Estimate:
    value, low, high, method = match.groups()
    # "paired t over 3 seeds", "bootstrap over 872 examples", "hierarchical bootstrap: 3 seeds then 436 examples, t
    # over seeds": n is the seeds behind a seed-level interval (its t quantile's df is n - 1), else the examples
    n = re.search(r"(\d+) seeds then", method) or re.search(r"over (\d+)", method)
    return Estimate.from_dict({"metric": metric, "value": float(value), "low": float(low), "high": float(high),
                               "n": int(n.group(1)) if n else 0, "method": method})


def estimates_in(text: str) -> list[Estimate]:
    """The intervals a reason quotes ("0.0076 [-0.0015, 0.0172] (paired t over 3 seeds (95%))"), as estimates."""
    return [_estimate(m) for m in _INTERVAL.finditer(text)]


_LINE = re.compile(r"(?:is above|is below|includes|above|below) (-?\d+(?:\.\d+)?)(?:$|[;:)(,])")


def thresholds_in(text: str) -> tuple[float, ...]:
    """The line a ``decide_above`` reason names ("... is above 0.9", "... includes 0"): the first one it names."""
    m = _LINE.search(text)
    return (float(m.group(1)),) if m else ()


_PART = re.compile(r"(?:^|; )(?=(?:" + "|".join(re.escape(o) for o in OUTCOMES) + r"): )")
_DETECT = re.compile(r"could detect ±(\d+(?:\.\d+)?)")


def parts_in(reason: str) -> tuple[Verdict, ...]:
    """The parts of a combined rule's reason ("inconclusive: A ...; supported: B ..."), each with the first interval
    it quotes (its metric: the words before the number) and what it could detect; () for a rule of one part."""
    texts = [t for t in _PART.split(reason) if t]
    if len(texts) < 2 or not all(any(t.startswith(f"{o}: ") for o in OUTCOMES) for t in texts):
        return ()
    parts = []
    for text in texts:
        outcome = next(o for o in sorted(OUTCOMES, key=len, reverse=True) if text.startswith(f"{o}: "))
        body = text[len(outcome) + 2:]
        m = _INTERVAL.search(body)
        est = _estimate(m, body[:m.start()].strip()) if m else None
        det = detectable_effect(est) if est is not None else None
        quoted = _DETECT.search(body)
        if det is None and quoted:
            det = float(quoted.group(1))  # a rule that counts units reports it beside its counts
        parts.append(Verdict(outcome, body, est, detectable_effect=det, thresholds=thresholds_in(body) if est else ()))
    return tuple(parts)


def recorded_rule(record: dict) -> Verdict:
    """The rule's verdict as the record states it (before validity conditions and power notes)."""
    rule = record.get("rule") if isinstance(record.get("rule"), dict) else None
    outcome = (rule or record).get("outcome")
    reason = str((rule or record).get("reason") or record.get("verdict") or "")
    if outcome not in OUTCOMES:
        outcome, reason = INCONCLUSIVE, f"no decision rule: {reason}"
    est = record.get("estimate")
    estimate = Estimate.from_dict(est) if isinstance(est, dict) and est.get("value") is not None else None
    dets = [detectable_effect(e) for e in ([estimate] if estimate else estimates_in(reason))]
    dets = [d for d in dets if d is not None]
    if not dets and isinstance(record.get("detectable_effect"), int | float):
        dets = [record["detectable_effect"]]  # a rule that reports it beside counts, not beside an interval
    if estimate is None and outcome != INCONCLUSIVE:
        dets = []  # a decided rule of several parts: ``combine`` keeps only its open parts' detectable effects
    parts = tuple(p for p in map(Verdict.from_part, [d for d in record.get("parts") or [] if isinstance(d, dict)])
                  if p is not None) or (parts_in(reason) if estimate is None else ())
    parts = tuple(p if p.thresholds or p.estimate is None else
                  dataclasses.replace(p, thresholds=thresholds_in(p.reason)) for p in parts)
    lines = tuple(x for x in record.get("thresholds") or () if isinstance(x, int | float)) or (
        thresholds_in(reason) if estimate is not None else ())
    return Verdict(outcome, reason, estimate, detectable_effect=max(dets) if dets else None, parts=parts,
                   thresholds=lines)


def hierarchical(record: dict) -> bool:
    """Whether the record's rule rests on a hierarchical bootstrap (seeds, then examples): the interval the design
    asks for, computed by the run from per-example numbers; a restatement from per-seed scores would only narrow it
    (and, where half of the dev set chose a variant, let that half in)."""
    rule = record.get("rule") if isinstance(record.get("rule"), dict) else record
    return "hierarchical bootstrap" in str(rule.get("reason") or "")


def rederive_record(name: str, record: dict, studies=None) -> dict:
    """``record`` judged again from its own numbers (see the module docstring)."""
    from ptmlab.studies.common import judge, portable
    from ptmlab.studies.prereg import recheck

    module = module_of(name, studies)
    rule, recompute = restated(module, name, record)
    claim = claim_of(module, name)
    base = {k: v for k, v in record.items() if k not in _JUDGED}
    if claim is not None:
        base["claim"] = claim.to_dict()
    verdict = judge(rule, base, getattr(module, "validity", None), claim)
    base["recompute"] = recompute
    base["preregistration"] = recheck(record, name, studies)
    new = portable({**base, **verdict.to_dict(), "verdict": verdict.text()}, output_of(record))
    return _rename_output(new, f"runs/{name}")


def restated(module, name: str, record: dict) -> tuple[Verdict, dict]:
    """The rule's verdict for ``record`` and how it was obtained (``recompute``): the module's ``restate`` where it
    can recompute it, else the verdict the record states."""
    from ptmlab.studies.evidence import evidence_of

    restate = getattr(module, "restate", None)
    allowed = bool(evidence_of(record)) or not hierarchical(record) or \
        getattr(module, "RESTATES_RECORDED_INTERVALS", False)
    rule = restate(record, name) if restate is not None and allowed else None
    if rule is not None:
        how = getattr(module, "recomputed_from", None)
        status, source = how(record) if callable(how) else (RECOMPUTED, "the record's per-seed scores")
        return rule, {"status": status, "from": source}
    return recorded_rule(record), {"status": AS_RECORDED, "from": "the outcome, reason and interval the run recorded",
                                   "rerun": getattr(module, "RERUN", RERUN)}


def _rename_output(record: dict, label: str) -> dict:
    """``record`` with its run's output folder (and paths under it) named ``label``: a committed result names its
    study, not the scratch folder it was run in."""
    out = output_of(record)
    if not out or out == label:
        return record
    text = re.sub(re.escape(out) + r'(?=[/" ])', label, json.dumps(record))
    return json.loads(text)


def rederive(results_dir: Path = RESULTS, only: list[str] | None = None, write: bool = True,
             studies=None) -> list[dict]:
    """Re-derive every ``results_dir/<study>/results.json``; returns per study its outcome before and after and
    whether the file changed (written only with ``write``)."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise PtmlabError(f"'{results_dir}' is not a directory of study results")
    done = []
    for path in sorted(results_dir.glob("*/results.json")):
        name = path.parent.name
        if only and name not in only:
            continue
        old = json.loads(path.read_text(encoding="utf-8"))
        new = rederive_record(name, old, studies)
        changed = json.dumps(new, sort_keys=True) != json.dumps(old, sort_keys=True)
        if write and changed:
            atomic_write_json(path, new)
        done.append({"study": name, "before": old.get("outcome"), "after": new["outcome"], "changed": changed,
                     "reason": new["reason"]})
    return done


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m ptmlab.studies.rederive", description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default=str(RESULTS), help="directory of <study>/results.json")
    p.add_argument("--only", default="", help="comma-separated studies")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when a result would change")
    a = p.parse_args(argv)
    try:
        done = rederive(Path(a.results), [s for s in a.only.split(",") if s] or None, write=not a.check)
    except PtmlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for d in done:
        print(f"{d['study']}: {d['before']} -> {d['after']}{' (changed)' if d['changed'] else ''}")
    return 1 if a.check and any(d["changed"] for d in done) else 0


if __name__ == "__main__":
    raise SystemExit(main())
