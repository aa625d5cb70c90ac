"""Study ``meta-kd`` (ACL 2021, Pan et al., Meta-KD): does a meta-teacher learnt across domains, meta-distilled,
give better small students than single-domain teachers or one teacher on the pooled domains with plain KD?

Per seed and per domain d, a student of the same size is distilled on d's training split from:
  (a) a teacher fine-tuned on d alone, with plain KD (soft targets + labels);
  (b) one teacher fine-tuned on all domains pooled, with plain KD;
  (c) the meta-teacher (all domains, prototype weights, transferable-knowledge loss), with meta-distillation;
and (d) leave one domain out: a meta-distilled student on the other domains, tested on d, beside a TF-IDF +
logistic-regression model trained on the same other domains. Test accuracy on d's test split: by default each
domain's fixed 10% (200 of 2,000 rows); with ``--folds K`` the i-th seed is tested on fold i mod K of every domain
(a fixed shuffle cut in K parts), its dev part (early stopping and the best epoch of every teacher and student) the
first 10% of the other rows and its training part the rest, so K seeds test every row of every domain once and
nothing chosen on dev has seen a tested row.

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): on every domain, the
students of single-domain KD, pooled KD and Meta-KD are each above the domain's majority-class accuracy by a t
interval over seeds.

Verdict rule (written before the runs): per seed s, test accuracy averaged over the domains gives A_s (single-domain
KD), B_s (pooled KD) and C_s (Meta-KD); the per-seed differences C_s - A_s and C_s - B_s get 95% paired t intervals
over seeds. Supported when both intervals lie above 0; not supported when either lies below 0 (a baseline beats
Meta-KD); inconclusive otherwise or with one seed (--budget small). Part (d) is reported beside it: the mean over
held-out domains of student minus TF-IDF. With ``--folds`` (as domain-adaptation) each seed's difference is measured
on its own fold, so the interval over seeds carries the sampling noise of the test rows as well as the seed's.

Budgets (times are rough: step counts at about 2 s per minilm step of batch 32 on 2 free CPU cores, a step of the
3-layer student with its cached teacher outputs counted as 0.6 of one, plus the teacher-output passes):
``--budget small`` runs the tiny model on 40 examples of three domains (books, dvd, airline), one seed (inconclusive
by construction; about a minute). The default runs minilm teachers and 3-layer students on 400 training rows per
domain of the five domains, 2 seeds, each domain's fixed 200 test rows: per seed about 900 teacher steps (part d's
five meta-teachers are 500 of them) and 1,300 student steps, some 2 hours in all. ``--budget full`` runs 5 seeds on
5 folds (``--folds 5``: 1,400 training, 200 dev and 400 test rows per domain and seed; every one of a domain's 2,000
rows tested once): per seed about 3,100 teacher steps (part a 440, b 440, c 440, d 1,750) and 4,600 student steps
(a, b and c 660 each, d 2,600), some 3.5 to 4 hours, so about 18 hours for the five seeds (``--parts a,b,c``, the
rule alone: 68 minutes measured for one seed on 2 quiet cores, part a 17, b 16 and c 35, so about 6 hours for the
five) and roughly 1.5 hours on one modern GPU. The paper's teacher size is ``--model mpnet``,
not tried here (about 5 times minilm's time).

The grid (``--executor``) has one run per seed (on its fold) and part: each part trains its own teachers (part c
one meta-teacher shared by its per-domain students, part d one per held-out domain), so the runs are independent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmlab.core.config import at_least, opt, positive
from ptmlab.core.errors import PtmlabError
from ptmlab.distill.domains import FOLDS_HELP, check_folds
from ptmlab.studies import STUDIES
from ptmlab.studies.common import StudyBase, majority_share, parse_study_args, write_study
from ptmlab.studies.executor import Run, run_grid
from ptmlab.studies.verdict import INCONCLUSIVE, Claim, Verdict, combine, decide_above, paired_seeds

CLAIM = Claim(
    study="meta-kd",
    claim="A meta-teacher learnt across domains, meta-distilled, gives better small students than a teacher of the "
          "student's domain alone or one teacher of all domains pooled, each with plain KD.",
    source="Pan et al., Meta-KD, ACL 2021",
    paper="Meta-KD students above single-domain and multi-domain KD baselines on Amazon reviews and MNLI (Tables 2, "
          "3); no number is copied here",
    rule="per seed s, test accuracy averaged over the domains gives A_s (single-domain KD), B_s (pooled KD) and C_s "
         "(Meta-KD); the per-seed differences C_s - A_s and C_s - B_s get 95% paired t intervals over seeds. "
         "Supported when both intervals lie above 0; not supported when either lies below 0 (a baseline beats "
         "Meta-KD); inconclusive otherwise or with one seed (--budget small). Part (d) is reported beside it: the "
         "mean over held-out domains of student minus TF-IDF.",
    conditions=(
        "on every domain, each compared student above the majority-class accuracy by a t interval over seeds",
    ),
)

# --budget small: three of the domains (three leave-one-out rotations instead of five), tiny model, one seed
SMALL = dict(model="tiny", student="layers:1", max_per_domain=40, max_length=32, teacher_epochs=1.0, epochs=1.0,
             batch_size=16, eval_batch_size=64, seeds=["0"], domains=["books", "dvd", "airline"])
FULL = dict(seeds=["0", "1", "2", "3", "4"], folds=5, max_per_domain=1600)
PART_METHODS = {"a": "single_kd", "b": "pooled_kd", "c": "meta_kd"}  # the parts whose students the rule compares


@dataclass(frozen=True)
class MetaKDStudyArgs(StudyBase):
    domains: list[str] = opt(["books", "dvd", "electronics", "imdb", "airline"], "domains under --domain-dir")
    domain_files: list[str] = opt([], "more domains as NAME=FILE (comma-separated)")
    domain_dir: str | None = opt(None, "folder of NAME.tsv files (default ../shared/data/domains)")
    model: str = opt("minilm", "teacher base model")
    student: str = opt("layers:3", "student (the same for every method)")
    seeds: list[str] = opt(["0", "1"], "seeds (at least 2 for an interval; --budget full: 0-4)")
    parts: list[str] = opt(["a", "b", "c", "d"], "parts to run: a (single-domain KD), b (pooled KD), c (Meta-KD), "
                                                 "d (leave one domain out)")
    max_per_domain: int = opt(400, "training examples per domain")
    folds: int = opt(0, FOLDS_HELP)
    max_length: int = opt(128, "max tokens")
    teacher_epochs: float = opt(2.0, "teacher epochs")
    teacher_lr: float = opt(5e-5, "teacher learning rate")
    epochs: float = opt(3.0, "student epochs")
    lr: float = opt(1e-4, "student learning rate")
    batch_size: int = opt(32, "batch size")
    eval_batch_size: int = opt(128, "evaluation batch size")
    output: str = opt("runs/study-meta-kd", "output directory")

    def validate(self) -> None:
        bad = [p for p in self.parts if p not in ("a", "b", "c", "d")]
        if bad:
            raise PtmlabError(f"unknown part '{bad[0]}': choose from a, b, c, d")
        try:
            [int(s) for s in self.seeds]
        except ValueError:
            raise PtmlabError(f"--seeds must be integers, got {self.seeds}") from None
        check_folds(self.folds)
        at_least(self, 1, "max_per_domain", "batch_size", "eval_batch_size")
        at_least(self, 8, "max_length")
        at_least(self, 0, "teacher_epochs")
        positive(self, "epochs", "lr", "teacher_lr")


def tfidf_accuracy(train_text: list[str], train_y: list[int], test_text: list[str], test_y: list[int]) -> float:
    """TF-IDF (word 1-2 grams) + logistic regression: the classic cross-domain sentiment baseline."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    x = vec.fit_transform(train_text)
    clf = LogisticRegression(max_iter=2000, C=4.0).fit(x, train_y)
    return float((clf.predict(vec.transform(test_text)) == np.asarray(test_y)).mean())


