"""``--strategy setfit`` (few-shot: contrastive pairs, then the head on the frozen mean-pooled encoder),
``--max-train-per-class`` and the ``mean_pooling`` modification."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ptmlab.core.errors import PtmlabError
from tests.conftest import GLUE, assert_clean_error, run_cli
from tests.synthetic import write_task

FAST = ["--setfit-pairs", "32", "--max-steps", "4", "--max-length", "32", "--no-test"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("setfit-task"), n_train=60, n_dev=20)


def _cfg(files, **kw):
    from ptmlab.train.args import FinetuneConfig

    return FinetuneConfig(model="tiny", task="t", train_file=files["train"], dev_file=files["dev"], **kw)


# ------------------------------------------------------------------------------------------ --max-train-per-class
def test_max_train_per_class_is_stratified_seeded_and_checked(files):
    from ptmlab.data.taskdata import label_names, load_task_data

    data = load_task_data(_cfg(files, max_train_per_class=5, seed=3))
    labels = data.splits["train"].label
    assert sorted(labels) == [0] * 5 + [1] * 5
    again = load_task_data(_cfg(files, max_train_per_class=5, seed=3)).splits["train"].text
    other = load_task_data(_cfg(files, max_train_per_class=5, seed=4)).splits["train"].text
    assert again == data.splits["train"].text and other != again
    full = load_task_data(_cfg(files))
    counts = [full.splits["train"].label.count(y) for y in range(2)]
    k = max(counts) + 1  # class 0 ('neg') is the first found short
    with pytest.raises(PtmlabError) as e:
        load_task_data(_cfg(files, max_train_per_class=k))
    assert str(e.value) == (f"--max-train-per-class {k}: class '{label_names(full)[0]}' has {counts[0]} training "
                            f"examples: use --max-train-per-class {counts[0]} or less, or add examples of that class")


# ------------------------------------------------------------------------------------------ pairs and their loss
def test_pairs_are_balanced_seeded_and_correct():
    from ptmlab.train.setfit import default_pairs, draw_pairs

    labels = [0, 0, 0, 1, 1, 2, 2, 2, 2]
    pairs = draw_pairs(labels, 300, seed=1)
    assert len(pairs) == 300 and pairs == draw_pairs(labels, 300, seed=1) and pairs != draw_pairs(labels, 300, 2)
    pos = [(a, b) for a, b, t in pairs if t == 1.0]
    neg = [(a, b) for a, b, t in pairs if t == 0.0]
    assert len(pos) == len(neg) == 150
    assert all(a != b and labels[a] == labels[b] for a, b in pos)
    assert all(labels[a] != labels[b] for a, b in neg)
    assert {labels[a] for a, _ in pos} == {0, 1, 2}  # every class anchors some positive pair
    assert default_pairs(16) == 640 and default_pairs(1000) == 5000


def test_contrastive_phase_pulls_classes_apart(files, tmp_path):
    """The pair phase through the training loop: same-class vectors end closer than different-class ones."""
    import torch.nn.functional as F

    from ptmlab.core.rundir import RunDir
    from ptmlab.data.batching import collate
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.models.mean_pooling import sentence_vectors, use_mean_pooling
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.lifecycle import encode_task
    from ptmlab.train.setfit import contrastive_phase

    cfg = _cfg(files, max_train_per_class=8, setfit_pairs=160, setfit_lr=3e-3, max_length=32, seed=0)
    data = load_task_data(cfg)
    tok = load_tokenizer("tiny")
    torch.manual_seed(0)
    model = use_mean_pooling(load_model("tiny", num_labels=2))
    enc = encode_task(tok, data, 32)["train"]
    labels = torch.tensor(enc.labels)
    same = labels[:, None] == labels[None, :]
    off = ~torch.eye(len(labels), dtype=torch.bool)

    def gap():
        model.eval()
        with torch.no_grad():
            v = F.normalize(sentence_vectors(model, collate(enc, list(range(len(enc))), tok.pad_token_id)), dim=-1)
        cos = v @ v.T
        return float(cos[same & off].mean() - cos[~same].mean())

    before = gap()
    info = contrastive_phase(model, enc, cfg, RunDir.create(str(tmp_path / "run")), tok.pad_token_id)
    after = gap()
    assert info["pairs"] == 160 and info["positive_pairs"] == 80 and info["contrastive_steps"] == 10
    assert after > before + 0.05, (before, after)


# ------------------------------------------------------------------------------------------ the mean_pooling model
def test_mean_pooled_head_reads_the_masked_mean_and_survives_saving(tmp_path):
    import copy

    from ptmlab.models.first_token import first_token_only
    from ptmlab.models.loader import save_model
    from ptmlab.models.mean_pooling import is_mean_pooled, use_mean_pooling
    from ptmlab.models.zoo import load_model, load_tokenizer

    tok = load_tokenizer("tiny")
    torch.manual_seed(0)
    plain = load_model("tiny", num_labels=3).eval()
    model = use_mean_pooling(copy.deepcopy(plain)).eval()
    assert model.bert.pooler is None and is_mean_pooled(model) and first_token_only(model) is None
    texts = ["a fine and moving film", "dull"]
    b = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**b).logits
        states = plain.bert(**b).last_hidden_state  # the same weights, without the modification
        m = b["attention_mask"].unsqueeze(-1).float()
        expected = model.classifier((states * m).sum(1) / m.sum(1))
        alone = model(**tok(texts[1:], return_tensors="pt")).logits  # padding does not change the mean
    assert torch.allclose(logits, expected, atol=1e-5)
    assert torch.allclose(logits[1], alone[0], atol=1e-5)
    save_model(model, tok, tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert [m["kind"] for m in config["ptmlab_modifications"]] == ["mean_pooling"]
    again = load_model(str(tmp_path / "m")).eval()
    assert again.bert.pooler is None and not any("pooler" in k for k in again.state_dict())
    with torch.no_grad():
        assert torch.allclose(again(**b).logits, logits, atol=1e-6)


# ------------------------------------------------------------------------------------------ whole runs
def test_setfit_run_is_an_ordinary_run(files, tmp_path):
    """A tiny setfit run: the summary records the pair phase, the encoder is what it trained and the head was trained
    on it frozen; predict and ONNX export load it like any run, with the same logits."""
    import ptmlab
    from ptmlab.models.zoo import load_model
    from ptmlab.train.finetune import run_finetune

    out = tmp_path / "run"
    summary = run_finetune(_cfg(files, strategy="setfit", max_train_per_class=6, setfit_pairs=32, max_steps=4,
                                max_length=32, test=False, output=str(out)))
    assert summary["strategy"] == "setfit" and summary["train_examples"] == 12
    assert summary["setfit"]["pairs"] == 32 and summary["setfit"]["contrastive_steps"] == 2
    assert summary["steps"] == 4 and summary["trainable_params"] == 64 * 2 + 2  # the linear head alone
    stages = [r["stage"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "stage" in r]
    assert stages == ["setfit: contrastive pairs", "setfit: head"]
    torch.manual_seed(0)
    base = load_model("tiny", num_labels=2, random_init=True)
    model = load_model(str(out))
    assert not torch.equal(model.bert.encoder.layer[0].attention.self.query.weight,
                           base.bert.encoder.layer[0].attention.self.query.weight)
    preds = ptmlab.predict(str(out), ["good fine film", "bad awful film"])
    assert len(preds) == 2 and all(p["label"] in ("neg", "pos") for p in preds)
    exported = ptmlab.export(str(out), str(tmp_path / "onnx"), format="onnx")
    onnx_preds = ptmlab.predict(str(exported), ["good fine film", "bad awful film"])
    assert [p["label"] for p in onnx_preds] == [p["label"] for p in preds]
    for p, q in zip(preds, onnx_preds, strict=True):
        assert abs(p["score"] - q["score"]) < 1e-4


def test_setfit_on_sentence_pairs(tmp_path):
    from ptmlab.train.finetune import run_finetune

    rows = ["text,text2,label"] + [f"the {w} cat,a {w} dog,{'same' if i % 2 else 'diff'}"
                                   for i, w in enumerate(["red", "big", "old", "shy", "odd", "fat", "wet", "hot"] * 3)]
    (tmp_path / "pairs.csv").write_text("\n".join(rows) + "\n")
    from ptmlab.train.args import FinetuneConfig

    cfg = FinetuneConfig(model="tiny", task="p", train_file=str(tmp_path / "pairs.csv"), text_col="text",
                         text_pair_col="text2", strategy="setfit", max_train_per_class=4, setfit_pairs=16,
                         max_steps=2, max_length=32, test=False, output=str(tmp_path / "run"))
    summary = run_finetune(cfg)
    assert summary["train_examples"] == 8 and summary["setfit"]["pairs"] == 16


def test_setfit_recipe_keeps_what_the_user_set():
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import apply_recipes

    cfg = apply_recipes(FinetuneConfig(model="tiny", strategy="setfit"))
    assert (cfg.lr, cfg.max_steps, cfg.eval_steps) == (1e-2, 50, 50)
    cfg = apply_recipes(FinetuneConfig(model="tiny", strategy="setfit", lr=3e-3, epochs=7))
    assert (cfg.lr, cfg.max_steps, cfg.epochs, cfg.eval_steps) == (3e-3, 0, 7, 0)
    assert apply_recipes(FinetuneConfig(model="tiny")).lr == 5e-5  # other strategies untouched


# ------------------------------------------------------------------------------------------ bad input
def test_bad_inputs_are_one_line_errors(files, tmp_path):
    ft = ["finetune", "--model", "tiny", "--task", "t", "--train-file", files["train"], "--dev-file", files["dev"],
          "--strategy", "setfit", *FAST]
    cases = [
        (["--max-train-per-class", "1000"], ("max-train-per-class 1000", "class '", "training examples",
                                             "or less")),
        (["--max-train-per-class", "1"], ("setfit", "two examples of each class", "has 1",
                                          "--max-train-per-class 2")),
    ]
    stsb = tmp_path / "scores.csv"
    stsb.write_text("text,label\n" + "".join(f"sentence number {i},{i / 7:.3f}\n" for i in range(20)))
    cases.append((["--train-file", str(stsb), "--dev-file", str(stsb)], ("setfit", "regression",
                                                                         "single-label classification")))
    for i, (extra, needles) in enumerate(cases):
        out = tmp_path / f"out{i}"
        proc = run_cli(*ft, *extra, "--output", str(out))
        assert_clean_error(proc, *needles)
        assert not out.exists()


# ------------------------------------------------------------------------------------------ a real check
@pytest.mark.skipif(not (GLUE / "SST-2" / "train.tsv").is_file(),
                    reason="SST-2 is not in the shared data folder (../shared/data/glue/SST-2)")
def test_setfit_beats_standard_finetuning_on_8_per_class(tmp_path):
    """minilm on the same 8 SST-2 examples per class, 200 dev rows: setfit (a shortened pair phase) well above standard
    fine-tuning given the same examples and as many steps over them."""
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    common = dict(model="minilm", task="sst2", glue_dir=str(GLUE), max_train_per_class=8, max_eval=200, seed=0,
                  max_length=64, test=False)
    setfit = run_finetune(FinetuneConfig(**common, strategy="setfit", setfit_pairs=320, max_steps=30,
                                         output=str(tmp_path / "setfit")))
    standard = run_finetune(FinetuneConfig(**common, strategy="full", epochs=10, batch_size=8, eval_steps=10**6,
                                           keep_best=False, output=str(tmp_path / "full")))
    acc_s, acc_f = setfit["metrics"]["accuracy"], standard["metrics"]["accuracy"]
    assert acc_s >= acc_f + 0.05, (acc_s, acc_f)
    assert Path(tmp_path / "setfit" / "model.safetensors").is_file()
