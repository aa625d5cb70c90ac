"""``ptmlab pretrain`` end to end: the engine on the one loop (budgets, FLOP/token accounting, eval loss, resume),
every objective for a few steps, loading the result for fine-tuning, and bad input."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch

from ptmlab.core.config import build_config
from ptmlab.pretrain.config import PretrainConfig
from ptmlab.pretrain.objectives import OBJECTIVES
from tests.conftest import SHARED, assert_clean_error, run_cli
from tests.synthetic import write_task

SUBJECTS = ["the cat", "a dog", "my friend", "the teacher", "her brother", "our neighbour"]
VERBS = ["sees", "likes", "follows", "calls", "helps", "watches"]
OBJECTS = ["the ball.", "a bird.", "the river.", "his car.", "the garden.", "a small house."]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Patterned English sentences in paragraphs (documents), so a tiny model can learn something in few steps."""
    d = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    for f in range(3):
        docs = []
        for _ in range(60):
            docs.append(" ".join(f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}"
                                 for _ in range(rng.randint(3, 8))))
        (d / f"part{f}.txt").write_text("\n\n".join(docs) + "\n")
    return d


def _cfg(corpus, out, **kw):
    values = dict(files=[str(corpus)], output=str(out), layers=1, hidden=32, heads=2, ffn=64, block_size=32,
                  batch_size=8, max_steps=3, eval_steps=0, eval_blocks=16, lr=1e-3, seed=0, precision="fp32",
                  logging_steps=1)
    values.update(kw)
    return build_config(PretrainConfig, values, source="test")


