"""The pre-training studies: their verdict rules on synthetic numbers (every outcome), the shared pieces (mean ±
spread, FLOP spread, reuse and resume of a variant), and each study end to end with ``--budget small``."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from ptmlab.core.errors import PtmlabError
from ptmlab.studies.pretrain_common import (
    check_seeds,
    flop_spread,
    mean_spread,
    numbers,
    summary_rows,
)
from ptmlab.studies.verdict import CANNOT_TEST, INCONCLUSIVE


def one_seed_cannot_test(r: dict) -> bool:
    """A --budget small run has one seed: no seed-level interval can show a fine-tuned model above chance, so the
    study cannot test its claim, and its rule alone says inconclusive."""
    unmet = [c for c in r["validity"] if not c["met"]]
    return r["outcome"] == CANNOT_TEST and r["rule"]["outcome"] == INCONCLUSIVE and unmet and all(
        c["value"] is None for c in unmet if "trivial predictor" in c["condition"])


# ------------------------------------------------------------------------------------------------ numbers
def test_mean_spread_covers_every_seed_and_flop_spread_is_relative():
    m, s = mean_spread([0.70, 0.80, 0.72])
    assert m == pytest.approx(0.74) and s == pytest.approx(0.06)
    assert all(m - s - 1e-12 <= v <= m + s + 1e-12 for v in (0.70, 0.80, 0.72))
    assert mean_spread([0.6, 0.7]) == (pytest.approx(0.65), pytest.approx(0.05))  # two seeds: half the range
    assert flop_spread([100.0, 96.0, 99.0]) == pytest.approx(0.04)
    assert flop_spread([5.0, 5.0]) == 0.0


def test_option_lists_become_numbers_or_one_line_errors():
    assert numbers(["0.15", "3"], "x") == [0.15, 3.0]
    assert check_seeds(["0", "7"]) == [0, 7]
    with pytest.raises(PtmlabError, match="--seeds entry 'a' is not an integer"):
        check_seeds(["0", "a"])
    with pytest.raises(PtmlabError, match="distinct"):
        check_seeds(["1", "1"])


def test_summary_rows_average_tasks_per_seed():
    per_seed = [{"v": "a", "seed": 0, "t1": 0.6, "t2": 0.8}, {"v": "a", "seed": 1, "t1": 0.7, "t2": 0.7},
                {"v": "b", "seed": 0, "t1": 0.5, "t2": 0.5}, {"v": "b", "seed": 1, "t1": 0.5, "t2": 0.6}]
    rows, avg = summary_rows(per_seed, "v", ["t1", "t2"])
    assert avg == {"a": pytest.approx([0.7, 0.7]), "b": pytest.approx([0.5, 0.55])}
    assert [r["v"] for r in rows] == ["a", "b"]
    assert rows[0]["t1"] == "0.6500 ± 0.0500" and rows[1]["average"] == "0.5250 ± 0.0250"


# the verdict rules on synthetic numbers (every outcome): tests/test_study_rules_b.py


# ------------------------------------------------------------------------------------------------ variants
@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    words = "the cat dog sees likes a small river garden house bird friend follows calls".split()
    docs = [" ".join(rng.choice(words) for _ in range(rng.randint(20, 60))) + "." for _ in range(150)]
    (d / "text.txt").write_text("\n\n".join(docs) + "\n")
    return d


def test_a_variant_is_reused_when_finished_and_resumed_when_killed(corpus, tmp_path, monkeypatch):
    from ptmlab.studies.common import parse_study_args
    from ptmlab.studies.pretrain_common import PretrainStudyArgs, pretrain_config, pretrain_variant
    from ptmlab.train.loop import Trainer

    a = parse_study_args("t", PretrainStudyArgs, ["--files", str(corpus), "--size", "tiny", "--layers", "1",
                                                  "--hidden", "32", "--heads", "2", "--ffn", "64", "--block-size",
                                                  "32", "--pretrain-batch-size", "8", "--eval-blocks", "8"])
    cfg = pretrain_config(a, tmp_path / "v", 0, objective="mlm", max_flops=0.0, max_steps=6, save_steps=2)
    original = Trainer._train_step

    def dies_at_step_4(self, batch, epoch=0):
        if self.state.step == 4:
            raise KeyboardInterrupt
        return original(self, batch, epoch)

    monkeypatch.setattr(Trainer, "_train_step", dies_at_step_4)
    with pytest.raises(KeyboardInterrupt):
        pretrain_variant(cfg)
    monkeypatch.setattr(Trainer, "_train_step", original)
    assert (tmp_path / "v" / "checkpoint").is_dir() and not (tmp_path / "v" / "summary.json").exists()
    s = pretrain_variant(cfg)  # resumed from step 4
    assert s["steps"] == 6
    resumed_rows = [json.loads(x) for x in (tmp_path / "v" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in resumed_rows if "loss" in r] == sorted({r["step"] for r in resumed_rows if "loss" in r})
    stamp = (tmp_path / "v" / "summary.json").stat().st_mtime_ns
    assert pretrain_variant(cfg) == s  # finished: reused, not rerun
    assert (tmp_path / "v" / "summary.json").stat().st_mtime_ns == stamp


def test_tokenizers_downstream_trains_the_same_tokenizers_twice(corpus, tmp_path):
    """Two runs of the study on the same text pre-train with the same tokenizers, ids included (the tokenizers
    library's WordPiece and Unigram trainers left parts of them to hash-map order)."""
    from ptmlab.studies.common import parse_study_args
    from ptmlab.studies.tokenizers_downstream import TokenizersDownstreamArgs, train_tokenizers

    a = parse_study_args("tokenizers-downstream", TokenizersDownstreamArgs,
                         ["--files", str(corpus), "--vocab-size", "120"])
    first, second = train_tokenizers(a, tmp_path / "a"), train_tokenizers(a, tmp_path / "b")
    assert set(first) == {"bpe", "wordpiece", "unigram"}
    for t in first:
        assert (first[t] / "tokenizer.json").read_bytes() == (second[t] / "tokenizer.json").read_bytes(), t



def test_tokenizers_downstream_refuses_tokenizers_trained_at_another_size(corpus, tmp_path):
    """A rerun in the same folder at another vocabulary size (another --budget) is a one-line error naming the
    difference, not a silent reuse of the smaller tokenizers; the same settings reuse them untouched."""
    from ptmlab.core.errors import PtmlabError
    from ptmlab.studies.common import parse_study_args
    from ptmlab.studies.tokenizers_downstream import TokenizersDownstreamArgs, train_tokenizers

    def args(vocab):
        return parse_study_args("tokenizers-downstream", TokenizersDownstreamArgs,
                                ["--files", str(corpus), "--vocab-size", str(vocab)])

    paths = train_tokenizers(args(120), tmp_path)
    stamp = (paths["bpe"] / "tokenizer.json").stat().st_mtime_ns
    assert train_tokenizers(args(120), tmp_path) == paths
    assert (paths["bpe"] / "tokenizer.json").stat().st_mtime_ns == stamp
    with pytest.raises(PtmlabError, match="vocab_size 120 there, 150 now"):
        train_tokenizers(args(150), tmp_path)


# ------------------------------------------------------------------------------------------------ end to end
def _run_study(name: str, out: Path, *extra: str) -> dict:
    from ptmlab.studies import load_all

    rc = load_all().get(name)(["--budget", "small", "--output", str(out), *extra])
    assert rc == 0
    assert (out / "report.html").is_file()
    return json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_objectives_small_has_five_objectives_equal_flops_one_seed(tmp_path):
    r = _run_study("objectives", tmp_path / "s")
    rows = r["rows"]
    assert len(rows) >= 5 and {"electra", "mlm", "clm"} <= {row["objective"] for row in rows}
    assert all(row["seeds"] == 1 for row in rows)  # --budget small keeps one seed: inconclusive by construction
    flops = [p["flops"] for p in r["per_seed"]]
    assert max(flops) <= r["max_flops"] and r["flop_spread"] == pytest.approx(flop_spread(flops))
    assert r["flop_spread"] <= 0.05
    assert one_seed_cannot_test(r) and r["verdict"].startswith(r["outcome"])
    assert r["claim"]["study"] == "objectives" and r["run"]["seeds"] == [0] and r["run"]["budget"] == "small"
    electra = [p for p in r["per_seed"] if p["objective"] == "electra"]
    mlm = [p for p in r["per_seed"] if p["objective"] == "mlm"]
    assert electra[0]["steps"] < mlm[0]["steps"]  # the generator makes an ELECTRA step dearer
    # each model's eval loss and its held-out text's unigram cross-entropy are recorded, and the condition is
    # the largest ratio of a token-predicting objective's (ELECTRA's discriminator loss left out)
    assert all(p["eval_loss"] > 0 and p["unigram_entropy"] > 0 for p in r["per_seed"])
    unigram = next(c for c in r["validity"] if "unigram" in c["condition"])
    assert unigram["value"] == pytest.approx(max(p["eval_loss"] / p["unigram_entropy"] for p in r["per_seed"]
                                                 if p["objective"] != "electra"))


@pytest.mark.slow
def test_span_corruption_small_grid(tmp_path):
    r = _run_study("span-corruption", tmp_path / "s")
    cells = {row["cell"] for row in r["rows"]}
    assert cells == {"0.15/1", "0.15/3", "0.5/1", "0.5/3"}
    assert one_seed_cannot_test(r)
    tokens = [p["tokens"] for p in r["per_seed"]]
    assert max(tokens) / min(tokens) < 1.2  # equal FLOPs: equal text, whatever the corruption


@pytest.mark.slow
def test_domain_adaptation_small(tmp_path):
    r = _run_study("domain-adaptation", tmp_path / "s")
    assert one_seed_cannot_test(r) and len(r["per_seed"]) >= 1
    for p in r["per_seed"]:
        assert 0 <= p["base"] <= 1 and 0 <= p["adapted"] <= 1
        assert p["mlm_tokens"] > 0


@pytest.mark.slow
def test_tokenizers_downstream_small_equal_text(tmp_path):
    r = _run_study("tokenizers-downstream", tmp_path / "s")
    assert {row["tokenizer"] for row in r["rows"]} == {"bpe", "wordpiece", "unigram"}
    assert one_seed_cannot_test(r)
    for p in r["per_seed"]:  # every model reads the same share of the text: tokens follow each tokenizer
        assert p["tokens"] == pytest.approx(0.02 * p["train_corpus_tokens"], rel=0.25)
    for t in ("bpe", "wordpiece", "unigram"):
        info = json.loads((tmp_path / "s" / "tokenizers" / t / "train_info.json").read_text())
        assert info["type"] == t and info["vocab_size"] <= 1000


def test_bad_study_options_are_one_line_errors(tmp_path):
    from tests.conftest import assert_clean_error, run_cli

    assert_clean_error(run_cli("study", "objectives", "--objectives", "mlm,clm", "--output", str(tmp_path / "o")),
                       "electra")
    assert_clean_error(run_cli("study", "span-corruption", "--noise-densities", "0.15,1.5", "--output",
                               str(tmp_path / "o")), "1.5")
    assert not (tmp_path / "o").exists()
