"""ptmlab export of token-classification and extractive-QA runs: tiny runs fine-tuned on small synthetic CoNLL
columns and SQuAD JSON, exported as transformers, ONNX and int8; the folders load in a Python process that cannot
import ptmlab (Auto class of the task head, tokenizer, onnxruntime at other batch sizes and lengths) and match the
run; parity.json compares per-token logits and the decoded tags or answer spans; mismatched parity text is one line,
exit 2, nothing written."""

from __future__ import annotations

import json
import random

import pytest
import torch

from ptmlab.cli import main
from ptmlab.core.config import build_config
from ptmlab.export.run import ExportConfig, export_model
from ptmlab.models.loader import save_model
from ptmlab.models.zoo import load_model, load_tokenizer
from tests.conftest import SHARED, assert_clean_error, run_cli, run_without_ptmlab

PEOPLE = ["alice", "bruno", "chen", "dmitri"]
PLACES = ["paris", "lagos", "lima", "oslo"]
FILLER = ["the", "visit", "to", "met", "in", "was", "with", "today"]
ANIMALS = ["zebra", "otter", "falcon", "lynx"]
SENTENCES = [["alice", "met", "dmitri", "in", "oslo"], ["the", "visit", "to", "lima"], ["chen"]]
QUESTIONS = [("what is the password?", "we walked along the river and the password is otter near town " * 3),
             ("what is the password?", "the password is lynx")]


def _conll(path, n: int, seed: int) -> None:
    """IOB1-free CoNLL columns (token, POS, tag): people B-PER, places B-LOC, filler O."""
    rng = random.Random(seed)
    lines = ["-DOCSTART- -X- O", ""]
    for _ in range(n):
        for _ in range(rng.randint(3, 6)):
            r = rng.random()
            word, tag = ((rng.choice(PEOPLE), "B-PER") if r < 0.25 else (rng.choice(PLACES), "B-LOC") if r < 0.5
                         else (rng.choice(FILLER), "O"))
            lines.append(f"{word} NN {tag}")
        lines.append("")
    path.write_text("\n".join(lines))


def _squad(path, n: int, seed: int) -> None:
    """SQuAD-layout JSON: contexts long enough for several 48-token windows, one password answer each."""
    rng = random.Random(seed)
    paragraphs = []
    for i in range(n):
        words = [rng.choice(FILLER) for _ in range(rng.randint(50, 70))]
        at, animal = rng.randint(0, len(words)), rng.choice(ANIMALS)
        context = " ".join(words[:at] + ["the", "password", "is", animal] + words[at:])
        start = context.index(f"password is {animal}") + len("password is ")
        paragraphs.append({"context": context, "qas": [{"id": f"q{seed}-{i}", "question": "what is the password?",
                                                         "answers": [{"text": animal, "answer_start": start}]}]})
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "passwords", "paragraphs": paragraphs}]}))