def _done(path: Path, a: MetaKDStudyArgs):
    from ptmlab.core.rundir import RunDir

    return RunDir(path).summary() if (path / "summary.json").is_file() and not a.overwrite else None


def _finetune(a, seed: int, name: str, files: dict, out: Path) -> str:
    from ptmlab.core.config import build_config
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    if _done(out, a) is None:
        run_finetune(build_config(FinetuneConfig, dict(
            model=a.model, task=name, train_file=str(files["train"]), dev_file=str(files["dev"]),
            test_file=str(files["test"]), max_length=a.max_length, epochs=a.teacher_epochs, lr=a.teacher_lr,
            batch_size=a.batch_size, eval_batch_size=a.eval_batch_size, seed=seed, output=str(out), overwrite=True,
            test=False), source="study"), command="study")
    return str(out)


def _plain_kd(a, seed: int, name: str, teacher: str, files: dict, out: Path) -> float:
    from ptmlab.core.config import build_config
    from ptmlab.distill.config import DistillConfig
    from ptmlab.distill.pipeline import run_distill

    s = _done(out, a) or run_distill(build_config(DistillConfig, dict(
        teacher=teacher, student=a.student, task=name, train_file=str(files["train"]), dev_file=str(files["dev"]),
        test_file=str(files["test"]), max_length=a.max_length, epochs=a.epochs, lr=a.lr, batch_size=a.batch_size,
        eval_batch_size=a.eval_batch_size, seed=seed, output=str(out), overwrite=True, test=True,
        losses=["soft_ce"]), source="study"), command="study")
    return float(s["test_metrics"]["accuracy"])


