"""Multilingual embedding distillation, retrieval and the sentence-transformers layout, on the tiny model."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from tests.conftest import SHARED, assert_clean_error, run_cli

EN = ["a dog runs in the park", "two men play football", "a woman reads a book", "the child eats an apple",
      "a cat sleeps on the sofa", "people walk in the rain", "a man rides a bike", "girls sing a song",
      "the bird flies high", "a boy swims in the lake", "an old man cooks soup", "the team wins the game"]
DE = ["ein hund rennt im park", "zwei manner spielen fussball", "eine frau liest ein buch", "das kind isst einen apfel",
      "eine katze schlaft auf dem sofa", "leute gehen im regen", "ein mann fahrt rad", "madchen singen ein lied",
      "der vogel fliegt hoch", "ein junge schwimmt im see", "ein alter mann kocht suppe", "das team gewinnt das spiel"]


@pytest.fixture()
def pairs(tmp_path):
    en, de = tmp_path / "train.en", tmp_path / "train.de.gz"
    en.write_text("\n".join(EN * 3) + "\n")
    with gzip.open(de, "wt", encoding="utf-8") as f:
        f.write("\n".join(DE * 3) + "\n")
    return en, de


def test_retrieval_accuracy_counts_nearest_neighbours():
    from ptmlab.distill.retrieval import retrieval_accuracy

    src = np.eye(4, dtype=np.float32)
    tgt = np.eye(4, dtype=np.float32)[[0, 1, 3, 2]]  # items 2 and 3 swapped on the target side
    assert retrieval_accuracy(src, tgt) == (0.5, 0.5)
    assert retrieval_accuracy(src, src) == (1.0, 1.0)


def test_pooling_modes():
    import torch

    from ptmlab.train.sentence import pool

    states = torch.tensor([[[1.0, 0.0], [3.0, 2.0], [100.0, 100.0]]])
    mask = torch.tensor([[1, 1, 0]])
    assert pool(states, mask, "mean").tolist() == [[2.0, 1.0]]
    assert pool(states, mask, "cls").tolist() == [[1.0, 0.0]]
    assert pool(states, mask, "max").tolist() == [[3.0, 2.0]]


def test_minilm_pooling_read_from_its_sentence_transformers_config():
    from pathlib import Path

    from ptmlab.models.zoo import resolve
    from ptmlab.train.sentence import read_pooling

    assert read_pooling(Path(resolve("minilm")[0])) == ("mean", True, 256)


def test_distill_embeddings_end_to_end(pairs, tmp_path):
    en, de = pairs
    out = tmp_path / "student"
    p = run_cli("distill-embeddings", "--teacher", "tiny", "--pairs", str(en), str(de), "--output", str(out),
                "--epochs", "3", "--batch-size", "8", "--lr", "1e-3", "--dev-pairs", "3")
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["train_examples"] == 33 and s["eval_examples"] == 3
    losses = [r["loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    assert losses[-1] < losses[0]  # the student moves towards the teacher's vectors
    for f in ("modules.json", "1_Pooling/config.json", "sentence_bert_config.json", "model.safetensors",
              "tokenizer.json", "report.html"):
        assert (out / f).is_file(), f

    # sentence-transformers itself loads the result and encodes exactly as ptmlab does
    st = pytest.importorskip("sentence_transformers")
    from ptmlab.train.sentence import encode_texts, load_sentence_model

    ours, tok = load_sentence_model(str(out))
    theirs = st.SentenceTransformer(str(out), device="cpu").encode(EN[:4])
    np.testing.assert_allclose(theirs, encode_texts(ours, tok, EN[:4]), atol=1e-5)

    # and ptmlab's retrieval command accepts it
    r = run_cli("retrieval", str(out), "--pairs", str(en), str(de), "--max-pairs", "12", "--output",
                str(tmp_path / "r"))
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "r" / "retrieval.json").read_text())["results"][0]
    assert res["pairs"] == 12 and 0 <= res["src_to_tgt"] <= 100


def test_distillation_pulls_translations_together(pairs):
    """After distillation the target sentence's vector is closer to the teacher's source vector than before."""
    import tempfile

    from ptmlab.core.config import build_config
    from ptmlab.core.seed import set_seed
    from ptmlab.distill.multilingual import EmbedDistillConfig, run_embedding_distill
    from ptmlab.train.sentence import encode_texts, load_sentence_model

    en, de = pairs
    with tempfile.TemporaryDirectory() as d:
        cfg = build_config(EmbedDistillConfig, dict(teacher="tiny", pairs=[str(en), str(de)], output=d, epochs=6,
                                                    batch_size=8, lr=2e-3, dev_pairs=3, seed=1))
        set_seed(1)
        teacher, t_tok = load_sentence_model("tiny")  # the random teacher the run builds after seeding; the
        t_src = encode_texts(teacher, t_tok, EN)  # student starts as its copy
        before = float((encode_texts(teacher, t_tok, DE) * t_src).sum(1).mean())
        run_embedding_distill(cfg)
        student, tok = load_sentence_model(d)
        after = float((encode_texts(student, tok, DE) * t_src).sum(1).mean())
    assert after > before + 0.05, (before, after)


@pytest.mark.parametrize("case", ["misaligned", "empty", "odd"])
def test_bad_parallel_input_is_one_line_and_writes_nothing(tmp_path, case):
    en, de = tmp_path / "a.en", tmp_path / "a.de"
    en.write_text("one\ntwo\nthree\n")
    de.write_text({"misaligned": "eins\nzwei\n", "empty": "", "odd": "eins\nzwei\ndrei\n"}[case])
    out = tmp_path / "out"
    args = ["--pairs", str(en), str(de)] if case != "odd" else ["--pairs", str(en), str(de), "--pairs", str(en)]
    p = run_cli("distill-embeddings", "--teacher", "tiny", *args, "--output", str(out))
    if case == "odd":  # argparse refuses a --pairs with one file
        assert p.returncode == 2 and "Traceback" not in p.stderr
    else:
        assert_clean_error(p, str(de))
        assert "misaligned" in p.stderr or "empty" in p.stderr
    assert not out.exists()


@pytest.mark.skipif(not (SHARED / "parallel" / "tatoeba").is_dir(), reason="shared parallel data is absent")
def test_retrieval_on_tatoeba_runs_for_a_zoo_model(tmp_path):
    t = SHARED / "parallel" / "tatoeba"
    p = run_cli("retrieval", "tiny", "--pairs", str(t / "tatoeba.deu-eng.eng"), str(t / "tatoeba.deu-eng.deu"),
                "--max-pairs", "50", "--output", str(tmp_path / "r"))
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads((tmp_path / "r" / "retrieval.json").read_text())["results"][0]
    assert r["pairs"] == 50 and set(r) >= {"src_to_tgt", "tgt_to_src"}


@pytest.mark.skipif(not (SHARED / "parallel" / "multi30k").is_dir(), reason="shared parallel data is absent")
def test_multilingual_study_small(tmp_path):
    out = tmp_path / "study"
    p = run_cli("study", "multilingual-distillation", "--budget", "small", "--output", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads((out / "results.json").read_text())
    models = [row["model"] for row in r["rows"]]
    assert models.count("teacher") == 6 and models.count("copy") == 6  # 6 sets, 1 seed (--budget small)
    parts = {row["set"]: row["part"] for row in r["rows"] if row["model"] == "teacher"}
    assert [k for k, v in parts.items() if v == "report"] == ["newstest:de:test:en->newstest:de:test",
                                                              "newstest:fr:test:en->newstest:fr:test"]
    assert r["rule"]["outcome"] == "inconclusive" and r["judged_student"] == "copy"  # one seed cannot decide
    assert r["outcome"] == "cannot test"  # nor show the student's English quality above 0 at the seed level
    from ptmlab.studies.evidence import unpack_bits
    from ptmlab.studies.multilingual import hit_key

    hits = r["evidence"]["hits"]  # each reported set's per-sentence hits, teacher and student, both directions
    assert len(hits) == 4 and set(hits[hit_key("teacher", "-", "newstest:de:test:en->newstest:de:test")]) == \
        {"src_to_tgt", "tgt_to_src"}
    for row in r["rows"]:
        if row["part"] == "report":
            kept = hits[hit_key(row["model"], row["seed"], row["set"])]
            assert round(100 * unpack_bits(kept["src_to_tgt"]).mean(), 2) == row["src_to_tgt"]


def test_gain_interval_carries_the_sentences_noise():
    """With per-sentence hits the gain's interval resamples seeds, then sentences: three seeds that agree exactly on
    their accuracy still get an interval as wide as the sentences make it (a t over seeds would have none)."""
    import numpy as np

    from ptmlab.studies.evidence import pack_bits
    from ptmlab.studies.multilingual import decide, hit_key

    rng = np.random.default_rng(0)
    n, sets = 200, ["newstest:de:test:en->newstest:de:test", "newstest:fr:test:en->newstest:fr:test"]
    teacher = (rng.random(n) < 0.3).astype(float)
    student = [np.roll((rng.random(n) < 0.6).astype(float), 0) for _ in range(3)]
    student = [student[0]] * 3  # identical seeds: a t over seeds has zero width
    rows, hits = [], {}
    for name in sets:
        rows.append({"model": "teacher", "seed": "-", "set": name, "part": "report", "sts_spearman": 0.8,
                     "src_to_tgt": round(100 * teacher.mean(), 2), "tgt_to_src": round(100 * teacher.mean(), 2)})
        hits[hit_key("teacher", "-", name)] = {d: pack_bits(teacher) for d in ("src_to_tgt", "tgt_to_src")}
        for seed in (0, 1, 2):
            rows.append({"model": "copy", "seed": seed, "set": name, "part": "report", "sts_spearman": 0.8,
                         "src_to_tgt": round(100 * student[seed].mean(), 2),
                         "tgt_to_src": round(100 * student[seed].mean(), 2)})
            hits[hit_key("copy", seed, name)] = {d: pack_bits(student[seed]) for d in ("src_to_tgt", "tgt_to_src")}
    with_hits, seeds_only = decide(rows, ["copy"], hits), decide(rows, ["copy"])
    a, b = with_hits.parts[0].estimate, seeds_only.parts[0].estimate
    assert abs(a.value - b.value) < 0.01  # the same gain in points
    assert b.high - b.low < 1e-9 < a.high - a.low  # the sentences' noise is only in the interval from the hits
    assert "then 200 examples" in a.method


# the verdict rule on synthetic numbers (every outcome): tests/test_study_rules_b.py


@pytest.mark.skipif(not (SHARED / "parallel" / "multi30k").is_dir(), reason="shared parallel data is absent")
def test_multilingual_study_small_twice_gives_the_same_numbers(tmp_path):
    """The small budget's tiny teacher has random weights: it is built once, seeded from the study's seed, and
    saved, so the teacher scored, the teacher distilled from and the copy student are one model, and two runs
    give the same table (each run built its own random teacher before)."""
    from ptmlab.studies import STUDIES, load_all

    load_all()
    tables = []
    for run in ("a", "b"):
        assert STUDIES.get("multilingual-distillation")(["--budget", "small", "--output", str(tmp_path / run)]) == 0
        tables.append(json.loads((tmp_path / run / "results.json").read_text())["rows"])
    assert tables[0] == tables[1]
    assert (tmp_path / "a" / "teacher" / "config.json").is_file()
    teacher = [r["src_to_tgt"] for r in tables[0] if r["model"] == "teacher"]
    assert len(teacher) == 6 and any(x > 0 for x in teacher)