def _export(src, fmt: str, out, **extra) -> dict:
    return export_model(build_config(ExportConfig, {"model": str(src), "format": fmt, "output": str(out), **extra}))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tagger and a QA model fine-tuned for one epoch, a head-pruned copy of each, and their exports."""
    d = tmp_path_factory.mktemp("span-export")
    _conll(d / "train.conll", 48, 0)
    _conll(d / "dev.conll", 12, 1)
    _squad(d / "train.json", 24, 0)
    _squad(d / "dev.json", 8, 1)
    common = ["--model", "tiny", "--epochs", "1", "--batch-size", "16", "--precision", "fp32", "--no-test"]
    assert main(["finetune", *common, "--task", "tags", "--task-kind", "token-classification", "--train-file",
                 str(d / "train.conll"), "--dev-file", str(d / "dev.conll"), "--output", str(d / "ner")]) == 0
    assert main(["finetune", *common, "--task", "pw", "--task-kind", "extractive-qa", "--train-file",
                 str(d / "train.json"), "--dev-file", str(d / "dev.json"), "--max-length", "48", "--doc-stride", "16",
                 "--output", str(d / "qa")]) == 0
    from ptmlab.compress.surgery import prune_structure

    for kind in ("ner", "qa"):  # uneven heads: not expressible in the stock classes, so exported with its code
        model = load_model(str(d / kind)).eval()
        prune_structure(model, heads={0: [0, 2, 3], 1: [1]})
        save_model(model, load_tokenizer(str(d / kind)), d / f"{kind}-pruned")
    out = {"dir": d, "infos": {}}
    for kind, dev in (("ner", "dev.conll"), ("qa", "dev.json")):
        for fmt in ("transformers", "onnx", "onnx-int8", "torch-int8"):
            out["infos"][kind, fmt] = _export(d / kind, fmt, d / f"{kind}-{fmt}")  # the run's own dev data
        # a saved model without a run's config: the parity text is --dev-file, read as the model's kind
        out["infos"][f"{kind}-pruned", "transformers"] = _export(d / f"{kind}-pruned", "transformers",
                                                                 d / f"{kind}-pruned-transformers",
                                                                 dev_file=str(d / dev), task=f"{kind}-dev")
    return out


def test_parity_compares_token_logits_and_decoded_results(runs):
    infos = runs["infos"]
    for (kind, fmt), info in infos.items():
        p = json.loads((runs["dir"] / f"{kind}-{fmt}" / "parity.json").read_text())
        assert p == info["parity"]
        tagger = kind.startswith("ner")
        assert p["kind"] == ("token-classification" if tagger else "extractive-qa")
        assert p["examples"] == (12 if tagger else 8), p
        if tagger:
            assert p["words"] > p["examples"] and 0 <= p["sentences_identical"] <= p["label_agreement"]
        elif kind == "qa":  # the run's 48-token windows over contexts of 54-74 words: several per question
            assert p["windows"] >= 2 * p["examples"], p
        else:  # no run config: the default 384-token windows hold each context whole
            assert p["windows"] == p["examples"], p
        if fmt in ("transformers", "onnx"):
            assert p["max_abs_logit_diff"] < 1e-4 and p["label_agreement"] == 1.0, (kind, fmt, p)
        else:  # int8 rounds the weights: logits move, decoded results mostly stay
            assert 1e-6 < p["max_abs_logit_diff"] < 0.5 and p["label_agreement"] >= 0.75, (kind, fmt, p)
    assert infos["ner", "transformers"]["parity"]["task"] == "tags"  # the run's task, read again from its files
    assert infos["qa-pruned", "transformers"]["custom_code"] is True
    assert infos["ner", "transformers"]["custom_code"] is False


def test_parity_counts_words_of_the_dev_file(runs):
    blocks = [b for b in (runs["dir"] / "dev.conll").read_text().split("\n\n")[1:] if b.strip()]
    words = sum(len(b.strip().splitlines()) for b in blocks)
    assert runs["infos"]["ner", "onnx"]["parity"]["words"] == words


@torch.no_grad()
def _reference(run, kind: str, batch: dict) -> dict:
    model = load_model(str(run)).eval()
    out = model(**{k: torch.tensor(v) for k, v in batch.items() if k != "token_type_ids"},
                token_type_ids=torch.tensor(batch["token_type_ids"]))
    names = ("logits",) if kind == "ner" else ("start_logits", "end_logits")
    return {n: getattr(out, n).float() for n in names}


def test_exports_load_without_ptmlab_and_match_the_run(runs):
    d = runs["dir"]
    tok = load_tokenizer(str(d / "ner"))
    encs = {"ner": dict(tok([" ".join(s) for s in SENTENCES], padding=True)),
            "qa": dict(tok([q for q, _ in QUESTIONS], [c for _, c in QUESTIONS], padding=True))}
    dirs = {name: str(d / name) for name in ("ner-transformers", "ner-pruned-transformers", "ner-onnx",
                                             "qa-transformers", "qa-pruned-transformers", "qa-onnx")}
    code = f"""