def _meta(a, seed: int, fold: int | None, domains: list[str], out: Path, student_domain: str | None = None,
          meta_teacher: str | None = None) -> dict:
    from ptmlab.core.config import build_config
    from ptmlab.distill.metakd import MetaDistillConfig, run_meta_distill

    named = [d for d in a.domains if d in domains]
    files = [f for f in a.domain_files if f.partition("=")[0] in domains]
    return _done(out, a) or run_meta_distill(build_config(MetaDistillConfig, dict(
        domains=named, domain_files=files, domain_dir=a.domain_dir, teacher_model=a.model, meta_teacher=meta_teacher,
        student=a.student, student_domain=student_domain, max_per_domain=a.max_per_domain, folds=a.folds,
        fold=fold or 0, max_length=a.max_length, teacher_epochs=a.teacher_epochs, teacher_lr=a.teacher_lr,
        epochs=a.epochs, lr=a.lr, batch_size=a.batch_size, eval_batch_size=a.eval_batch_size, seed=seed,
        output=str(out), overwrite=True), source="study"),
        command="study")


def _heldout_accuracy(run: str, dd, name: str, max_length: int) -> float:
    from ptmlab.data.encode import encode_split
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.evaluate import evaluate

    data, _ = dd.pooled([name], task=name)
    tok = load_tokenizer(run)
    enc = encode_split(tok, data.splits["test"], max_length)
    return float(evaluate(load_model(run), enc, data.spec, tok.pad_token_id or 0)[0]["accuracy"])


def _part(a: MetaKDStudyArgs, seed: int, fold: int | None, part: str, base: Path, dd, files: dict,
          pooled_files: dict):
    """One cell of the study's grid, into ``base/PART``: one part's teachers then students for one seed (on its
    fold). Parts a-c return {domain: test accuracy}; part d its leave-one-domain-out rows."""
    names = dd.names
    if part == "a":
        return {d: _plain_kd(a, seed, d, _finetune(a, seed, d, files[d], base / "a" / d / "teacher"), files[d],
                             base / "a" / d / "student") for d in names}
    if part == "b":
        teacher = _finetune(a, seed, "pooled", pooled_files, base / "b" / "teacher")
        return {d: _plain_kd(a, seed, d, teacher, files[d], base / "b" / d) for d in names}
    if part == "c":
        scores, meta_teacher = {}, None  # the meta-teacher trained with the first domain's student is reused
        for d in names:
            s = _meta(a, seed, fold, names, base / "c" / d, student_domain=d, meta_teacher=meta_teacher)
            meta_teacher = meta_teacher or str(base / "c" / d / "meta_teacher")
            scores[d] = float(s["per_domain_test_accuracy"][d]["student"])
        return scores
    lodo = []
    for d in names:
        others = [n for n in names if n != d]
        _meta(a, seed, fold, others, base / "d" / d)
        tr = [dd.get(n).splits["train"] for n in others]
        te = dd.get(d).splits["test"]
        tfidf = tfidf_accuracy([t for s in tr for t in s.text], [y for s in tr for y in s.label], te.text, te.label)
        lodo.append({"seed": seed, **({"fold": fold} if fold is not None else {}), "held_out": d,
                     "test_rows": len(te), "tfidf_lr": tfidf,
                     "meta_kd_student": _heldout_accuracy(str(base / "d" / d), dd, d, a.max_length)})
    return lodo


