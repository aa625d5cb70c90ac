"""Study ``multilingual-distillation`` (Q21; Reimers & Gurevych 2020): can distillation on parallel sentences make a
monolingual sentence embedder multilingual, without losing its English quality?

Students: (1) a copy of the teacher, (2) the teacher with XLM-R's vocabulary (``ptmlab tokenizer swap``). Each is
distilled on all the shared parallel text, general domain (the news test sets' training part, English-German and
English-French, and Multi30k's en-de and en-fr captions: about 126k pairs), and measured before and after by bitext
retrieval (both directions) on the held-out part of the news test sets (the 2008 set, about 2,000 German and 2,000
French sentences with their English translations, never seen in training in any language), on Multi30k val (the
development sets) and on Tatoeba (reported beside, dialogue), and by STS-B dev (Spearman of cosine, no fine-tuning)
beside the teacher.

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): the judged student's
English STS-B Spearman is above 0 (a constant embedding) by a t interval over seeds: English quality can only be
kept by a student that has some.

Verdict rule (written before the runs): the student judged is chosen before the held-out news sets are looked at: the
one with the highest mean retrieval accuracy on the development sets (Multi30k val, the third and fourth evaluation
pairs; with one student or no development set, the first of --students). Per seed and per reported set (German and
French held-out news sentences) and direction, its gain is its retrieval accuracy minus the undistilled teacher's, in
points, and its English change is its STS-B dev Spearman minus the teacher's; each gets a 95% interval over
seeds (the gains: a bootstrap over seeds, then sentences, from the per-sentence hits).
Supported when every gain's interval lies above +20 points and the English change's one-sided 95% lower bound above
-0.03 (non-inferiority); not supported when any gain's interval lies below +20 points or the English change's
one-sided 95% upper bound below -0.03; inconclusive otherwise, with one seed (--budget small), or without STS-B data
(English unmeasured). Each set, direction and the English change is a part, shown with its own outcome.

Each gain's interval is a hierarchical bootstrap over seeds, then sentences, from every seed's and the teacher's
per-sentence retrieval hits on the reported sets (kept in ``evidence``), so the sentences' own noise is in it; a
record without the hits (an earlier run) is judged by a t interval over seeds on its fixed sentence set. A held-out
check on general-domain parallel sentences the study never read needs such a set: the ones at hand (Multi30k,
news, Tatoeba) are all read by the study.

Budgets: ``--budget small`` distils the tiny model on 200 pairs per set, one seed, 100 evaluation pairs
(inconclusive by construction; about a minute on 2 CPU cores). The default distils the copy of minilm on all of the
text, one epoch, seeds 0, 1, 2: 1,963 steps of 64 pairs per seed, about 50 minutes per seed measured on 2 quiet
AVX512 CPU cores in bf16 (42 of them training, at 50 pairs/s), about 5 minutes per seed on one modern GPU.
``--budget full`` adds the XLM-R-vocabulary student and a second epoch: about 9 hours on 2 CPU cores, under an hour
on one GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmlab.core.config import at_least, opt, positive
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import StudyBase, parse_study_args, write_study
from ptmlab.studies.evidence import evidence_of
from ptmlab.studies.executor import Run, run_grid
from ptmlab.studies.verdict import (
    INCONCLUSIVE,
    Claim,
    Verdict,
    combine,
    decide_above,
    decide_noninferior,
    mean_interval,
)

CLAIM = Claim(
    study="multilingual-distillation",
    claim="Distillation on parallel sentences makes a monolingual sentence embedder multilingual (translations "
          "retrieve each other) without losing its English quality.",
    source="Q21; Reimers & Gurevych, EMNLP 2020",
    paper="students distilled from an English SBERT teacher retrieve Tatoeba and BUCC translations far better than "
          "the teacher or mBERT / XLM-R without distillation, with English STS kept; no number is copied here",
    rule="the student judged is chosen before the held-out news sets are looked at: the one with the highest mean "
         "retrieval accuracy on the development sets (Multi30k val, the third and fourth evaluation pairs; with one "
         "student or no development set, the first of --students). Per seed and per reported set (German and French "
         "held-out news sentences) and direction, its gain is its retrieval accuracy minus the undistilled "
         "teacher's, in points, and its English change is its STS-B dev Spearman minus the teacher's; each gets a "
         "95% interval over seeds (the gains: a bootstrap over seeds, then sentences, from the per-sentence hits). "
         "Supported when every gain's interval lies above +20 points and the English "
         "change's one-sided 95% lower bound above -0.03 (non-inferiority); not supported when any gain's interval "
         "lies below +20 points or the English change's one-sided 95% upper bound below -0.03; inconclusive "
         "otherwise, with one seed (--budget small), or without STS-B data (English unmeasured). Each set, "
         "direction and the English change is a part, shown with its own outcome.",
    conditions=(
        "the judged student's STS-B Spearman above 0 by a t interval over seeds",
    ),
    metric="retrieval accuracy gain over the teacher (points) per held-out set and direction; STS-B Spearman change",
    margin=20.0,
)
GAIN_POINTS, STS_DROP = 20.0, 0.03

P = "../shared/data/parallel"
TATOEBA = [f"{P}/tatoeba/tatoeba.deu-eng.eng", f"{P}/tatoeba/tatoeba.deu-eng.deu",
           f"{P}/tatoeba/tatoeba.fra-eng.eng", f"{P}/tatoeba/tatoeba.fra-eng.fra"]
MULTI30K_VAL = [f"{P}/multi30k/val.en.gz", f"{P}/multi30k/val.de.gz", f"{P}/multi30k/val.en.gz",
                f"{P}/multi30k/val.fr.gz"]
NEWS_TEST = ["newstest:de:test:en", "newstest:de:test", "newstest:fr:test:en", "newstest:fr:test"]
TRAIN = ["newstest:de:train:en", "newstest:de:train", "newstest:fr:train:en", "newstest:fr:train",
         f"{P}/multi30k/train.en.gz", f"{P}/multi30k/train.de.gz", f"{P}/multi30k/train.en.gz",
         f"{P}/multi30k/train.fr.gz"]
SMALL = dict(teacher="tiny", students=["copy"], max_pairs=200, eval_pairs=100, epochs=1.0, max_length=32,
             sts_examples=100, seeds=["0"])
FULL = dict(students=["copy", "xlmr"], epochs=2.0, seeds=["0", "1", "2"])

@dataclass(frozen=True)
class MultilingualStudyArgs(StudyBase):
    teacher: str = opt("minilm", "teacher sentence-embedding model")
    students: list[str] = opt(["copy"], "students: copy (of the teacher), xlmr (teacher + XLM-R vocabulary)")
    train_pairs: list[str] = opt(TRAIN, "training pairs, flat: SRC,TGT,SRC,TGT (files or newstest:LANG:PART[:SIDE])")
    eval_pairs_files: list[str] = opt(NEWS_TEST + MULTI30K_VAL + TATOEBA, "evaluation pairs, flat: the first two "
                                      "pairs reported, the next two the development sets, the rest beside")
    max_pairs: int | None = opt(None, "training pairs per set (empty: all)")
    eval_pairs: int | None = opt(None, "evaluation pairs per set (empty: all)")
    seeds: list[str] = opt(["0", "1", "2"], "seeds")
    epochs: float = opt(1.0, "distillation epochs")
    lr: float = opt(5e-5, "learning rate")
    batch_size: int = opt(64, "pairs per step")
    max_length: int = opt(64, "max tokens")
    sts_examples: int | None = opt(None, "STS-B dev pairs for the English check (empty: all)")
    output: str = opt("runs/study-multilingual", "output directory")

    def validate(self) -> None:
        at_least(self, 1, "batch_size")
        at_least(self, 8, "max_length")
        at_least(self, 0, "max_pairs", "eval_pairs", "sts_examples")
        positive(self, "epochs", "lr")


def _retrieval(model: str, a: MultilingualStudyArgs) -> list[dict]:
    from ptmlab.distill.parallel import pair_files, read_pairs
    from ptmlab.distill.retrieval import evaluate_pairs
    from ptmlab.train.sentence import load_sentence_model

    m, tok = load_sentence_model(model)
    return [evaluate_pairs(m, tok, read_pairs(s, t, a.eval_pairs), a.max_length)
            for s, t in pair_files(a.eval_pairs_files)]


def _sts(model: str, a: MultilingualStudyArgs) -> float | None:
    from ptmlab.data.loaders import load_task
    from ptmlab.distill.retrieval import sts_spearman
    from ptmlab.train.sentence import load_sentence_model

    try:
        dev = load_task("stsb").splits["dev"]
    except PtmlabError:
        return None  # no GLUE data here
    n = a.sts_examples or len(dev)
    m, tok = load_sentence_model(model)
    return round(sts_spearman(m, tok, dev.text[:n], dev.text_pair[:n], dev.label[:n], a.max_length), 4)


def _embed_distill(a: MultilingualStudyArgs, student: str, seed: int, run_dir: Path) -> None:
    """One run of the study's grid: the student distilled from the teacher on the parallel text (kept when done)."""
    from ptmlab.core.config import build_config
    from ptmlab.distill.multilingual import EmbedDistillConfig, run_embedding_distill

    if not (run_dir / "summary.json").is_file() or a.overwrite:
        run_embedding_distill(build_config(EmbedDistillConfig, dict(
            teacher=a.teacher, student=student, pairs=a.train_pairs, max_pairs=a.max_pairs, epochs=a.epochs,
            lr=a.lr, batch_size=a.batch_size, max_length=a.max_length, seed=seed, output=str(run_dir),
            overwrite=True), source="study"), command="study")


