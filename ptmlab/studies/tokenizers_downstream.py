"""Study ``tokenizers-downstream`` (Q5; the ACL 2021 tokenizer question asked downstream): does the tokenizer
a model is pre-trained with change how well it fine-tunes?

Claim (Q5, from Bostrom & Durrett, "Byte Pair Encoding is Suboptimal for Language Model Pretraining", Findings of
EMNLP 2020): Unigram LM tokenization yields subwords closer to morphology than BPE, and masked LMs pre-trained with
it match or outperform identical models pre-trained with BPE on every downstream task they tried (English and
Japanese); the gaps they report are small (around a point or less).

Method: BPE, WordPiece and Unigram tokenizers trained on one corpus at one vocabulary size (``ptmlab tokenizer
train``'s code: the same normaliser and special tokens; BPE and Unigram see the same SentencePiece-style words);
one small BERT per tokenizer and seed, pre-trained from scratch with MLM on that same corpus for the same share
of its TEXT: every model makes ``--pretrain-epochs`` passes over the corpus's documents, so each sees the same
characters, while its token count (and so its steps and FLOPs) follows its tokenizer's fertility; the table
reports tokens, steps and FLOPs next to the scores. Blocks and fine-tuning inputs are counted in tokens (the one
place the tokenizers' lengths differ; a task's sentences fit ``--max-length`` under every tokenizer). Each model is
fine-tuned identically on one task (SST-2; the built-in tweets without GLUE) and scored on dev.

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): every fine-tuned model
on every task is above the task's trivial predictor (majority-class accuracy, the all-positive F1, MCC 0) by a t
interval over seeds, and pre-training moved the held-out loss clearly below the unigram cross-entropy of the held-
out text (``unigram_entropy``; the largest token-prediction eval loss below 0.9 of it) before any pre-training is
compared downstream (``pretrain_common.pretrain_validity``).

Verdict rule: per tokenizer and seed, the dev main metric; the per-seed difference Unigram minus BPE (the same seed
for both) gets a paired t interval over seeds, read as a non-inferiority test with one-sided 95% bounds. Supported
when the lower bound lies above -0.01 (Unigram matches BPE within a point, or beats it: the paper's "match or
outperform"); not supported when the upper bound lies below -0.01 (BPE is better by more than a point);
inconclusive otherwise or with one seed (--budget small), or when Unigram and BPE have the same score on every seed
(the fine-tuned models cannot tell them apart).
WordPiece is reported beside them.

Budgets: ``--budget small`` runs 1-layer models at vocabulary 1,000, one seed (inconclusive by construction);
``--budget full`` runs 3 seeds on the full dev set; its two passes over WikiText-2 (2-3e13 FLOPs, about 300 steps)
end at 0.95-0.98 of the unigram cross-entropy. ``--budget gpu`` is sized to decide the claim on one GPU: the full
budget with every tokenizer trained on, and every model pre-trained for 12 passes over, the shared English text
(``--corpus english``: about 5,000-6,000 steps), bf16 where the device has it, fine-tuned on the whole SST-2
training set; well under an hour on one H100 for the nine models (estimated from step counts, not measured).
Rough times per budget on 2 CPU cores and one GPU: docs/studies.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import at_least, opt, positive
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import parse_study_args, write_study
from ptmlab.studies.pretrain_common import (
    FULL_PRETRAIN,
    GPU_PRETRAIN,
    SMALL_FINETUNE,
    PretrainStudyArgs,
    check_seeds,
    compare_rivals,
    corpus_files,
    pretrain_config,
    pretrain_grid,
    scores_figure,
    study_tasks,
    summary_rows,
)
from ptmlab.studies.verdict import Claim, Verdict

CLAIM = Claim(
    study="tokenizers-downstream",
    claim="Masked LMs pre-trained with Unigram LM tokenization match or outperform identical models pre-trained "
          "with BPE downstream.",
    source="Q5; Bostrom & Durrett, Findings of EMNLP 2020",
    paper="gaps of about a point or less in Unigram's favour on the English and Japanese tasks tried",
    rule="per tokenizer and seed, the dev main metric; the per-seed difference Unigram minus BPE (the same seed for "
         "both) gets a paired t interval over seeds, read as a non-inferiority test with one-sided 95% bounds. "
         "Supported when the lower bound lies above -0.01 (Unigram matches BPE within a point, or beats it: the "
         "paper's \"match or outperform\"); not supported when the upper bound lies below -0.01 (BPE is better by "
         "more than a point); inconclusive otherwise or with one seed (--budget "
         "small), or when Unigram and BPE have the same score on every seed (the fine-tuned models cannot tell "
         "them apart). WordPiece is reported beside them.",
    conditions=(
        "every fine-tuned model above its task's trivial predictor by a t interval over seeds",
        "pre-training moved the held-out loss below 0.9 x the unigram cross-entropy of the held-out text",
    ),
    paper_effect=0.01,
)
MARGIN = 0.01  # "match": within one point

CLAIMED, RIVAL = "unigram", "bpe"
METRIC = "main metric"
SMALL = dict(vocab_size=1000, size="tiny", layers=1, hidden=32, heads=2, ffn=64, block_size=32,
             pretrain_batch_size=8, pretrain_lr=2e-3, pretrain_epochs=0.02, eval_blocks=16, **SMALL_FINETUNE)
FULL = FULL_PRETRAIN
GPU = dict(GPU_PRETRAIN, pretrain_epochs=12.0)


@dataclass(frozen=True)
class TokenizersDownstreamArgs(PretrainStudyArgs):
    types: list[str] = opt(["bpe", "wordpiece", "unigram"], "tokenizer types to train and compare")
    vocab_size: int = opt(8000, "vocabulary size of every tokenizer")
    pretrain_epochs: float = opt(2.0, "passes over the corpus's text for every model (equal text, not tokens)")
    lowercase: bool = opt(False, "lowercase the text in every tokenizer")
    output: str = opt("runs/study-tokenizers-downstream", "output directory")

    def validate(self) -> None:
        from ptmlab.tokenization.train import TYPES

        super().validate()
        for t in self.types:
            TYPES.get(t)
        if not {CLAIMED, RIVAL} <= set(self.types):
            raise PtmlabError(f"--types must include {CLAIMED} and {RIVAL} (the claim compares them)")
        positive(self, "pretrain_epochs")
        at_least(self, 1, "vocab_size")


def train_tokenizers(a: TokenizersDownstreamArgs, out: Path) -> dict[str, Path]:
    """Every type trained on the pre-training corpus into OUTPUT/tokenizers/<type>, reused when there with the same
    settings (``OUTPUT/tokenizers/settings.json``); one made with other settings (a rerun with another ``--budget``
    in the same folder) is a one-line error rather than silently reused."""
    import json

    from ptmlab.core.io import atomic_write_json
    from ptmlab.pretrain.corpus import iter_documents
    from ptmlab.tokenization.corpora import TextSource
    from ptmlab.tokenization.train import train_and_save

    root = out / "tokenizers"
    paths = {t: root / t for t in a.types}
    files = corpus_files(a, out)  # read as pre-training reads it (.gz, .jsonl text fields, documents)
    settings = {"vocab_size": a.vocab_size, "lowercase": a.lowercase, "files": files}
    saved_file = root / "settings.json"
    saved = json.loads(saved_file.read_text()) if saved_file.is_file() else None
    missing = [t for t, p in paths.items() if a.overwrite or not (p / "tokenizer.json").is_file()]
    if saved is not None and saved != settings and len(missing) < len(paths) and not a.overwrite:
        differ = ", ".join(f"{k} {saved.get(k)!r} there, {v!r} now" for k, v in settings.items() if saved.get(k) != v)
        raise PtmlabError(f"'{root}' holds tokenizers trained with other settings ({differ}): pass --overwrite to "
                          "redo them, or another --output")
    if missing:
        sources = [TextSource("corpus", None, ",".join(files), lambda: iter_documents(files))]
        train_and_save(missing, sources, a.vocab_size, root if len(missing) > 1 else paths[missing[0]],
                       lowercase=a.lowercase)
        atomic_write_json(saved_file, settings)
    return paths


def decide(scores: dict[str, list[float]]) -> Verdict:
    """The rule of ``CLAIM``: Unigram against BPE only (``scores``: per tokenizer, seed by seed in one order)."""
    return compare_rivals({k: scores[k] for k in (CLAIMED, RIVAL)}, CLAIMED, -MARGIN, f"dev {METRIC}")


def restate(record: dict, name: str = "tokenizers-downstream") -> Verdict | None:
    """The rule of ``CLAIM`` recomputed from the record's per-run scores (``per_seed``: each tokenizer and seed's
    dev score)."""
    from ptmlab.studies.pretrain_common import summary_rows

    runs = [r for r in record.get("per_seed") or [] if isinstance(r, dict)]
    tasks = list(record.get("tasks") or [])
    if not runs or not tasks or not all(isinstance(r.get(t), int | float) for r in runs for t in tasks):
        return None
    avg = summary_rows(runs, "tokenizer", tasks)[1]
    return decide(avg) if CLAIMED in avg and RIVAL in avg else None


@STUDIES.register("tokenizers-downstream", help="Q5: BPE vs WordPiece vs Unigram, each pre-trained on the same "
                                                "text and fine-tuned; does Unigram beat BPE downstream?")
def run(argv: list[str]) -> int:
    a = parse_study_args("tokenizers-downstream", TokenizersDownstreamArgs, argv, __doc__, small=SMALL, full=FULL,
                         gpu=GPU)
    out = Path(a.output)
    tasks = study_tasks(a)[:1]
    tokenizers = train_tokenizers(a, out)
    cells = {}
    for seed in check_seeds(a.seeds):
        for t, tok in tokenizers.items():
            run_dir = out / f"{t}-seed{seed}"
            cells[seed, t] = (run_dir, seed, pretrain_config(a, run_dir, seed, objective="mlm", arch="bert",
                                                             tokenizer=str(tok), max_flops=0.0,
                                                             epochs=a.pretrain_epochs))
    per_seed = []
    for (seed, t), (s, scores) in pretrain_grid(a, cells, tasks).items():
        m = s["metrics"]
        per_seed.append({"tokenizer": t, "seed": seed, "steps": s["steps"], "tokens": m["tokens"],
                         "flops": m["flops"], "eval_loss": m["eval_loss"],
                         "unigram_entropy": s["corpus"].get("unigram_entropy"),
                         "train_corpus_tokens": s["corpus"]["train_tokens"], **scores})
    rows, avg = summary_rows(per_seed, "tokenizer", tasks)
    v = decide(avg)
    fig = scores_figure(avg, f"dev {tasks[0]}", f"tokenizers at vocabulary {a.vocab_size}")
    write_study(out, "Study: tokenizers downstream (BPE / WordPiece / Unigram)", rows, v,
                [(fig, "tokenizers", "mean ± spread over seeds (dots: seeds)")],
                extra={"tasks": tasks, "per_seed": per_seed, "vocab_size": a.vocab_size,
                       "pretrain_epochs": a.pretrain_epochs},
                claim=CLAIM, budget=a.budget, seeds=check_seeds(a.seeds), validity=validity)
    return 0


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (``per_seed``, ``tasks``, ``unigram_entropy``)."""
    from ptmlab.studies.pretrain_common import pretrain_validity

    return pretrain_validity(record, "tokenizer")