@STUDIES.register("meta-kd", help="ACL 2021 Meta-KD: meta-teacher + meta-distillation vs single-domain and pooled "
                                  "KD, and leave-one-domain-out vs TF-IDF")
def run(argv: list[str]) -> int:
    from ptmlab.distill.domains import load_domains, resolve_domains, seed_folds, split_dir, write_split_files
    from ptmlab.report.plots import bar_plot

    a = parse_study_args("meta-kd", MetaKDStudyArgs, argv, __doc__, small=SMALL, full=FULL)
    out = Path(a.output)
    seeds = [int(s) for s in a.seeds]
    fold_of = seed_folds(seeds, a.folds)
    named = resolve_domains(a.domains, a.domain_files, a.domain_dir)
    data = {}  # per fold (None: the fixed split): the domains, their split files and the pooled files
    for fold in dict.fromkeys(fold_of.values()):
        dd = load_domains(named, max_per_domain=a.max_per_domain, fold=fold, folds=a.folds)
        if len(dd.names) < 2:
            raise PtmlabError("the meta-kd study needs at least two domains")
        data[fold] = (dd, write_split_files(dd, split_dir(out, fold)), _pooled_files(dd, split_dir(out, fold)))
    names = data[fold_of[seeds[0]]][0].names
    # one cell per seed (on its fold) and part: each trains its own teachers, so the cells are independent
    grid = {}
    for seed, fold in fold_of.items():
        base = out / (f"seed{seed}" if fold is None else f"seed{seed}-fold{fold}")
        for part in a.parts:
            grid[seed, fold, part] = Run(_part, base / part, (a, seed, fold, part, base, *data[fold]))
    done = run_grid(a, grid)
    rows, lodo = [], []
    for seed, fold in fold_of.items():
        dd = data[fold][0]
        for d in names:
            test = dd.get(d).splits["test"]
            row = {"seed": seed, **({"fold": fold} if fold is not None else {}), "domain": d,
                   "test_rows": len(test), "test_majority": majority_share(list(test.label))}
            for part, method in PART_METHODS.items():
                if part in a.parts:
                    row[method] = done[seed, fold, part][d]
            rows.append(row)
        lodo += done[seed, fold, "d"] if "d" in a.parts else []
    avg = method_scores(rows)
    v = decide(avg)
    if lodo:
        v = Verdict(v.outcome, f"{v.reason}. {lodo_text(lodo)}", v.estimate, detectable_effect=v.detectable_effect,
                    parts=v.parts)
    figs = []
    methods = [m for m in PART_METHODS.values() if rows and m in rows[0]]
    if methods:
        figs.append((bar_plot(methods, [float(np.mean([r[m] for r in rows])) for m in methods], "test accuracy",
                              f"mean over domains and seeds ({a.student})"), "methods", "students per method"))
    extra = {"per_domain": rows, "leave_one_out": lodo, "method_scores": avg, "folds": a.folds}
    if a.folds:
        extra["per_fold"] = per_fold(rows, lodo)
    write_study(out, f"Study: Meta-KD ({a.student} from {a.model}, {len(names)} domains)", rows + lodo, v, figs,
                extra=extra, claim=CLAIM, budget=a.budget, seeds=seeds, validity=validity)
    return 0


