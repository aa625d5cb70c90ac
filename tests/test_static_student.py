"""Static-embedding students (``--student static``): the table against hand computation on `tiny`, save and reload
with the same outputs (forward, ``static_logits``, ``embed``, the serving predictor), ``distill --student static`` end
to end (trained, reloaded, predicted; ``tune=0``; layer losses refused), bad inputs as one-line errors, and a real
check with minilm on a few hundred SST-2 rows."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.distill.static import (
    StaticOptions,
    embed,
    parse_options,
    sif_weights,
    static_logits,
    static_model,
    static_table,
)
from tests.conftest import GLUE, assert_clean_error, needs_glue, run_cli
from tests.synthetic import tiny_teacher, write_task

IDS = list(range(0, 3000))  # specials, [unusedN] and the first real tokens: a quick vocabulary on `tiny`


@pytest.fixture(scope="module")
def tiny():
    from ptmlab.models.zoo import load_model, load_tokenizer

    torch.manual_seed(0)
    return load_model("tiny", task_head=False).eval(), load_tokenizer("tiny")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("task"), n_train=64, n_dev=40)


def test_the_table_is_the_teachers_token_outputs_reduced_and_weighted(tiny):
    model, tok = tiny
    table = static_table(model, tok, StaticOptions(dim=8), ids=IDS)
    special = set(tok.all_special_ids)
    unused = {i for i, t in zip(IDS, tok.convert_ids_to_tokens(IDS), strict=True) if t.startswith("[unused")}
    kept = [i for i in IDS if i not in special and i not in unused]
    assert table.vectors.shape == (model.config.vocab_size, 8) and table.info["tokens"] == len(kept)
    assert table.counted[kept].eq(1).all() and table.counted.sum() == len(kept)
    assert table.vectors[sorted(special | unused)].abs().sum() == 0 and table.vectors[5000].abs().sum() == 0
    # by hand: [CLS] token [SEP] through the teacher, mean of the three outputs, PCA, SIF (Zipf by rank), one scale
    with torch.no_grad():
        ids = torch.tensor([[tok.cls_token_id, i, tok.sep_token_id] for i in kept])
        raw = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state.mean(1).double()
    centred = raw - raw.mean(0)
    _, vecs = torch.linalg.eigh(centred.T @ centred)
    proj = centred @ vecs[:, -8:].flip(1)
    proj = proj * torch.sign(proj.gather(0, proj.abs().argmax(0, keepdim=True)))
    proj = proj * sif_weights(len(kept), 1e-4).double()[:, None]
    proj = proj * 8**0.5 / proj.norm(dim=1).median()
    assert torch.allclose(table.vectors[kept].double(), proj, atol=1e-4)
    w = sif_weights(5, 1e-4)
    assert (w[1:] > w[:-1]).all()  # rarer (later) tokens weigh more
    flat = static_table(model, tok, StaticOptions(dim=8, weights="none"), ids=IDS)
    assert table.info["pca_variance_kept"] == flat.info["pca_variance_kept"] and flat.info["sif"] is None


def test_saved_student_reloads_with_the_same_outputs_everywhere(tiny, tmp_path):
    from ptmlab.models.loader import model_inputs, save_model
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.serve.predictor import Predictor

    model, tok = tiny
    student = static_model(static_table(model, tok, StaticOptions(dim=16), ids=IDS), model.config, 3,
                           label_names=["neg", "neu", "pos"]).eval()
    texts = ["the film was not bad at all", "a", "", "[unused7] [CLS]"]
    x = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        before = student(**model_inputs(student, dict(x))).logits
        # the pooled vector is the mean of the counted tokens' rows (specials and padding skipped)
        rows = tok(texts[0], add_special_tokens=False)["input_ids"]
        counted = [i for i in rows if student.bert.counted[i] > 0]
        mean = student.bert.embeddings.word_embeddings.weight[counted].mean(0)
        assert torch.allclose(before[0], student.classifier(mean), atol=1e-5)
    assert np.allclose(static_logits(student, tok, texts), before.numpy(), atol=1e-5)
    save_model(student, tok, tmp_path / "s")
    again, tok2 = load_model(str(tmp_path / "s")), load_tokenizer(str(tmp_path / "s"))
    mods = [m["kind"] for m in again.config.ptmlab_modifications]
    assert mods == ["static_student"] and again.config.ptmlab_rnn == "static"
    assert again.config.ptmlab_static["dim"] == 16 and again.config.id2label[2] == "pos"
    with torch.no_grad():
        after = again(**model_inputs(again, dict(tok2(texts, padding=True, return_tensors="pt")))).logits
    assert torch.equal(before, after)
    e = embed(again, tok2, texts)
    assert e.shape == (4, 16) and np.allclose(np.linalg.norm(e[:2], axis=1), 1) and not e[2].any()
    assert np.allclose(e, embed(student, tok, texts))
    served = Predictor(tmp_path / "s")  # what ptmlab serve loads: a tokenizer and a model answering logits
    assert served.info.labels == ["neg", "neu", "pos"]
    from ptmlab.export.run import check_format

    for fmt in ("transformers", "torch-int8"):  # both name the formats that work, not each other
        with pytest.raises(PtmlabError, match="use --format onnx or onnx-int8"):
            check_format(again, fmt)
    check_format(again, "onnx")


def test_distill_static_student_end_to_end(files, tmp_path_factory):
    from ptmlab.data.loaders import load_task
    from ptmlab.distill.config import DistillConfig
    from ptmlab.distill.matches import ModelInfo
    from ptmlab.distill.pipeline import build_matches, run_distill
    from ptmlab.distill.students import build_student
    from ptmlab.models.loader import save_model
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.predict import model_head, predict_split

    teacher = tiny_teacher(files, tmp_path_factory.mktemp("teacher") / "run")
    out = tmp_path_factory.mktemp("static") / "s"

    def cfg(o, **kw):
        return DistillConfig(**{**dict(teacher=teacher, task="synthetic", train_file=files["train"],
                                       dev_file=files["dev"], max_length=32, lr=1e-2, batch_size=16, seed=0,
                                       output=str(o), precision="fp32", epochs=6), **kw})

    s = run_distill(cfg(out, student="static:dim=16"))
    student = load_model(str(out))
    assert ModelInfo.of(student).rnn == "static" and s["trainable_params"] == 30522 * 16 + 16 * 2 + 2
    assert s["metrics"]["accuracy"] >= 0.8  # one keyword decides the label: a bag of token vectors learns it
    dev = load_task("synthetic", train_file=files["train"], dev_file=files["dev"]).splits["dev"]
    preds = predict_split(student, load_tokenizer(str(out)), dev, model_head(student), max_length=32)
    right = [p["label"] == s["labels"][g] for p, g in zip(preds, dev.label, strict=True)]
    assert sum(right) / len(right) == pytest.approx(s["metrics"]["accuracy"])  # the reloaded run, as predict runs it

    t = load_model(teacher)
    frozen = build_student("static:dim=16,tune=0", t, 2, False, ["neg", "pos"])  # the head alone learns
    frozen_dir = tmp_path_factory.mktemp("frozen")
    save_model(frozen, None, frozen_dir)
    again = load_model(str(frozen_dir))  # tune=0 is recorded with the modification: it stays frozen when reloaded
    assert [n for n, p in again.named_parameters() if p.requires_grad] == ["classifier.weight", "classifier.bias"]
    with pytest.raises(PtmlabError, match="use --losses soft_ce"):
        build_matches(cfg(out, losses=["hidden_mse"]), ModelInfo.of(frozen), ModelInfo.of(t))
    bad = tmp_path_factory.mktemp("bad2") / "s"
    assert_clean_error(run_cli("distill", "--teacher", teacher, "--student", "static:dim=999", "--task", "synthetic",
                               "--train-file", files["train"], "--dev-file", files["dev"], "--output", str(bad)),
                       "dim=999", "hidden size 64")


@pytest.mark.parametrize("spec, needle", [
    ("dim=-1", "positive PCA dimension"), ("weights=idf", "weights=zipf or weights=none"), ("sif=2", "(0, 1)"),
    ("tune=2", "tune=1"), ("layers=3", "is not one of"), ("dim=x", "dim must be a int"), ("dim", "is not one of")])
def test_bad_options_are_one_line_errors(spec, needle):
    with pytest.raises(PtmlabError, match=None) as e:
        parse_options(spec, f"static:{spec}")
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_bad_inputs_are_one_line_errors(tiny):
    from ptmlab.distill.students import build_student
    from ptmlab.models.zoo import load_model

    model, tok = tiny
    cases = [
        (lambda: static_table(model, tok, StaticOptions(dim=8), ids=[]), "vocabulary is empty"),
        (lambda: static_table(model, tok, StaticOptions(dim=8), ids=[0, 101, 102, 5]), "vocabulary is empty"),
        (lambda: static_table(model, tok, StaticOptions(dim=65)), "larger than the teacher's hidden size 64"),
        (lambda: static_table(model, tok, StaticOptions(dim=8), ids=[2000, 2001, 2002]), "vocabulary of 3 tokens"),
        (lambda: static_table(model, tok, StaticOptions(dim=8), ids=[10**6]), "outside the teacher's vocabulary"),
        (lambda: embed(model, tok, ["x"]), "not a static student"),
        (lambda: embed(static_model(static_table(model, tok, StaticOptions(dim=4), ids=IDS), model.config), tok,
                       "one text"), "list of texts"),
    ]
    rnn = build_student("bilstm:hidden=8", load_model("tiny"), 2, False, None)
    cases.append((lambda: build_student("static", rnn, 2, False, None, tokenizer=tok), "transformer teacher"))
    for fn, needle in cases:
        with pytest.raises(PtmlabError) as e:
            fn()
        assert needle in str(e.value) and "\n" not in str(e.value), (needle, str(e.value))


@needs_glue
@pytest.mark.slow
def test_minilm_static_student_beats_the_majority_class_on_sst2(tmp_path):
    """500 SST-2 rows: minilm's table over the tokens of those rows and 3,000 frequent ones (a short build), table
    and head trained on the rows; dev accuracy (872 sentences) clearly above the majority class."""
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.distill.static import distill_static
    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    cfg = FinetuneConfig(model=str(tmp_path / "static"), task="sst2", glue_dir=str(GLUE), max_train=500,
                         epochs=8, lr=1e-2, batch_size=32, max_length=64, seed=0, precision="fp32",
                         output=str(tmp_path / "run"), test=False)
    data = load_task_data(cfg)
    ids = {i for row in load_tokenizer("minilm")(data.splits["train"].text)["input_ids"] for i in row}
    student, _ = distill_static("minilm", output=str(tmp_path / "static"), ids=ids | set(range(2000, 5000)), dim=128)
    assert student.config.ptmlab_static["tokens"] < 5000
    s = run_finetune(cfg)
    gold = data.splits["dev"].label
    majority = max(gold.count(0), gold.count(1)) / len(gold)
    assert s["metrics"]["accuracy"] >= majority + 0.1, (s["metrics"], majority)  # 0.69 against 0.51 when written


@needs_glue
def test_the_benchmark_script_runs_on_tiny(tmp_path):
    import subprocess
    import sys

    from tests.conftest import ROOT

    out = tmp_path / "static_student.json"
    proc = subprocess.run([sys.executable, "benchmarks/static_student.py", "--model", "tiny", "--dim", "16",
                           "--train-rows", "100", "--max-dev", "64", "--epochs", "1", "--repeats", "1",
                           "--no-model2vec", "--output", str(out)], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["settings"]["train_rows"] == 100 and res["settings"]["sst2_dev"] == 64
    assert res["static_table"]["dim"] == 16 and res["model2vec"] == {"skipped": "left out (--no-model2vec)"}
    assert set(res["targets"]) == {"speed_50x", "sst2_85pct"} and "target speed_50x" in proc.stdout
    rates = res["speed"]["sentences_per_second"]
    assert res["speed"]["speedup_served"] == pytest.approx(rates["static (forward, as served)"] / rates["tiny"],
                                                           abs=0.06)  # written to one decimal