def fixed_teacher(teacher: str, seed: int, out: Path) -> str:
    """The teacher every part of the study reads: a model with weights as it is; a zoo model built with random
    weights (``tiny``, the small budget's) built once, seeded from the study's first seed, and saved under
    OUTPUT/teacher, so that the teacher scored, the teacher distilled from and the copy student are one model and
    two runs of the study give the same numbers."""
    from ptmlab.models.zoo import resolve

    _, entry = resolve(teacher)
    if entry is None or entry.random_config is None:
        return teacher
    path = out / "teacher"
    if not (path / "config.json").is_file():
        from ptmlab.core.seed import set_seed
        from ptmlab.train.sentence import load_sentence_model, save_sentence_model

        set_seed(seed)
        model, tok = load_sentence_model(teacher)
        save_sentence_model(model, tok, path)
    return str(path)


def _student_base(kind: str, a: MultilingualStudyArgs, out: Path) -> str:
    if kind == "copy":
        return ""
    if kind == "xlmr":
        from ptmlab.tokenization.swap import swap_tokenizer

        path = out / "xlmr-vocabulary"
        if not (path / "config.json").is_file():
            swap_tokenizer(a.teacher, "xlmr", path)
        return str(path)
    raise PtmlabError(f"unknown student '{kind}': choose copy or xlmr")


