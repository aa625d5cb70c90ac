"""Study ``multilingual-distillation`` (Q21; Reimers & Gurevych 2020): can distillation on parallel sentences make a
monolingual sentence embedder multilingual, without losing its English quality?

Students: (1) a copy of the teacher, (2) the teacher with XLM-R's vocabulary (``ptmlab tokenizer swap``). Each is
distilled on the training pairs (Multi30k en-de and en-fr by default) and measured before and after on Tatoeba
deu/fra-eng and Multi30k val (bitext retrieval accuracy, both directions), and on STS-B dev (Spearman of cosine,
no fine-tuning) beside the teacher.

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): the judged student's
English STS-B Spearman is above 0 (a constant embedding) by a t interval over seeds: English quality can only be
kept by a student that has some.

Verdict rule (written before the runs): the student judged is chosen before Tatoeba is looked at: the one with the
highest mean retrieval accuracy on the development sets (Multi30k val, the evaluation pairs after the first two;
with one student or no development set, the first of --students). Per seed, its gain is its mean Tatoeba retrieval
accuracy (both directions, every language) minus the teacher's, in points, and its English change is its STS-B dev
Spearman minus the teacher's; each gets a 95% t interval over seeds. Supported when the gain's interval lies above
+10 points and the English change's above -0.03; not supported when the gain's interval lies below +10 points or the
English change's below -0.03; inconclusive otherwise, with one seed (--budget small), or without STS-B data (English
unmeasured).

Budgets: ``--budget small`` distils the tiny model on 200 pairs, one seed (inconclusive by construction);
``--budget full`` runs 3 seeds on every pair (``--teacher mpnet``: a 12-layer teacher, not tried here).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmlab.core.config import opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import StudyBase, parse_study_args, write_study
from ptmlab.studies.verdict import INCONCLUSIVE, Claim, Verdict, combine, decide_above, mean_interval

CLAIM = Claim(
    study="multilingual-distillation",
    claim="Distillation on parallel sentences makes a monolingual sentence embedder multilingual (translations "
          "retrieve each other) without losing its English quality.",
    source="Q21; Reimers & Gurevych, EMNLP 2020",
    paper="students distilled from an English SBERT teacher retrieve Tatoeba and BUCC translations far better than "
          "the teacher or mBERT / XLM-R without distillation, with English STS kept; no number is copied here",
    rule="the student judged is chosen before Tatoeba is looked at: the one with the highest mean retrieval accuracy "
         "on the development sets (Multi30k val, the evaluation pairs after the first two; with one student or no "
         "development set, the first of --students). Per seed, its gain is its mean Tatoeba retrieval accuracy (both "
         "directions, every language) minus the teacher's, in points, and its English change is its STS-B dev "
         "Spearman minus the teacher's; each gets a 95% t interval over seeds. Supported when the gain's interval "
         "lies above +10 points and the English change's above -0.03; not supported when the gain's interval lies "
         "below +10 points or the English change's below -0.03; inconclusive otherwise, with one seed (--budget "
         "small), or without STS-B data (English unmeasured).",
    conditions=(
        "the judged student's STS-B Spearman above 0 by a t interval over seeds",
    ),
)
GAIN_POINTS, STS_DROP = 10.0, 0.03

P = "../shared/data/parallel"
TATOEBA = [f"{P}/tatoeba/tatoeba.deu-eng.eng", f"{P}/tatoeba/tatoeba.deu-eng.deu",
           f"{P}/tatoeba/tatoeba.fra-eng.eng", f"{P}/tatoeba/tatoeba.fra-eng.fra"]
MULTI30K_VAL = [f"{P}/multi30k/val.en.gz", f"{P}/multi30k/val.de.gz", f"{P}/multi30k/val.en.gz",
                f"{P}/multi30k/val.fr.gz"]
SMALL = dict(teacher="tiny", students=["copy"], max_pairs=200, eval_pairs=100, epochs=1.0, max_length=32,
             sts_examples=100, seeds=["0"])
FULL = dict(seeds=["0", "1", "2"])


@dataclass(frozen=True)
class MultilingualStudyArgs(StudyBase):
    teacher: str = opt("minilm", "teacher sentence-embedding model")
    students: list[str] = opt(["copy", "xlmr"], "students: copy (of the teacher), xlmr (teacher + XLM-R vocabulary)")
    train_pairs: list[str] = opt([f"{P}/multi30k/train.en.gz", f"{P}/multi30k/train.de.gz",
                                  f"{P}/multi30k/train.en.gz", f"{P}/multi30k/train.fr.gz"],
                                 "training pairs, flat: SRC,TGT,SRC,TGT")
    eval_pairs_files: list[str] = opt(TATOEBA + MULTI30K_VAL, "evaluation pairs, flat (the first 4: Tatoeba)")
    max_pairs: int | None = opt(None, "training pairs per set (empty: all)")
    eval_pairs: int | None = opt(None, "evaluation pairs per set (empty: all)")
    seeds: list[str] = opt(["0", "1"], "seeds")
    epochs: float = opt(2.0, "distillation epochs")
    lr: float = opt(5e-5, "learning rate")
    batch_size: int = opt(64, "pairs per step")
    max_length: int = opt(64, "max tokens")
    sts_examples: int | None = opt(None, "STS-B dev pairs for the English check (empty: all)")
    output: str = opt("runs/study-multilingual", "output directory")


def _retrieval(model: str, a: MultilingualStudyArgs) -> list[dict]:
    from ptmlab.distill.embeddings import load_sentence_model
    from ptmlab.distill.parallel import pair_files, read_pairs
    from ptmlab.distill.retrieval import evaluate_pairs

    m, tok = load_sentence_model(model)
    return [evaluate_pairs(m, tok, read_pairs(s, t, a.eval_pairs), a.max_length)
            for s, t in pair_files(a.eval_pairs_files)]


def _sts(model: str, a: MultilingualStudyArgs) -> float | None:
    from ptmlab.data.loaders import load_task
    from ptmlab.distill.embeddings import load_sentence_model
    from ptmlab.distill.retrieval import sts_spearman

    try:
        dev = load_task("stsb").splits["dev"]
    except PtmlabError:
        return None  # no GLUE data here
    n = a.sts_examples or len(dev)
    m, tok = load_sentence_model(model)
    return round(sts_spearman(m, tok, dev.text[:n], dev.text_pair[:n], dev.label[:n], a.max_length), 4)


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
    from ptmlab.core.config import build_config
    from ptmlab.distill.multilingual import EmbedDistillConfig, run_embedding_distill

    a = parse_study_args("multilingual-distillation", MultilingualStudyArgs, argv, __doc__, small=SMALL, full=FULL)
    out = Path(a.output)
    rows = []

    def add(name: str, seed, model: str) -> None:
        for i, r in enumerate(_retrieval(model, a)):
            rows.append({"model": name, "seed": seed, "set": f"{Path(r['src']).name}->{Path(r['tgt']).name}",
                         "part": "report" if i < TATOEBA_SETS else "dev",
                         "src_to_tgt": r["src_to_tgt"], "tgt_to_src": r["tgt_to_src"], "sts_spearman": None})
        rows[-1]["sts_spearman"] = _sts(model, a)

    add("teacher", "-", a.teacher)
    for kind in a.students:
        base = _student_base(kind, a, out)
        if base:
            add(f"{kind} (before)", "-", base)
        for seed in (int(s) for s in a.seeds):
            run_dir = out / f"{kind}-seed{seed}"
            if not (run_dir / "summary.json").is_file() or a.overwrite:
                run_embedding_distill(build_config(EmbedDistillConfig, dict(
                    teacher=a.teacher, student=base, pairs=a.train_pairs, max_pairs=a.max_pairs, epochs=a.epochs,
                    lr=a.lr, batch_size=a.batch_size, max_length=a.max_length, seed=seed, output=str(run_dir),
                    overwrite=True), source="study"), command="study")
            add(kind, seed, str(run_dir))
    v = decide(rows, list(a.students))
    write_study(out, f"Study: multilingual distillation ({a.teacher})", rows, v,
                extra={"judged_student": choose_student(rows, list(a.students))},
                claim=CLAIM, budget=a.budget, seeds=[int(s) for s in a.seeds], validity=validity)
    return 0


TATOEBA_SETS = 2  # the first two evaluation pairs (four files) are Tatoeba: the reported part


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


def decide(rows: list[dict], students: list[str]) -> Verdict:
    """The rule of ``CLAIM`` (rows: per model, seed and evaluation set; the teacher's seed is "-")."""
    best = choose_student(rows, students)
    teacher = _mean_acc(rows, "teacher", "-", "report")
    if best is None or teacher is None:
        return Verdict(INCONCLUSIVE, "no distilled student (or no teacher row) to judge")
    seeds = _seeds(rows, best)
    gain = mean_interval([_mean_acc(rows, best, s, "report") - teacher for s in seeds],
                         f"Tatoeba retrieval gain of '{best}' over the teacher (points)")
    retrieval = decide_above(gain, GAIN_POINTS)
    t_sts, s_sts = _sts_of(rows, "teacher", "-"), [_sts_of(rows, best, s) for s in seeds]
    if t_sts is None or any(x is None for x in s_sts):
        english = Verdict(INCONCLUSIVE, "English quality unmeasured (no STS-B dev data)")
    else:
        english = decide_above(mean_interval([x - t_sts for x in s_sts], "STS-B Spearman change"), -STS_DROP)
    joined = combine([retrieval, english])
    return Verdict(joined.outcome, f"teacher {teacher:.2f}% Tatoeba retrieval; {joined.reason}", gain)


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (rows: model, seed, ``sts_spearman``; the judged student)."""
    from ptmlab.studies.verdict import seed_interval_above

    rows = record.get("rows") or []
    best = record.get("judged_student")
    scores = [_sts_of(rows, best, s) for s in _seeds(rows, best)] if best else []
    return [seed_interval_above([x for x in scores if x is not None], 0.0, f"STS-B Spearman of {best}")]
