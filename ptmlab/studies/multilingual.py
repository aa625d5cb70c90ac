"""Study ``multilingual-distillation`` (Q21; Reimers & Gurevych 2020): can distillation on parallel sentences make a
monolingual sentence embedder multilingual, without losing its English quality?

Students: (1) a copy of the teacher, (2) the teacher with XLM-R's vocabulary (``ptmlab tokenizer swap``). Each is
distilled on the training pairs (Multi30k en-de and en-fr by default) and measured before and after on Tatoeba
deu/fra-eng and Multi30k val (bitext retrieval accuracy, both directions), and on STS-B dev (Spearman of cosine,
no fine-tuning) beside the teacher.

Verdict rule (written before the runs): for each seed, the gain of a student is its mean retrieval accuracy over
the Tatoeba sets and both directions minus the teacher's. "supported" when the best student's gain is at least
+10 points for every seed and its STS-B Spearman is within 0.03 of the teacher's; "not supported" when no student
gains for any seed; otherwise "inconclusive". Seeds >= 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmlab.core.config import opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import StudyBase, parse_study_args, write_study

P = "../shared/data/parallel"
TATOEBA = [f"{P}/tatoeba/tatoeba.deu-eng.eng", f"{P}/tatoeba/tatoeba.deu-eng.deu",
           f"{P}/tatoeba/tatoeba.fra-eng.eng", f"{P}/tatoeba/tatoeba.fra-eng.fra"]
MULTI30K_VAL = [f"{P}/multi30k/val.en.gz", f"{P}/multi30k/val.de.gz", f"{P}/multi30k/val.en.gz",
                f"{P}/multi30k/val.fr.gz"]
SMALL = dict(teacher="tiny", students=["copy"], max_pairs=200, eval_pairs=100, epochs=1.0, max_length=32,
             sts_examples=100)


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

    a = parse_study_args("multilingual-distillation", MultilingualStudyArgs, argv, __doc__, small=SMALL)
    out = Path(a.output)
    rows = []

    def add(name: str, seed, model: str) -> None:
        for r in _retrieval(model, a):
            rows.append({"model": name, "seed": seed, "set": f"{Path(r['src']).name}->{Path(r['tgt']).name}",
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
    write_study(out, f"Study: multilingual distillation ({a.teacher})", rows, verdict(rows))
    return 0


def verdict(rows: list[dict], tatoeba_sets: int = 2) -> str:
    """The rule of the module docstring (the first ``tatoeba_sets`` sets of each model are Tatoeba)."""
    def mean_acc(model: str, seed) -> float:
        rs = [r for r in rows if r["model"] == model and r["seed"] == seed][:tatoeba_sets]
        return float(np.mean([(r["src_to_tgt"] + r["tgt_to_src"]) / 2 for r in rs]))

    def sts(model: str, seed):
        return next((r["sts_spearman"] for r in rows if r["model"] == model and r["seed"] == seed
                     and r["sts_spearman"] is not None), None)

    teacher = mean_acc("teacher", "-")
    t_sts = sts("teacher", "-")
    students = sorted({r["model"] for r in rows if r["seed"] != "-"})
    if not students:
        return "no distilled student to judge."
    gains = {s: [mean_acc(s, seed) - teacher for seed in sorted({r["seed"] for r in rows if r["model"] == s})]
             for s in students}
    best = max(students, key=lambda s: np.mean(gains[s]))
    seeds = len(gains[best])
    s_sts = [sts(best, seed) for seed in sorted({r["seed"] for r in rows if r["model"] == best})]
    kept = t_sts is None or all(x is not None and x >= t_sts - 0.03 for x in s_sts)
    if seeds >= 2 and min(gains[best]) >= 10 and kept:
        word = "supported"
    elif all(max(g) <= 0 for g in gains.values()):
        word = "not supported"
    else:
        word = "inconclusive"
    return (f"Tatoeba retrieval (mean of both directions and languages): teacher {teacher:.2f}%, best student "
            f"'{best}' {teacher + float(np.mean(gains[best])):.2f}% ({float(np.mean(gains[best])):+.2f} points, "
            f"{seeds} seeds); STS-B Spearman teacher {t_sts}, student {s_sts}: the claim that distillation on "
            f"parallel sentences makes the embedder multilingual while keeping its English quality is {word}.")
