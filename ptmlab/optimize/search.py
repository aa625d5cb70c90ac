"""The search: an Optuna study over (structure, backend) pairs, stored in ``OUT/study.db`` (SQLite) so that a killed
search resumes where it stopped.

Order: the run itself on every backend first (seconds each, enqueued), then the sampler proposes pairs (TPE,
constrained by the dev-loss budget through ``Trial.set_constraint``, or random); a pair already tried is answered
from its earlier trial. Every trial reports, before it spends anything, an estimate of its objective (the
structure's untrained shape timed against the run in PyTorch, times what the backend did to the run itself), and
after its structure exists, the structure's own dev loss; ``FrontPruner`` stops the trial at either point when it
cannot beat the best trial within the loss budget, or when its structure already loses more than the budget allows.
A structure that would not finish in the time left is not started.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import optuna

from ptmlab.core.errors import PtmlabError

STUDY = "ptmlab-optimize"
HOPELESS_POINTS = 0.5  # a structure losing more than --max-loss + this in fp32 PyTorch is not tried on backends
ESTIMATE_SLACK = 1.10  # an estimate this much worse than the best within budget cannot move the front
DUPLICATES_BEFORE_ENUMERATION = 8


@dataclass
class Outcome:
    """A finished trial's row (also stored as the trial's ``row`` user attribute)."""

    row: dict = field(default_factory=dict)


class Pruned(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class FrontPruner(optuna.pruners.BasePruner):
    """Step 0: the trial's estimated objective against the best feasible trial's; step 1: its structure's dev loss in
    points against --max-loss (+ ``HOPELESS_POINTS``)."""

    def __init__(self, max_loss: float):
        self.max_loss = max_loss

    @staticmethod
    def best_feasible(study: optuna.Study) -> float | None:
        values = [t.value for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                  if t.user_attrs.get("row", {}).get("feasible") and t.value is not None]
        return min(values) if values else None

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        values = trial.intermediate_values
        if 1 in values:
            return values[1] > self.max_loss + HOPELESS_POINTS
        if 0 in values:
            best = self.best_feasible(study)
            return best is not None and values[0] > best * ESTIMATE_SLACK
        return False


def open_study(path: Path, cfg, resume: bool) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{path}"
    if cfg.sampler == "random":
        sampler = optuna.samplers.RandomSampler(seed=cfg.seed)
    else:
        sampler = optuna.samplers.TPESampler(seed=cfg.seed, n_startup_trials=4)  # constrained by set_constraint
    study = optuna.create_study(storage=storage, study_name=STUDY, sampler=sampler, direction="minimize",
                                pruner=FrontPruner(cfg.max_loss), load_if_exists=resume)
    if resume:  # a trial that was running when the search was killed did not finish: it is run again
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            study.tell(t.number, state=optuna.trial.TrialState.FAIL)
    return study


def pair_of(t: optuna.trial.FrozenTrial) -> tuple[str, str] | None:
    p = t.params
    return (p["structure"], p["backend"]) if "structure" in p and "backend" in p else None


def tried(study: optuna.Study) -> dict[tuple[str, str], optuna.trial.FrozenTrial]:
    """Pairs already decided (complete or pruned; duplicates excluded) -> their trial. A trial stopped because its
    training did not fit the time left decides nothing: a resumed search with more budget tries it again."""
    out = {}
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,
                                                      optuna.trial.TrialState.PRUNED)):
        pair = pair_of(t)
        if pair is not None and not {"duplicate_of", "over_budget"} & set(t.user_attrs) and pair not in out:
            out[pair] = t
    return out


def run_search(ctx, study: optuna.Study, pairs: list[tuple[str, str]], deadline: float, max_trials: int) -> None:
    """Trials until the deadline, ``max_trials`` new trials (0: no cap) or every pair is decided."""
    from ptmlab.core.progress import clock, progress

    structures = sorted({s for s, _ in pairs}, key=[s for s, _ in pairs].index)
    backends = sorted({b for _, b in pairs}, key=[b for _, b in pairs].index)
    for s, b in pairs:  # the run itself on every backend: what every estimate builds on
        if ctx.structure(s).kind == "source":
            study.enqueue_trial({"structure": s, "backend": b}, skip_if_exists=True)
    done = tried(study)
    bar = progress(total=len(pairs), desc="optimize trials")
    bar.update(len([p for p in done if p in pairs]))
    new, duplicates = 0, 0
    refused: dict[tuple[str, str], int] = {}  # pairs whose training does not fit the time left, in this call

    def postfix() -> None:
        best = FrontPruner.best_feasible(study)
        bar.set_postfix_str(f"best {ctx.describe_value(best)}, {clock(max(0.0, deadline - time.time()))} left")

    postfix()
    while True:
        done = tried(study)
        left = [p for p in pairs if p not in done and p not in refused]
        if not left or time.time() >= deadline or (max_trials and new >= max_trials):
            break
        trial = study.ask()
        s = trial.suggest_categorical("structure", structures)
        b = trial.suggest_categorical("backend", backends)
        if (s, b) in done or (s, b) in refused or (s, b) not in pairs:
            earlier = done.get((s, b))
            trial.set_user_attr("duplicate_of", earlier.number if earlier is not None else refused.get((s, b), -1))
            if earlier is not None and earlier.state == optuna.trial.TrialState.COMPLETE:
                constrain(trial, earlier.user_attrs.get("constraint", 1.0))
                study.tell(trial, earlier.value)
            else:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            duplicates += 1
            if duplicates >= DUPLICATES_BEFORE_ENUMERATION:  # the sampler keeps proposing decided pairs
                study.enqueue_trial(dict(zip(("structure", "backend"), ctx.most_promising(left), strict=True)))
                duplicates = 0
            continue
        duplicates = 0
        new += 1
        if run_trial(ctx, study, trial, s, b, deadline) == "over budget":
            refused[(s, b)] = trial.number
        bar.update(1)
        postfix()
        study.set_user_attr("elapsed_s", ctx.elapsed())
    bar.close()


def run_trial(ctx, study: optuna.Study, trial: optuna.Trial, s: str, b: str, deadline: float) -> str:
    """One trial, told to the study; returns its status (complete, pruned, over budget or failed)."""
    start = time.time()
    row = {"trial": trial.number, "structure": s, "backend": b}
    try:
        estimate = ctx.estimate(s, b)
        if estimate is not None:
            row["estimate"] = estimate
            trial.report(estimate, 0)
            if trial.should_prune():
                raise Pruned(f"estimated {ctx.describe_value(estimate)}: cannot beat the best within --max-loss "
                             f"({ctx.describe_value(FrontPruner.best_feasible(study))})")
        structure = ctx.structure(s)
        if not ctx.structures.built(structure):
            need = ctx.build_seconds(structure)
            if need is not None and time.time() + need > deadline:
                trial.set_user_attr("over_budget", True)
                raise Pruned(f"training {s} takes about {need:.0f} s; {max(0.0, deadline - time.time()):.0f} s left")
        loss = ctx.structure_loss(structure)
        row["structure_loss_points"] = loss
        trial.report(loss, 1)
        if trial.should_prune():
            raise Pruned(f"the structure alone loses {loss:.2f} points (more than --max-loss "
                         f"{ctx.cfg.max_loss:g} + {HOPELESS_POINTS})")
        row.update(ctx.measure(structure, b, trial.number))
        row["status"] = "complete"
        row["seconds"] = round(time.time() - start, 1)
        trial.set_user_attr("row", row)
        constrain(trial, row["loss_points"] - ctx.cfg.max_loss)
        study.tell(trial, row["objective"])
        ctx.after_trial(row)
    except Pruned as p:
        row.update(status="over budget" if trial.user_attrs.get("over_budget") else "pruned", reason=p.reason,
                   seconds=round(time.time() - start, 1))
        trial.set_user_attr("row", row)
        if "structure_loss_points" in row:
            constrain(trial, row["structure_loss_points"] - ctx.cfg.max_loss)
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    except Exception as e:  # a backend that cannot take this structure: recorded, the search goes on
        text = str(e).splitlines()[0][:300] if str(e) else ""
        reason = text if isinstance(e, PtmlabError) else f"{type(e).__name__}: {text}"
        row.update(status="failed", reason=reason, seconds=round(time.time() - start, 1))
        trial.set_user_attr("row", row)
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    ctx.log(row)
    return row["status"]


def constrain(trial: optuna.Trial, over: float) -> None:
    """The sampler's constraint (dev loss in points minus --max-loss; <= 0 is within the budget), kept in the row's
    user attributes too."""
    trial.set_user_attr("constraint", float(over))
    trial.set_constraint("loss_over_max_loss", float(over))


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))