import numpy as np, onnxruntime as ort, torch
from transformers import AutoModelForQuestionAnswering, AutoModelForTokenClassification, AutoTokenizer
sents, questions, out = {SENTENCES!r}, {QUESTIONS!r}, {{}}
for name, path in {dirs!r}.items():
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True)  # the pruned ones carry modelling code
    enc = (tok([" ".join(s) for s in sents], padding=True, return_tensors="np") if name.startswith("ner")
           else tok([q for q, _ in questions], [c for _, c in questions], padding=True, return_tensors="np"))
    res = {{"input_ids": enc["input_ids"].tolist()}}
    if name.endswith("-transformers"):
        auto = AutoModelForTokenClassification if name.startswith("ner") else AutoModelForQuestionAnswering
        model = auto.from_pretrained(path, trust_remote_code=True).eval()
        with torch.no_grad():
            o = model(**{{k: torch.from_numpy(v) for k, v in enc.items()}})
        res.update({{k: getattr(o, k).tolist() for k in ("logits", "start_logits", "end_logits") if hasattr(o, k)}})
        res["class"], res["id2label"] = type(model).__name__, model.config.id2label
    else:
        sess = ort.InferenceSession(path + "/model.onnx", providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        feed = {{i.name: enc[i.name].astype(np.int64) for i in sess.get_inputs()}}
        res.update(dict(zip(names, [x.tolist() for x in sess.run(names, feed)])))
        one = {{k: v[:1, :5] for k, v in feed.items()}}  # another batch size and length: dynamic axes
        res["shapes_1x5"] = [list(x.shape) for x in sess.run(names, one)]
        res["outputs"] = names
    out[name] = res
print(json.dumps(out))
"""
    got = run_without_ptmlab(code, d)
    assert set(got) == set(dirs)
    labels = json.loads((d / "ner" / "summary.json").read_text())["labels"]
    for name, res in got.items():
        kind = name.split("-")[0]
        run = d / ("ner-pruned" if name.startswith("ner-pruned") else "qa-pruned" if name.startswith("qa-pruned")
                   else kind)
        assert res["input_ids"] == encs[kind]["input_ids"]  # the exported tokenizer is the run's
        ref = _reference(run, kind, encs[kind])
        for out_name, want in ref.items():
            have = torch.tensor(res[out_name])
            assert have.shape == want.shape and torch.allclose(have, want, atol=1e-4), (name, out_name)
        if name.endswith("-transformers"):
            stock = "Bert" if "pruned" not in name else "Ptmlab"
            head = "ForTokenClassification" if kind == "ner" else "ForQuestionAnswering"
            assert res["class"] == stock + head, res["class"]
        else:
            assert res["outputs"] == list(ref)
            assert all(s == [1, 5, len(labels)] if kind == "ner" else s == [1, 5] for s in res["shapes_1x5"])
        if kind == "ner" and "class" in res:
            assert [res["id2label"][str(i)] for i in range(len(labels))] == labels


def test_model_cards_say_the_task_kind(runs):
    d = runs["dir"]
    ner = (d / "ner-transformers" / "README.md").read_text()
    qa = (d / "qa-pruned-transformers" / "README.md").read_text()
    assert "pipeline_tag: token-classification" in ner and "A token classifier" in ner
    assert "AutoModelForTokenClassification.from_pretrained('ner-transformers')" in ner
    assert "tag agreement per word 1.0000" in ner
    assert "pipeline_tag: question-answering" in qa and "extractive question-answering model" in qa
    assert "AutoModelForQuestionAnswering.from_pretrained('qa-pruned-transformers', trust_remote_code=True)" in qa
    assert "same answer span 1.0000" in qa
    assert "# outputs: start_logits, end_logits [batch, tokens]" in (d / "qa-onnx" / "README.md").read_text()
    assert "# outputs: logits [batch, tokens, tags]" in (d / "ner-onnx-int8" / "README.md").read_text()


def test_cli_prints_the_span_parity(runs, capsys):
    d = runs["dir"]
    capsys.readouterr()
    assert main(["export", str(d / "qa"), "--format", "onnx", "--output", str(d / "qa-cli"),
                 "--parity-examples", "4"]) == 0
    printed = capsys.readouterr().out
    assert "parity on 4 dev texts of pw" in printed and "same answer span 1.0000" in printed


def test_parity_text_of_another_kind_is_refused_in_one_line(runs, capsys):
    d = runs["dir"]
    cases = [  # QA data for a tagger; a CoNLL file read as QA data; a tagger with no data named
        (["export", str(d / "ner"), "--format", "transformers", "--task", "x", "--dev-file", str(d / "dev.json"),
          "--task-kind", "extractive-qa"], ("extractive-qa data", "token-classification model")),
        (["export", str(d / "qa-pruned"), "--format", "onnx", "--dev-file", str(d / "dev.conll")], ("dev.conll",)),
        (["export", str(d / "ner-pruned"), "--format", "onnx"], ("records no data", "--task conll2003",
                                                                 "--task-kind token-classification")),
    ]
    for i, (argv, needles) in enumerate(cases):
        out = d / f"refused-{i}"
        capsys.readouterr()
        assert main([*argv, "--output", str(out)]) == 2, argv
        err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
        assert len(err) == 1 and err[0].startswith("error:") and all(n in err[0] for n in needles), (argv, err)
        assert not out.exists() and not list(d.glob(f".refused-{i}*"))
    # as a user sees it: a sentence task's text for a tagger
    assert_clean_error(run_cli("export", str(d / "ner"), "--format", "onnx", "--task", "tweets", "--output",
                               str(d / "refused-cli")), "sentence data", "token-classification model")
    assert not (d / "refused-cli").exists()


@pytest.mark.skipif(not (SHARED / "ner" / "conll2003" / "eng.testa.gz").is_file(),
                    reason="CoNLL-2003 not found in the shared data")
def test_built_in_conll2003_is_the_parity_text(runs):
    d = runs["dir"]
    info = _export(d / "ner", "onnx", d / "ner-conll", task="conll2003", parity_examples=16)
    p = info["parity"]
    assert p["task"] == "conll2003" and p["examples"] == 16 and p["words"] > 16
    assert p["max_abs_logit_diff"] < 1e-4 and p["label_agreement"] == 1.0
