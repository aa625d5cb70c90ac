"""Study ``domain-adaptation`` (Q1, ULMFiT's second step; domain-adaptive pre-training): does continuing masked-LM
pre-training on unlabelled text of the target domain, before fine-tuning, improve the fine-tuned model there?

Claim: ULMFiT (Howard & Ruder, ACL 2018) fine-tunes the language model on target-domain text before the
classifier; "Don't Stop Pretraining" (Gururangan et al., ACL 2020) shows the same for transformers: continued
pre-training on in-domain text helps, e.g. RoBERTa on review tasks, IMDB 95.0 -> 95.4 and Amazon helpfulness
65.1 -> 66.5 (Table 3), with larger gains the further the domain is from the original pre-training text.

Method: per target domain (``../shared/data/domains/<name>.tsv``, fixed 80/10/10 split; the built-in tweets when
that folder is absent), two models from the same encoder (``--model``, minilm): (a) the encoder as shipped;
(b) the encoder after ``--mlm-steps`` steps of masked-LM on the text of that domain's training split, labels
unused (task-adaptive pre-training: no dev or test text is read). Both are fine-tuned identically on the domain's
labelled training split, once per seed (continued pre-training is seeded too), the best epoch chosen on dev, and
scored on the test split.

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): on every domain, the
base and the adapted model are each above the domain's majority-class accuracy by a t interval over seeds. Both get
the same fine-tuning (data, epochs, seed) by construction; the continued masked-LM steps are the treatment itself,
so they are not a budget the reference lacks.

Verdict rule (written before the runs): a run's score is test accuracy averaged over the domains; the per-seed
difference adapted minus base (the same seed for fine-tuning, and for continued pre-training) gets a 95% paired t
interval over seeds. Supported when the interval lies above 0; not supported when it lies below 0 (adaptation
hurts); inconclusive otherwise or with one seed (--budget small).

Budgets: ``--budget small`` adapts the tiny model for 6 steps on one domain, one seed (inconclusive by
construction); ``--budget full`` runs 5 seeds on the airline, books and electronics domains with minilm
(``--model mpnet``, a 12-layer, 768-wide encoder of the paper's RoBERTa-base size, runs: checked on 2 MLM steps;
the full study with it takes hours on a CPU). ``full`` tests on every row of each domain: seed i on fold
i of five (400 test rows each, 2,000 over the seeds; ``--folds``), instead of the fixed 10% (200 rows, one row half a
point of accuracy) the default keeps. Roughly, ``full`` is 5 seeds x 3 domains x (300 masked-LM steps and two
fine-tunings of about 90 steps), some 7,000 minilm steps: 3.3 hours measured on 2 free CPU cores, 15 to 20 minutes
on one modern GPU (mpnet: about 5 times that).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import at_least, build_config, opt, positive
from ptmlab.core.errors import PtmlabError
from ptmlab.distill.domains import FOLDS_HELP, check_folds, seed_folds
from ptmlab.studies import STUDIES
from ptmlab.studies.common import StudyArgs, finetune_run, parse_study_args, write_study
from ptmlab.studies.executor import Run, run_grid
from ptmlab.studies.pretrain_common import (
    SMALL_FINETUNE,
    check_seeds,
    compare_rivals,
    fmt,
    pretrain_variant,
    scores_figure,
    shared_dir,
)
from ptmlab.studies.verdict import Claim, Verdict

CLAIM = Claim(
    study="domain-adaptation",
    claim="Continuing masked-LM pre-training on unlabelled text of the target domain before fine-tuning improves "
          "the fine-tuned model there.",
    source="Q1 (ULMFiT step 2); Howard & Ruder, ACL 2018; Gururangan et al., Don't Stop Pretraining, ACL 2020",
    paper="RoBERTa with domain-adaptive pre-training: IMDB 95.0 -> 95.4, Amazon helpfulness 65.1 -> 66.5 (Table 3)",
    rule="a run's score is test accuracy averaged over the domains; the per-seed difference adapted minus base (the "
         "same seed for fine-tuning, and for continued pre-training) gets a 95% paired t interval over seeds. "
         "Supported when the interval lies above 0; not supported when it lies below 0 (adaptation hurts); "
         "inconclusive otherwise or with one seed (--budget small).",
    conditions=(
        "on every domain, the base and the adapted model each above the majority-class accuracy by a t "
        "interval over seeds",
    ),
    paper_effect=0.009,
)

CLAIMED, BASE = "adapted", "base"
SMALL = dict(model="tiny", domains=["airline"], mlm_steps=6, mlm_batch_size=8, block_size=32, mlm_max_docs=200,
             eval_blocks=16, **SMALL_FINETUNE)
FULL = dict(seeds=["0", "1", "2", "3", "4"], folds=5, domains=["airline", "books", "electronics"])


@dataclass(frozen=True)
class DomainAdaptationArgs(StudyArgs):
    model: str = opt("minilm", "the encoder to adapt (zoo name or model directory)")
    domains: list[str] = opt(["airline", "books"], "target domains under --domain-dir (tweets: the built-in "
                                                   "tweets; used when the domain folder is absent)")
    domain_dir: str | None = opt(None, "folder of NAME.tsv files with text and label (default "
                                       "../shared/data/domains)")
    mlm_steps: int = opt(300, "steps of continued masked-LM pre-training")
    mlm_batch_size: int = opt(32, "blocks per continued pre-training step")
    mlm_lr: float = opt(5e-5, "peak learning rate of continued pre-training")
    mlm_max_docs: int = opt(0, "unlabelled training documents used for continued pre-training (0: all)")
    block_size: int = opt(128, "tokens per continued pre-training block")
    eval_blocks: int = opt(128, "held-out blocks for the continued pre-training eval loss")
    seeds: list[str] = opt(["0", "1"], "seeds (continued pre-training and fine-tuning)")
    max_train: int | None = opt(None, "labelled training examples per domain (default: all 1600)")
    folds: int = opt(0, FOLDS_HELP)
    max_eval: int | None = opt(None, "dev examples per domain (default: all)")
    max_length: int = opt(128, "max tokens of fine-tuning")
    epochs: float = opt(2.0, "fine-tuning epochs")
    lr: float = opt(5e-5, "fine-tuning learning rate")
    output: str = opt("runs/study-domain-adaptation", "output directory")

    def validate(self) -> None:
        super().validate()
        if not self.domains:
            raise PtmlabError("--domains is empty: name at least one domain (e.g. airline)")
        check_seeds(self.seeds)
        check_folds(self.folds)
        at_least(self, 1, "mlm_steps", "mlm_batch_size")
        at_least(self, 8, "block_size")
        at_least(self, 0, "eval_blocks", "mlm_max_docs")
        positive(self, "mlm_lr")


@dataclass
class Target:
    """One target domain: its unlabelled text file and the fine-tuning data options."""

    name: str
    text_file: Path
    data: dict  # task / train_file / dev_file / test_file for finetune_variant


def targets(a: DomainAdaptationArgs, out: Path, fold: int | None = None) -> list[Target]:
    """Each domain's split files and training text (tweets: the built-in task), written under OUTPUT/data (with
    ``--folds``: OUTPUT/data-foldK, the test split fold K)."""
    from ptmlab.core.io import atomic_write_text
    from ptmlab.distill.domains import load_domains, resolve_domains, split_dir, write_split_files

    base = Path(a.domain_dir) if a.domain_dir else shared_dir() / "domains"
    names = [d for d in a.domains if d != "tweets"]
    if names and not base.is_dir() and not a.domain_dir:
        names = []  # no shared data: the built-in tweets alone
    data_dir = split_dir(out, fold)
    result = []
    if names:
        dd = load_domains(resolve_domains(names, [], str(base)), fold=fold, folds=a.folds)
        files = write_split_files(dd, data_dir)
        for d in dd.domains:
            text = d.splits["train"].text[:a.mlm_max_docs or None]
            path = data_dir / f"{d.name}.unlabelled.txt"
            atomic_write_text(path, "\n\n".join(" ".join(t.split()) for t in text) + "\n")
            result.append(Target(d.name, path, {"task": d.name, **{f"{s}_file": str(p)
                                                                    for s, p in files[d.name].items()}}))
    if "tweets" in a.domains or not result:
        from ptmlab.studies.pretrain_common import tweets_text_file

        data_dir.mkdir(parents=True, exist_ok=True)
        result.append(Target("tweets", tweets_text_file(data_dir, a.mlm_max_docs or None), {"task": "tweets"}))
    return result


def adapt(a: DomainAdaptationArgs, t: Target, out: Path, seed: int) -> dict:
    """Continued masked-LM pre-training of ``--model`` on the domain's unlabelled text."""
    from ptmlab.pretrain.config import PretrainConfig

    cfg = build_config(PretrainConfig, dict(
        files=[str(t.text_file)], model=a.model, objective="mlm", block_size=a.block_size,
        batch_size=a.mlm_batch_size, lr=a.mlm_lr, max_steps=a.mlm_steps, eval_blocks=a.eval_blocks, seed=seed,
        precision=a.precision, output=str(out), overwrite=True, eval_steps=0, save_steps=100, valid_fraction=0.1,
        logging_steps=10), source="study")
    return pretrain_variant(cfg, a.overwrite)