@STUDIES.register("multilingual-distillation", help="Q21: multilingual sentence embeddings by distillation on "
                                                    "parallel text (retrieval before/after, English kept)")
def run(argv: list[str]) -> int:
    import dataclasses

    a = parse_study_args("multilingual-distillation", MultilingualStudyArgs, argv, __doc__, small=SMALL, full=FULL)
    out = Path(a.output)
    name = a.teacher
    a = dataclasses.replace(a, teacher=fixed_teacher(a.teacher, int(a.seeds[0]), out))
    rows, hits = [], {}

    def add(name: str, seed, model: str) -> None:
        from ptmlab.studies.evidence import pack_bits

        for i, r in enumerate(_retrieval(model, a)):
            part = "report" if i < REPORT_SETS else "dev" if i < 2 * REPORT_SETS else "beside"
            rows.append({"model": name, "seed": seed, "set": f"{Path(r['src']).name}->{Path(r['tgt']).name}",
                         "part": part, "src_to_tgt": r["src_to_tgt"], "tgt_to_src": r["tgt_to_src"],
                         "sts_spearman": None})
            if part == "report":  # the sets the rule reads: each sentence's hit, for the seeds-then-sentences interval
                hits[hit_key(name, seed, rows[-1]["set"])] = {d: pack_bits(r["hits"][d])
                                                              for d in ("src_to_tgt", "tgt_to_src")}
        rows[-1]["sts_spearman"] = _sts(model, a)

    add("teacher", "-", a.teacher)
    bases = {kind: _student_base(kind, a, out) for kind in a.students}
    seeds = [int(s) for s in a.seeds]
    run_grid(a, {(kind, seed): Run(_embed_distill, out / f"{kind}-seed{seed}",
                                   (a, bases[kind], seed, out / f"{kind}-seed{seed}"))
                 for kind in a.students for seed in seeds})
    for kind in a.students:
        if bases[kind]:
            add(f"{kind} (before)", "-", bases[kind])
        for seed in seeds:
            add(kind, seed, str(out / f"{kind}-seed{seed}"))
    v = decide(rows, list(a.students), hits)
    write_study(out, f"Study: multilingual distillation ({name})", rows, v,
                extra={"judged_student": choose_student(rows, list(a.students)), "evidence": {"hits": hits}},
                claim=CLAIM, budget=a.budget, seeds=[int(s) for s in a.seeds], validity=validity)
    return 0


