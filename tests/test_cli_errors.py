"""Every bad input: exit code 2, one line naming the problem, no traceback, nothing written."""

import pytest

from ptmlab.cli import main
from tests.conftest import GLUE, assert_clean_error, needs_glue, run_cli
from tests.synthetic import write_task


def cli(capsys, *args):
    try:
        rc = main(list(args))
    except SystemExit as e:  # argparse usage errors
        rc = e.code
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    return rc, lines


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("task"), n_train=40, n_dev=20)


def _ft(files, out, *extra):
    return ["finetune", "--model", "tiny", "--task", "t", "--train-file", files["train"], "--dev-file",
            files["dev"], "--output", str(out), *extra]


CASES = {
    "missing_glue_dir": (["finetune", "--model", "tiny", "--task", "sst2", "--glue-dir", "/nonexistent/glue"],
                         "GLUE directory"),
    "unknown_model": (["finetune", "--model", "bert-huge", "--task", "tweets"], "unknown model 'bert-huge'"),
    "unknown_strategy": (["finetune", "--model", "tiny", "--strategy", "freeze-all"], "unknown strategy"),
    "unknown_task": (["finetune", "--model", "tiny", "--task", "sst3"], "unknown task 'sst3'"),
    "non_positive_lr": (["finetune", "--model", "tiny", "--lr", "-0.001"], "--lr must be positive"),
    "zero_lr": (["finetune", "--model", "tiny", "--lr", "0"], "--lr must be positive"),
    "bad_number": (["finetune", "--model", "tiny", "--epochs", "many"], "--epochs expects float"),
    # counts and sizes checked before any model is loaded (a negative LoRA rank once reached peft's own ValueError)
    "negative_lora_rank": (["finetune", "--model", "tiny", "--strategy", "lora", "--lora-r", "-1"],
                           "--lora-r must be >= 1, got -1"),
    "zero_adapter": (["finetune", "--model", "tiny", "--adapter-size", "0"], "--adapter-size must be >= 1"),
    "negative_eval_steps": (["finetune", "--model", "tiny", "--eval-steps", "-5"], "--eval-steps must be >= 0"),
    "lora_dropout_one": (["finetune", "--model", "tiny", "--lora-dropout", "1"], "--lora-dropout in [0, 1)"),
    "stlr_ratio_below_one": (["finetune", "--model", "tiny", "--stlr-ratio", "0.5"], "--stlr-ratio"),
    "nan_grad_norm": (["finetune", "--model", "tiny", "--max-grad-norm", "nan"], "--max-grad-norm must be >= 0"),
    "study_negative_pairs": (["study", "anomaly", "--per-phenomenon", "-3"], "--per-phenomenon must be >= 0"),
    "study_zero_mlm_steps": (["study", "domain-adaptation", "--mlm-steps", "0"], "--mlm-steps must be >= 1"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_options(name, capsys, tmp_path):
    args, needle = CASES[name]
    rc, lines = cli(capsys, *args, "--output", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error:"), lines
    assert needle.lower() in lines[0].lower(), lines
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_wrong_column(files, capsys, tmp_path):
    rc, lines = cli(capsys, *_ft(files, tmp_path / "o", "--text-col", "sentence"))
    assert rc == 2 and "column 'sentence'" in lines[0] and "--text-col" in lines[0]
    assert not (tmp_path / "o").exists()


def test_label_outside_label_set(files, capsys, tmp_path):
    bad = tmp_path / "dev.csv"
    bad.write_text("text,label\nfine words,pos\nodd words,maybe\n")
    rc, lines = cli(capsys, *_ft({**files, "dev": str(bad)}, tmp_path / "o"))
    assert rc == 2 and "dev.csv:3: label 'maybe' is not in the label set" in lines[0]


def test_empty_text(files, capsys, tmp_path):
    bad = tmp_path / "train.csv"
    bad.write_text("text,label\ngood,pos\n,neg\nbad,neg\n")
    rc, lines = cli(capsys, *_ft({**files, "train": str(bad)}, tmp_path / "o"))
    assert rc == 2 and "train.csv:3: empty text" in lines[0]


def test_nan_regression_target(capsys, tmp_path):
    f = tmp_path / "r.tsv"
    f.write_text("text\tlabel\nfirst\t1.0\nsecond\tNaN\n")
    rc, lines = cli(capsys, "finetune", "--model", "tiny", "--task", "r", "--train-file", str(f), "--label-kind",
                    "regression", "--output", str(tmp_path / "o"))
    assert rc == 2 and "r.tsv:3: regression target 'NaN' is not a finite number" in lines[0]


def test_output_holding_another_run(files, capsys, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "summary.json").write_text('{"task": "x"}')
    (out / "config.yaml").write_text("command: finetune\n")
    rc, lines = cli(capsys, *_ft(files, out))
    assert rc == 2 and "holds another run" in lines[0]
    assert (out / "summary.json").read_text() == '{"task": "x"}'  # untouched
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    rc, lines = cli(capsys, *_ft(files, other))
    assert rc == 2 and "not empty" in lines[0] and (other / "notes.txt").read_text() == "keep me"


def test_resume_without_checkpoint(capsys, tmp_path):
    rc, lines = cli(capsys, "finetune", "--resume", str(tmp_path))
    assert rc == 2 and "not a ptmlab run directory" in lines[0]


def test_evaluate_unknown_run(capsys, tmp_path):
    rc, lines = cli(capsys, "evaluate", str(tmp_path / "nothing"), "--task", "tweets")
    assert rc == 2 and "unknown model" in lines[0]


def test_real_entry_point_prints_one_line():
    assert_clean_error(run_cli("finetune", "--model", "nope", "--output", "/tmp/ptmlab-never"), "unknown model")
    assert_clean_error(run_cli("finetune", "--no-such-flag"), "unrecognized arguments")


@needs_glue
def test_glue_dir_without_task_folder(capsys, tmp_path):
    rc, lines = cli(capsys, "finetune", "--model", "tiny", "--task", "rte", "--glue-dir", str(tmp_path),
                    "--output", str(tmp_path / "o"))
    assert rc == 2 and "RTE/train.tsv" in lines[0]
    assert GLUE.is_dir()


def test_every_verb_maps_to_the_module_that_registers_it():
    """``ptmlab VERB`` imports only VERB's module: the map from verb to module must match what registers it."""
    import importlib

    from ptmlab.cli import COMMAND_MODULES, module_of
    from ptmlab.core.cli_parser import ArgParser

    for name in COMMAND_MODULES:
        sub = ArgParser(prog="t").add_subparsers(dest="command", parser_class=ArgParser)
        importlib.import_module(name).register(sub)
        assert sub.choices, name
        for verb in sub.choices:
            assert module_of(verb) == name, (verb, name)
    assert module_of("frobnicate") is None


def test_a_command_that_needs_no_model_does_not_import_torch(tmp_path):
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    code = ("import sys; from ptmlab.cli import main; rc = main(['keys', 'list']); "
            "print(rc, 'torch' in sys.modules, 'transformers' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PTMLAB_HOME": str(tmp_path)},
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.stdout.split()[-3:] == ["0", "False", "False"], (p.stdout, p.stderr)