def decide(avg: dict[str, list[float]]) -> Verdict:
    """The rule of ``CLAIM``: ``avg`` holds base and adapted scores (averaged over domains), seed by seed."""
    return compare_rivals({CLAIMED: avg[CLAIMED], BASE: avg[BASE]}, CLAIMED, 0.0, "test accuracy")


def restate(record: dict, name: str = "domain-adaptation") -> Verdict | None:
    """The rule of ``CLAIM`` recomputed from the record's per-seed, per-domain scores (``per_seed``): each seed's
    base and adapted accuracy averaged over the domains, then the paired t interval."""
    runs = [r for r in record.get("per_seed") or [] if isinstance(r, dict)]
    if not runs or not all(isinstance(r.get(k), int | float) for r in runs for k in (BASE, CLAIMED)):
        return None
    domains = list(dict.fromkeys(r["domain"] for r in runs))
    seeds = list(dict.fromkeys(r["seed"] for r in runs))
    avg = {v: [sum(r[v] for r in runs if r["seed"] == s) / len(domains) for s in seeds] for v in (BASE, CLAIMED)}
    return decide(avg)


def score(summary: dict) -> float:
    """Test accuracy when the split has labels, else the dev main metric."""
    test = summary.get("test_metrics") or {}
    return float(test["accuracy"] if "accuracy" in test else summary["metrics"][summary["main_metric"]])