def _pooled_files(dd, out_dir: Path) -> dict[str, Path]:
    from ptmlab.core.io import atomic_write_text

    paths = {}
    for s in ("train", "dev", "test"):
        lines = ["text\tlabel"] + [f"{' '.join(t.replace(chr(9), ' ').split())}\t{dd.labels[y]}"
                                   for d in dd.domains for t, y in zip(d.splits[s].text, d.splits[s].label,
                                                                       strict=True)]
        paths[s] = out_dir / f"pooled.{s}.tsv"
        atomic_write_text(paths[s], "\n".join(lines) + "\n")
    return paths


def method_scores(rows: list[dict]) -> dict[str, list[float]] | None:
    """Per method, test accuracy averaged over domains, seed by seed (None without parts a, b and c)."""
    if not rows or not all(k in rows[0] for k in PART_METHODS.values()):
        return None
    seeds = sorted({r["seed"] for r in rows})
    return {m: [float(np.mean([r[m] for r in rows if r["seed"] == s])) for s in seeds] for m in PART_METHODS.values()}


def per_fold(rows: list[dict], lodo: list[dict]) -> list[dict]:
    """With ``--folds``: per seed, its fold, the rows it tested and each method's test accuracy averaged over the
    domains (the numbers the rule pairs), with part (d)'s student minus TF-IDF when it ran."""
    out = []
    for seed in dict.fromkeys(r["seed"] for r in rows):
        mine = [r for r in rows if r["seed"] == seed]
        rec = {"seed": seed, "fold": mine[0]["fold"], "test_rows": {r["domain"]: r["test_rows"] for r in mine}}
        rec.update({m: float(np.mean([r[m] for r in mine])) for m in PART_METHODS.values() if m in mine[0]})
        held = [r for r in lodo if r["seed"] == seed]
        if held:
            rec["lodo_student_minus_tfidf"] = float(np.mean([r["meta_kd_student"] - r["tfidf_lr"] for r in held]))
        out.append(rec)
    return out


def decide(avg: dict[str, list[float]] | None) -> Verdict:
    """The rule of ``CLAIM`` on ``method_scores``; the estimate shown is the weaker of the two comparisons."""
    if avg is None:
        return Verdict(INCONCLUSIVE, "parts a, b and c are needed for the verdict on the claim")
    parts = [decide_above(paired_seeds(avg["meta_kd"], avg[m], f"test accuracy: Meta-KD minus {name}"))
             for m, name in (("single_kd", "single-domain KD"), ("pooled_kd", "pooled KD"))]
    joined = combine(parts, names=["against single-domain KD", "against pooled KD"])
    weaker = min(parts, key=lambda v: (v.estimate.high if joined.outcome == "not supported" else v.estimate.low))
    return Verdict(joined.outcome, joined.reason, weaker.estimate, detectable_effect=joined.detectable_effect,
                   parts=joined.parts)


def restate(record: dict, name: str = "meta-kd") -> Verdict | None:
    """The rule of ``CLAIM`` recomputed from the record's per-seed, per-domain rows (each method's test accuracy
    averaged over the domains, seed by seed: ``method_scores``)."""
    rows = [r for r in record.get("rows") or [] if isinstance(r, dict) and "seed" in r and "domain" in r]
    return decide(method_scores(rows)) if rows else None


def lodo_text(lodo: list[dict]) -> str:
    """Part (d), reported beside the verdict."""
    if not lodo:
        return ""
    diff = float(np.mean([r["meta_kd_student"] - r["tfidf_lr"] for r in lodo]))
    return (f"Leave one domain out: the Meta-KD student scores {100 * diff:+.2f} points against TF-IDF + logistic "
            f"regression trained on the same other domains (mean over held-out domains and seeds).")


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (``per_domain``: one row per domain and seed)."""
    from ptmlab.studies.common import above_domain_majority

    rows = [r for r in record.get("per_domain") or [] if isinstance(r, dict)]
    return above_domain_majority(rows, tuple(PART_METHODS.values()))