def test_mlm_from_scratch_learns_accounts_compute_and_finetunes(corpus, tmp_path):
    out = tmp_path / "P"
    r = run_cli("pretrain", "--arch", "bert", "--layers", "2", "--hidden", "64", "--heads", "2", "--ffn", "128",
                "--tokenizer", "minilm", "--objective", "mlm", "--files", str(corpus), "--block-size", "32",
                "--batch-size", "16", "--max-steps", "60", "--eval-steps", "30", "--lr", "2e-3", "--precision",
                "fp32", "--output", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    m = s["metrics"]
    assert m["eval_loss"] < m["initial_eval_loss"] - 2.0, m  # ~10.3 (ln 30522) at random init
    assert m["perplexity"] == pytest.approx(math.exp(m["eval_loss"]), rel=1e-3)
    assert s["steps"] == 60 and m["tokens"] == s["train_examples"] * s["corpus"]["tokens_per_block"]
    assert s["train_examples"] > 50 * 16  # partial batches only at epoch ends
    assert m["flops"] == pytest.approx(m["tokens"] * s["flops_per_token"])
    assert m["tokens_per_second"] > 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 0 and rows[0]["eval"]["eval_loss"] == m["initial_eval_loss"]
    assert [r["step"] for r in rows if "eval" in r] == [0, 30, 60]
    assert (out / "report.html").is_file() and not (out / "checkpoint").exists()
    files = write_task(tmp_path / "task", 80, 40)
    r = run_cli("finetune", "--model", str(out), "--task", "synthetic", "--train-file", files["train"],
                "--dev-file", files["dev"], "--epochs", "1", "--max-length", "32", "--output", str(tmp_path / "F"))
    assert r.returncode == 0, r.stderr[-3000:]
    f = json.loads((tmp_path / "F" / "summary.json").read_text())
    assert f["params"] < s["params"]  # the MLM head is dropped, a 2-way classifier added


@pytest.mark.parametrize("objective", sorted(OBJECTIVES.names()))
def test_every_objective_runs_and_writes_its_metrics(objective, corpus, tmp_path):
    from ptmlab.pretrain.run import run_pretrain

    s = run_pretrain(_cfg(corpus, tmp_path / objective, objective=objective, max_steps=2))
    m = s["metrics"]
    for key in ("initial_eval_loss", "eval_loss", "perplexity", "tokens", "flops", "tokens_per_second"):
        assert math.isfinite(m[key]), (key, m)
    assert s["steps"] == 2 and m["tokens"] > 0 and m["flops"] > 0
    assert (tmp_path / objective / "model.safetensors").is_file()


def test_run_records_the_unigram_cross_entropy_of_its_held_out_blocks(corpus, tmp_path):
    """Every pre-training records the loss a frequency-only model gets on the blocks its eval loss reads (the
    training split's token counts, add-one smoothed, special tokens and separators left out), recomputed here by
    hand from the prepared data; the studies compare each run's eval loss with it."""
    from collections import Counter

    from ptmlab.pretrain.corpus import token_counts, unigram_cross_entropy
    from ptmlab.pretrain.run import prepare, run_pretrain

    cfg = _cfg(corpus, tmp_path / "u", objective="mlm", max_steps=1, eval_blocks=5)
    s = run_pretrain(cfg)
    p = prepare(cfg)
    special = set(p.tokenizer.all_special_ids) | {p.objective.separator()}
    train = Counter(int(t) for i in range(p.train.blocks.corpus.n_docs) for t in p.train.blocks.corpus.document(i)
                    if int(t) not in special)
    held = [int(t) for i in range(5) for t in p.valid.blocks[i] if int(t) not in special]
    total = sum(train.values()) + len(p.tokenizer)
    expected = sum(-math.log((train[t] + 1) / total) for t in held) / len(held)
    assert s["corpus"]["unigram_entropy"] == pytest.approx(expected, abs=1e-5)
    assert 0 < expected < math.log(len(p.tokenizer))  # a few common words: far below a uniform guess
    # the counts read in pieces equal the counts read at once
    counts = token_counts(p.train.blocks.corpus, len(p.tokenizer), chunk_tokens=7)
    assert all(counts[t] == c for t, c in train.items())
    # constructed numbers: counts (3, 1, 0) over 3 ids and id 0 held out -> -log(4 / 7)
    assert unigram_cross_entropy([3, 1, 0], [0]) == pytest.approx(-math.log(4 / 7))
    assert unigram_cross_entropy([3, 1, 0, 5], [0, 3], skip_ids=[3]) == pytest.approx(-math.log(4 / 8))
    with pytest.raises(ValueError):
        unigram_cross_entropy([1, 1], [1], skip_ids=[1])


def test_equal_flop_budgets_give_equal_compute(corpus, tmp_path):
    from ptmlab.pretrain.run import run_pretrain

    budget = 2e9
    a = run_pretrain(_cfg(corpus, tmp_path / "a", objective="mlm", max_steps=0, max_flops=budget))
    b = run_pretrain(_cfg(corpus, tmp_path / "b", objective="electra", max_steps=0, max_flops=budget))
    for s in (a, b):
        assert s["metrics"]["flops"] <= budget
        assert s["metrics"]["flops"] >= 0.95 * budget  # within 5%: a partial step and epoch-end batches short
    assert b["steps"] < a["steps"]  # ELECTRA's generator makes each step dearer


def test_killed_pretraining_resumes_to_the_same_weights(corpus, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from ptmlab.core.errors import PtmlabError
    from ptmlab.core.rundir import RunDir
    from ptmlab.pretrain.run import run_pretrain
    from ptmlab.train.loop import Trainer

    kw = dict(objective="mlm", max_steps=6, save_steps=3, masking="dynamic")
    run_pretrain(_cfg(corpus, tmp_path / "whole", **kw))
    original = Trainer._train_step

    def dies_at_step_4(self, batch, epoch=0):
        if self.state.step == 4:
            raise KeyboardInterrupt
        return original(self, batch, epoch)

    monkeypatch.setattr(Trainer, "_train_step", dies_at_step_4)
    with pytest.raises(KeyboardInterrupt):
        run_pretrain(_cfg(corpus, tmp_path / "killed", **kw))
    monkeypatch.setattr(Trainer, "_train_step", original)
    cfg = RunDir.resume_config(tmp_path / "killed", PretrainConfig, "pretrain")
    s = run_pretrain(cfg, resume=True)
    a, b = load_file(tmp_path / "whole" / "model.safetensors"), load_file(tmp_path / "killed" / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4)
    assert s["metrics"]["initial_eval_loss"] == json.loads((tmp_path / "whole" / "summary.json").read_text())[
        "metrics"]["initial_eval_loss"]
    with pytest.raises(PtmlabError, match="no checkpoint"):
        run_pretrain(cfg, resume=True)  # finished: nothing left to resume


@pytest.mark.slow
def test_continued_mlm_lowers_minilm_loss_on_unseen_kind_of_text(tmp_path):
    shakespeare = SHARED / "text" / "tinyshakespeare.txt"
    if not shakespeare.is_file():
        pytest.skip(f"shared text not found at {shakespeare}")
    from ptmlab.pretrain.run import run_pretrain

    text = shakespeare.read_text()[:120_000]
    (tmp_path / "plays.txt").write_text(text)
    s = run_pretrain(build_config(PretrainConfig, dict(
        files=[str(tmp_path / "plays.txt")], model="minilm", objective="mlm", output=str(tmp_path / "P"),
        block_size=64, batch_size=16, max_steps=25, eval_steps=0, eval_blocks=48, lr=1e-4, seed=0,
        valid_fraction=0.1), source="test"))
    assert s["metrics"]["eval_loss"] < s["metrics"]["initial_eval_loss"] - 0.3, s["metrics"]


@pytest.mark.parametrize("args,needle", [
    (["--files", "EMPTY", "--objective", "mlm"], "tokens"),
    (["--model", "tiny", "--block-size", "1024"], "positions"),
    (["--objective", "clm", "--arch", "bert"], "decoder"),
    (["--objective", "t5", "--arch", "bert"], "encoder-decoder"),
    (["--valid-fraction", "1.5"], "valid-fraction"),
    (["--objective", "mlm", "--tokenizer", "NOMASK"], "mask token"),
    (["--objective", "nonsense"], "unknown objective"),
    (["--objective", "mlm", "--noise-density", "0.3"], "noise_density"),
])
def test_bad_input_is_one_line_and_writes_nothing(args, needle, corpus, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    nomask = tmp_path / "nomask"
    if "NOMASK" in args:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast

        tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.train_from_iterator(["the cat sees a dog"] * 10, trainers.WordLevelTrainer(special_tokens=["<unk>",
                                                                                                       "<pad>"]))
        PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>").save_pretrained(nomask)
    args = [str(empty) if a == "EMPTY" else str(nomask) if a == "NOMASK" else a for a in args]
    if "--files" not in args:
        args = ["--files", str(corpus), *args]
    out = tmp_path / "out"
    r = run_cli("pretrain", *args, "--max-steps", "1", "--output", str(out))
    assert_clean_error(r, needle)
    assert not out.exists()