@STUDIES.register("domain-adaptation", help="Q1 (ULMFiT step 2): continued MLM on target-domain text before "
                                            "fine-tuning vs fine-tuning alone")
def run(argv: list[str]) -> int:
    a = parse_study_args("domain-adaptation", DomainAdaptationArgs, argv, __doc__, small=SMALL, full=FULL)
    out = Path(a.output)
    per_seed = []
    seeds = check_seeds(a.seeds)
    # with --folds K, seed i's test part is fold i mod K of every domain (K seeds test every row once)
    by_seed = {seed: targets(a, out, fold) for seed, fold in seed_folds(seeds, a.folds).items()}
    tgts = by_seed[seeds[0]]
    # two rounds: the baselines with the continued pre-training, then the fine-tunings that start from the latter
    first = {}
    for seed in seeds:
        for t in by_seed[seed]:
            first[t.name, seed, BASE] = finetune_run(a, out / f"{t.name}-base-seed{seed}", seed=seed, test=True,
                                                     **t.data)
            mlm_dir = out / f"{t.name}-mlm-seed{seed}"
            first[t.name, seed, "mlm"] = Run(adapt, mlm_dir, (a, t, mlm_dir, seed))
    first = run_grid(a, first)
    second = run_grid(a, {(t.name, seed): finetune_run(a, out / f"{t.name}-adapted-seed{seed}",
                                                       model=str(out / f"{t.name}-mlm-seed{seed}"), seed=seed,
                                                       test=True, **t.data) for seed in seeds for t in by_seed[seed]})
    for t in tgts:
        for seed in seeds:
            base, adapted = first[t.name, seed, BASE], second[t.name, seed]
            m = first[t.name, seed, "mlm"]["metrics"]
            per_seed.append({"domain": t.name, "seed": seed, BASE: score(base), CLAIMED: score(adapted),
                             "mlm_initial_eval_loss": m["initial_eval_loss"], "mlm_eval_loss": m["eval_loss"],
                             "mlm_tokens": m["tokens"]})
    domains = list(dict.fromkeys(r["domain"] for r in per_seed))
    rows = []
    for d in domains:
        runs = [r for r in per_seed if r["domain"] == d]
        rows.append({"domain": d, "seeds": len(runs), "mlm_eval_loss_before": fmt([r["mlm_initial_eval_loss"]
                                                                                    for r in runs], 3),
                     "mlm_eval_loss_after": fmt([r["mlm_eval_loss"] for r in runs], 3),
                     BASE: fmt([r[BASE] for r in runs]), CLAIMED: fmt([r[CLAIMED] for r in runs]),
                     "gain": fmt([r[CLAIMED] - r[BASE] for r in runs])})
    avg = {v: [sum(r[v] for r in per_seed if r["seed"] == s) / len(domains) for s in seeds]
           for v in (BASE, CLAIMED)}
    v = decide(avg)
    fig = scores_figure(avg, "test accuracy (average over domains)", f"{a.model}: with and without continued MLM")
    write_study(out, f"Study: domain-adaptive pre-training ({a.model})", rows, v,
                [(fig, "adaptation", "mean ± spread over seeds (dots: seeds)")],
                extra={"per_seed": per_seed, "average": avg, "model": a.model, "mlm_steps": a.mlm_steps,
                       "domains": domains},
                claim=CLAIM, budget=a.budget, seeds=seeds, validity=validity)
    return 0


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (``per_seed``: one row per domain and seed)."""
    from ptmlab.studies.common import above_domain_majority

    return above_domain_majority([r for r in record.get("per_seed") or [] if isinstance(r, dict)], (BASE, CLAIMED))
