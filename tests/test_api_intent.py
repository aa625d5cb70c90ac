"""What a transformers user means: errors in the caller's words, TrainingArguments names, model objects of every
kind (a Run, a PEFT model, a model with another head), evaluation of a run trained from memory, and the command
line's smaller promises (no abbreviated flags, a did-you-mean for a model name, --trust-pickle on every verb)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from ptmlab.core.errors import PtmlabError

FAST = dict(epochs=1, max_length=32, batch_size=8, lr=3e-3, seed=0, precision="fp32", max_steps=6)


def _rows(n=40):
    pos, neg = ["great", "superb", "lovely"], ["awful", "boring", "poor"]
    return [{"text": f"the film was {(pos if i % 2 else neg)[i % 3]} {i}", "label": ["neg", "pos"][i % 2]}
            for i in range(n)]


@pytest.fixture(scope="module")
def memory_run(tmp_path_factory):
    import ptmlab

    out = tmp_path_factory.mktemp("memory") / "run"
    return ptmlab.finetune("tiny", _rows(), output=str(out), **FAST)


def _write_csv(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, ["text", "label"])
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


# ------------------------------------------------------------------------------ evaluate a run trained from memory
def test_evaluating_a_memory_run_on_a_file_reads_it_with_the_runs_labels(memory_run, tmp_path):
    import ptmlab

    rows = _rows(20)
    both = ptmlab.evaluate(memory_run, dev_file=_write_csv(tmp_path / "both.csv", rows))
    assert both["examples"] == 20 and both["task"] == "custom"
    preds = [p["label"] for p in memory_run.predict([r["text"] for r in rows])]
    expected_pos = sum(p == "pos" for p, r in zip(preds, rows, strict=True) if r["label"] == "pos") / 10
    # a file holding only one of the run's classes: "pos" keeps the model's id for pos, not index 0 of its own set
    only_pos = ptmlab.evaluate(memory_run, dev_file=_write_csv(tmp_path / "pos.csv", [r for r in rows
                                                                                      if r["label"] == "pos"]))
    assert only_pos["metrics"]["accuracy"] == pytest.approx(expected_pos)
    expected_all = sum(p == r["label"] for p, r in zip(preds, rows, strict=True)) / 20
    assert both["metrics"]["accuracy"] == pytest.approx(expected_all)


def test_evaluating_on_a_label_the_run_never_saw_names_it(memory_run, tmp_path):
    import ptmlab

    path = _write_csv(tmp_path / "new.csv", [*_rows(4), {"text": "so so", "label": "neutral"}])
    with pytest.raises(PtmlabError, match="label.*neutral.*does not know.*predicts neg, pos"):
        ptmlab.evaluate(memory_run, dev_file=path)


def test_the_cli_advice_for_a_memory_run_works(memory_run, tmp_path):
    from ptmlab.cli import main

    assert main(["evaluate", str(memory_run.path)]) == 2  # names --dev-file ...
    path = _write_csv(tmp_path / "dev.csv", _rows(12))
    assert main(["evaluate", str(memory_run.path), "--dev-file", path, "--output", str(tmp_path / "ev")]) == 0
    assert json.loads((tmp_path / "ev" / "evaluation.json").read_text())["examples"] == 12


# ---------------------------------------------------------------------------------- errors in the caller's words
def test_api_errors_name_keywords_not_flags(tmp_path, memory_run):
    import ptmlab

    with pytest.raises(PtmlabError) as e:
        ptmlab.finetune("tiny", _rows(), output=str(tmp_path / "a"), label_col="stars", **FAST)
    assert "label_col=" in str(e.value) and "--label-col" not in str(e.value)
    with pytest.raises(PtmlabError) as e:
        ptmlab.finetune("tiny", _rows(), output=str(memory_run.path), **FAST)
    assert "overwrite=True" in str(e.value) and "resume=True" in str(e.value) and "--" not in str(e.value)
    with pytest.raises(PtmlabError, match=r"^max_length=3 is out of range"):
        ptmlab.finetune("tiny", _rows(), output=str(tmp_path / "b"), **{**FAST, "max_length": 3})


def test_as_keywords_rewrites_each_form_of_flag():
    from ptmlab.api.errors import as_keywords

    assert as_keywords("pass --task NAME to pick one") == "pass task=NAME to pick one"
    assert as_keywords("--lr must be positive, got -1") == "lr must be positive, got -1"
    assert as_keywords("set --no-keep-best or --overwrite", {"overwrite"}) == "set keep_best=False or overwrite=True"
    assert as_keywords("pass --dev-file") == "pass dev_file=..."
    assert as_keywords("see 'ptmlab finetune --help'") == "see 'ptmlab finetune --help'"
    both = "pass the data (data=... in Python, --dev-file on the command line)"
    assert as_keywords(both) == both


# ------------------------------------------------------------------------------ TrainingArguments names as aliases
def test_training_arguments_names_are_aliases_in_python_yaml_and_flags(tmp_path):
    from ptmlab.core.cli_parser import ArgParser
    from ptmlab.core.config import add_config_args, build_config, load_yaml, resolve_config
    from ptmlab.train.args import FinetuneConfig

    hf = dict(learning_rate=1e-3, num_train_epochs=2, per_device_train_batch_size=16, weight_decay=0.1,
              warmup_ratio=0.2, gradient_accumulation_steps=2, per_device_eval_batch_size=64,
              lr_scheduler_type="cosine", output_dir="runs/x")
    cfg = build_config(FinetuneConfig, hf)
    assert (cfg.lr, cfg.epochs, cfg.batch_size, cfg.weight_decay, cfg.warmup, cfg.grad_accum,
            cfg.eval_batch_size, cfg.schedule, cfg.output) == (1e-3, 2.0, 16, 0.1, 0.2, 2, 64, "cosine", "runs/x")
    (tmp_path / "c.yaml").write_text("learning_rate: 0.002\nnum_train_epochs: 4\n")
    assert build_config(FinetuneConfig, load_yaml(tmp_path / "c.yaml")).lr == 0.002
    p = ArgParser(prog="t")
    add_config_args(p, FinetuneConfig)
    args = p.parse_args(["--learning-rate", "3e-4", "--warmup-ratio", "0.1", "--num-train-epochs", "5"])
    assert (resolve_config(FinetuneConfig, args).lr, args.warmup, args.epochs) == (3e-4, 0.1, 5.0)
    with pytest.raises(PtmlabError, match="'learning_rate' and 'lr' .* name the same setting"):
        build_config(FinetuneConfig, {"lr": 1e-3, "learning_rate": 2e-3})


def test_learning_rate_trains_through_the_api(tmp_path):
    import ptmlab

    run = ptmlab.finetune("tiny", _rows(), output=str(tmp_path / "r"), learning_rate=1e-3, num_train_epochs=1,
                          per_device_train_batch_size=8, max_steps=2, max_length=32, precision="fp32")
    assert run.config["lr"] == 1e-3 and run.config["batch_size"] == 8


# ----------------------------------------------------------------------------------------------- model objects
def test_a_model_with_another_head_says_so_and_its_encoder_trains(tmp_path):
    import ptmlab
    from ptmlab.models.zoo import load_model, load_tokenizer

    three = load_model("tiny", num_labels=3)
    with pytest.raises(PtmlabError) as e:
        ptmlab.finetune((three, load_tokenizer("tiny")), _rows(), output=str(tmp_path / "x"), **FAST)
    msg = str(e.value)
    assert "head for 3 classes" in msg and "the data has 2" in msg and "base_model" in msg
    assert "corrupt" not in msg and "ptmlab-model-" not in msg  # the object, not its temporary folder
    run = ptmlab.finetune((three.base_model, load_tokenizer("tiny")), _rows(), output=str(tmp_path / "y"), **FAST)
    assert run.summary["labels"] == ["neg", "pos"]


def test_a_peft_model_and_a_run_are_models(tmp_path, memory_run):
    import peft
    import torch

    import ptmlab
    from ptmlab.models.zoo import load_model, load_tokenizer

    base = load_model("tiny", num_labels=2)
    wrapped = peft.get_peft_model(base, peft.LoraConfig(task_type="SEQ_CLS", r=4, target_modules=["query", "value"]))
    with torch.no_grad():  # a non-zero adapter, so the merged weights differ from the base's
        for name, p in wrapped.named_parameters():
            if "lora_B" in name:
                p.fill_(0.05)
    before = {k: v.clone() for k, v in wrapped.state_dict().items()}
    run = ptmlab.finetune((wrapped, load_tokenizer("tiny")), _rows(), output=str(tmp_path / "p"),
                          **{**FAST, "max_steps": 0, "epochs": 0.01})
    assert run.config["model"].endswith("+peft")
    after = wrapped.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # the caller's model is untouched
    again = ptmlab.finetune(ptmlab.load(memory_run.path), _rows(), output=str(tmp_path / "r"), **FAST)
    assert again.config["model"] == str(memory_run.path)


# ------------------------------------------------------------------------------------------- the command line
def test_flags_are_never_abbreviated(capsys):
    from ptmlab.cli import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser(["finetune"]).parse_args(["finetune", "--max-step", "2"])
    assert e.value.code == 2 and "did you mean --max-steps" in capsys.readouterr().err


def test_a_misspelt_model_name_gets_a_suggestion():
    from ptmlab.models.zoo import resolve

    with pytest.raises(PtmlabError, match="unknown model 'minilmm' \\(did you mean 'minilm'\\?\\)"):
        resolve("minilmm")


def test_every_verb_that_reads_a_model_offers_trust_pickle(tmp_path):
    from ptmlab.cli import COMMAND_HELP, build_parser
    from ptmlab.models.loader import _TRUSTED_PICKLE
    from ptmlab.models.zoo import load_model, load_tokenizer

    for verb in ("finetune", "predict", "distill", "prune", "export", "quantize", "evaluate", "serve", "analyze"):
        assert verb in COMMAND_HELP
        sub = next(a for a in build_parser([verb])._actions if a.dest == "command").choices[verb]
        assert any("--trust-pickle" in a.option_strings for a in sub._actions), verb
    folder = tmp_path / "pickled"
    import torch

    model = load_model("tiny", num_labels=2)
    model.save_pretrained(folder)
    load_tokenizer("tiny").save_pretrained(folder)
    for f in folder.glob("*.safetensors"):  # the same weights as a pickle checkpoint only
        f.unlink()
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    assert (folder / "pytorch_model.bin").is_file() and not list(folder.glob("*.safetensors"))
    from ptmlab.cli import main

    data = _write_csv(tmp_path / "d.csv", _rows())
    common = ["finetune", "--model", str(folder), "--train-file", data, "--max-steps", "1", "--max-length", "16"]
    assert main([*common, "--output", str(tmp_path / "no")]) == 2 and not (tmp_path / "no").exists()
    assert main([*common, "--output", str(tmp_path / "yes"), "--trust-pickle"]) == 0
    assert (tmp_path / "yes" / "model.safetensors").is_file()
    _TRUSTED_PICKLE.clear()


@pytest.mark.parametrize("verb", ["longify", "compress", "prune", "quantize", "ghost", "magnitude", "lowrank",
                                  "share", "finetune", "distill", "export", "serve"])
def test_help_of_a_verb_loads_no_torch(verb):
    code = (f"import sys; from ptmlab.cli import build_parser; build_parser([{verb!r}]); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]


def test_one_precision_choice_set_and_one_batch_flag_for_inference():
    from ptmlab.cli import build_parser
    from ptmlab.train.args import PRECISIONS

    def options(verb):
        sub = next(a for a in build_parser([verb])._actions if a.dest == "command").choices[verb]
        return {a.dest: a for a in sub._actions if a.help != "==SUPPRESS=="}  # not the old spellings

    for verb in ("finetune", "evaluate", "predict", "serve", "scale", "distill"):
        assert tuple(options(verb)["precision"].choices) == PRECISIONS, verb
    predict, evaluate = options("predict"), options("evaluate")
    assert "--eval-batch-size" in predict["eval_batch_size"].option_strings
    assert "--eval-batch-size" in evaluate["eval_batch_size"].option_strings


def test_predict_precision_auto_and_the_old_batch_flag(memory_run, tmp_path, capsys):
    from ptmlab.cli import main

    (tmp_path / "in.jsonl").write_text('{"text": "the film was great"}\n{"text": "the film was awful"}\n')
    args = ["predict", str(memory_run.path), "--input", str(tmp_path / "in.jsonl"), "--precision", "auto"]
    assert main([*args, "--output", str(tmp_path / "a"), "--eval-batch-size", "1"]) == 0
    assert main([*args, "--output", str(tmp_path / "b"), "--batch-size", "1"]) == 0
    assert "--batch-size is deprecated: use --eval-batch-size" in capsys.readouterr().err
    a, b = ((tmp_path / d / "predictions.jsonl").read_text().splitlines() for d in "ab")
    assert len(a) == 2 and [json.loads(x)["label"] for x in a] == [json.loads(x)["label"] for x in b]


def test_export_creates_a_missing_parent_as_finetune_does(memory_run, tmp_path):
    from ptmlab.cli import main

    out = tmp_path / "a" / "b" / "export"
    assert main(["export", str(memory_run.path), "--output", str(out), "--parity-examples", "4"]) == 0
    assert (out / "config.json").is_file()
    (tmp_path / "file").write_text("x")
    assert main(["export", str(memory_run.path), "--output", str(tmp_path / "file" / "export")]) == 2