REPORT_SETS = 2  # the first two evaluation pairs are reported (held-out news), the next two are the development sets


def _mean_acc(rows: list[dict], model: str, seed, part: str) -> float | None:
    rs = [r for r in rows if r["model"] == model and r["seed"] == seed and r.get("part", "report") == part]
    return float(np.mean([(r["src_to_tgt"] + r["tgt_to_src"]) / 2 for r in rs])) if rs else None


def _seeds(rows: list[dict], model: str) -> list:
    return sorted({r["seed"] for r in rows if r["model"] == model})


def _sts_of(rows: list[dict], model: str, seed) -> float | None:
    return next((r["sts_spearman"] for r in rows if r["model"] == model and r["seed"] == seed
                 and r["sts_spearman"] is not None), None)


def choose_student(rows: list[dict], students: list[str]) -> str | None:
    """The student judged: best mean retrieval on the development sets (never on Tatoeba), else the first."""
    trained = [s for s in students if any(r["model"] == s and r["seed"] != "-" for r in rows)]
    if not trained:
        return None
    dev = {s: [x for x in (_mean_acc(rows, s, seed, "dev") for seed in _seeds(rows, s)) if x is not None]
           for s in trained}
    if len(trained) == 1 or not all(dev.values()):
        return trained[0]
    return max(trained, key=lambda s: float(np.mean(dev[s])))


def _side(name: str) -> str:
    """A reported set's side as a reader says it: ``newstest:de:test:en`` -> en, ``newstest:de:test`` -> de."""
    parts = name.split(":")
    return (parts[3] if len(parts) == 4 else parts[1]) if parts[0] == "newstest" and len(parts) > 2 else name


def _acc(rows: list[dict], model: str, seed, name: str, direction: str) -> float | None:
    return next((float(r[direction]) for r in rows if r["model"] == model and r["seed"] == seed
                 and r["set"] == name and r.get("part", "report") == "report"), None)


def hit_key(model: str, seed, name: str) -> str:
    """Where ``evidence["hits"]`` keeps a model's per-sentence hits on one reported set."""
    return f"{model}|{seed}|{name}"


def _gain(rows: list[dict], hits: dict | None, best: str, seeds: list, name: str, direction: str, base: float,
          mine: list[float], what: str):
    """The judged student's retrieval gain over the teacher (points) on one reported set and direction: with every
    seed's and the teacher's per-sentence hits, a hierarchical bootstrap (seeds, then sentences: the sentences'
    noise in the interval); else a t interval over the seeds' accuracies on the fixed sentence set."""
    from ptmlab.studies.evidence import unpack_bits
    from ptmlab.studies.verdict import hierarchical_bootstrap

    kept = [(hits or {}).get(hit_key(m, s, name), {}).get(direction) for m, s in [("teacher", "-")] +
            [(best, s) for s in seeds]]
    if all(isinstance(k, str) for k in kept):
        teacher, *students = (100.0 * unpack_bits(k) for k in kept)
        if len({len(teacher), *(len(x) for x in students)}) == 1:
            return hierarchical_bootstrap(students, [teacher] * len(students), what)
    return mean_interval([x - base for x in mine], what)


def decide(rows: list[dict], students: list[str], hits: dict | None = None) -> Verdict:
    """The rule of ``CLAIM`` (rows: per model, seed and evaluation set; the teacher's seed is "-"): every reported
    set and direction must gain more than ``GAIN_POINTS`` over the teacher, by a 95% interval over seeds then
    sentences where ``hits`` (``hit_key`` -> direction -> packed per-sentence hits) keeps them, else over seeds."""
    best = choose_student(rows, students)
    teacher = _mean_acc(rows, "teacher", "-", "report")
    if best is None or teacher is None:
        return Verdict(INCONCLUSIVE, "no distilled student (or no teacher row) to judge")
    seeds = _seeds(rows, best)
    reported = list(dict.fromkeys(r["set"] for r in rows if r["model"] == "teacher" and r.get("part") == "report"))
    parts, names = [], []
    for name in reported:
        src, _, tgt = name.partition("->")
        for direction, (query, found) in (("src_to_tgt", (src, tgt)), ("tgt_to_src", (tgt, src))):
            base = _acc(rows, "teacher", "-", name, direction)
            mine = [_acc(rows, best, s, name, direction) for s in seeds]
            names.append(f"{_side(query)} -> {_side(found)}")
            if base is None or any(x is None for x in mine):
                parts.append(Verdict(INCONCLUSIVE, f"{name} {direction}: not measured"))
                continue
            est = _gain(rows, hits, best, seeds, name, direction, base, mine,
                        f"retrieval gain of '{best}' over the teacher, {_side(query)} -> {_side(found)} (points; "
                        f"teacher {base:.2f}%)")
            parts.append(decide_above(est, GAIN_POINTS))
    if not parts:
        return Verdict(INCONCLUSIVE, "no reported evaluation set measured")
    t_sts, s_sts = _sts_of(rows, "teacher", "-"), [_sts_of(rows, best, s) for s in seeds]
    if t_sts is None or any(x is None for x in s_sts):
        english = Verdict(INCONCLUSIVE, "English quality unmeasured (no STS-B dev data)")
    else:
        english = decide_noninferior(mean_interval([x - t_sts for x in s_sts], "STS-B Spearman change"), -STS_DROP)
    joined = combine([*parts, english], names=[*names, "English"])
    weakest = min((p for p in parts if p.estimate is not None), key=lambda p: p.estimate.value, default=None)
    return Verdict(joined.outcome, f"teacher {teacher:.2f}% mean held-out retrieval; {joined.reason}",
                   weakest.estimate if weakest else None, detectable_effect=joined.detectable_effect,
                   parts=joined.parts)


def recomputed_from(record: dict) -> tuple[str, str]:
    """How ``restate`` recomputed ``record``'s verdict (``rederive``'s ``recompute`` block)."""
    if (evidence_of(record).get("hits") or {}):
        return "recomputed", "every seed's and the teacher's per-sentence retrieval hits on the reported sets"
    return "recomputed", ("per-seed retrieval accuracies per set and direction (rows); the per-sentence hits a "
                          "seeds-then-sentences interval would read are not kept")


RERUN = ("a rerun of the current code keeps each seed's per-sentence retrieval hits, for a seeds-then-sentences "
         "bootstrap")


def restate(record: dict, name: str = "multilingual-distillation") -> Verdict | None:
    """The rule of ``CLAIM`` on the record's rows (per model, seed and set; the students in the order the rows
    list them): the t intervals over seeds recomputed. The retrieval hits per sentence are not kept, so the
    sentences' noise is not in them (a rerun of the current design records them)."""
    rows = [r for r in record.get("rows") or [] if isinstance(r, dict) and "model" in r]
    students = list(dict.fromkeys(str(r["model"]) for r in rows if r.get("model") != "teacher"))
    return decide(rows, students, evidence_of(record).get("hits")) if rows and students else None


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (rows: model, seed, ``sts_spearman``; the judged student)."""
    from ptmlab.studies.verdict import seed_interval_above

    rows = record.get("rows") or []
    best = record.get("judged_student")
    scores = [_sts_of(rows, best, s) for s in _seeds(rows, best)] if best else []
    return [seed_interval_above([x for x in scores if x is not None], 0.0, f"STS-B Spearman of {best}")]
