"""The command grammar of docs/cli.md ("Grammar"), checked on every parser ``ptmlab`` registers.

A new command or option that breaks a rule fails here: each command is classified by what it acts on, every
``--help`` exits 0, ``--output`` is a directory, lists take commas, defaults are one seed and one max length (or a
documented exception), options a command does not use are absent, and usage errors are one line with a hint.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ptmlab.cli import COMMAND_HELP, COMMAND_MODULES, main
from ptmlab.core.cli_parser import ArgParser, ListAction, output_file

ROOT = Path(__file__).resolve().parents[1]

# what each command acts on (docs/cli.md, Grammar): an existing run or model as the first positional argument;
# a new run trained from a pretrained model named by --model; distillation's --teacher and --student; or nothing
EXISTING = {"evaluate", "predict", "report", "tokenizer eval", "tokenizer swap", "analyze heads", "analyze layers",
            "analyze attention", "analyze explanation", "analyze adversarial-attention", "analyze anomaly", "prune",
            "quantize", "compress", "lowrank", "share", "magnitude", "ghost", "retrieval", "serve", "longify",
            "export", "push", "optimize"}
FROM_PRETRAINED = {"finetune", "glue", "demo", "pretrain", "extract"}
TEACHER_STUDENT = {"distill", "distill-embeddings", "meta-distill"}
NO_MODEL = {"models", "data", "study", "tokenizer train", "keys create", "keys list", "keys revoke", "keys flagged",
            "clean", "scale"}
# defaults that differ from --seed 42 / --max-length 128, each with its reason written in docs/cli.md
DEFAULT_EXCEPTIONS = {("demo", "max_length"): 64, ("distill-embeddings", "max_length"): 64,
                      ("extract", "max_length"): 64, ("analyze anomaly", "seed"): 0, ("serve", "max_length"): 0,
                      ("predict", "max_length"): None, ("export", "max_length"): None,
                      ("longify", "max_length"): 4096}
PAIR_OPTIONS = {"--pairs"}  # SRC TGT pairs, repeatable: not a list of values


def full_parser() -> ArgParser:
    top = ArgParser(prog="ptmlab")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgParser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return top


def walk(parser=None, path=()):
    """(path, parser) for the top-level parser and every (sub)command under it."""
    parser = parser or full_parser()
    yield path, parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for verb, p in a.choices.items():
                yield from walk(p, (*path, verb))


def leaves():
    return {" ".join(path): p for path, p in walk()
            if path and not any(isinstance(a, argparse._SubParsersAction) for a in p._actions)}


def visible(parser) -> set[str]:
    return {s for a in parser._actions if a.help is not argparse.SUPPRESS for s in a.option_strings}


def positionals(parser) -> list[argparse.Action]:
    return [a for a in parser._actions if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as e:
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def test_every_command_is_classified_by_what_it_acts_on():
    found = set(leaves())
    classified = EXISTING | FROM_PRETRAINED | TEACHER_STUDENT | NO_MODEL
    assert found <= classified, f"classify new commands in this test: {sorted(found - classified)}"
    assert classified <= found, sorted(classified - found)


def test_the_thing_acted_on_is_always_the_same_kind_of_argument():
    bad = []
    for name, p in leaves().items():
        flags, pos = visible(p), positionals(p)
        if name in EXISTING:
            if not pos or "--model" in flags:
                bad.append(f"{name}: an existing run/model is the first positional argument, not --model")
        elif name in FROM_PRETRAINED:
            if "--model" not in flags or any(a.dest == "model" for a in pos):
                bad.append(f"{name}: the pretrained model it starts from is --model")
        elif name in TEACHER_STUDENT:
            # --teacher: the model the student learns from, as it is; --teacher-model: one trained into the teacher
            if "--student" not in flags or len(flags & {"--teacher", "--teacher-model"}) != 1 or "--model" in flags:
                bad.append(f"{name}: distillation names --student and --teacher (or --teacher-model)")
        elif "--model" in flags:
            bad.append(f"{name}: takes no model")
    assert not bad, "\n".join(bad)


def test_every_help_exits_0_and_is_grouped_by_topic():
    for path, p in walk():
        rc, out, err = run(*path, "--help")
        assert rc == 0 and out.startswith("usage:") and not err, (path, rc, err)
        options = [a for a in p._actions if a.option_strings and a.help is not argparse.SUPPRESS]
        groups = [g for g in p._action_groups if g._group_actions and g.title != "positional arguments"]
        if len(options) > 15:  # a long list is split into topics
            assert len(groups) >= 2, (path, [g.title for g in p._action_groups])
    rc, out, _ = run("finetune", "--help")
    assert all(f"\n{t}:\n" in out for t in ("model", "data", "training", "optimizer and schedule",
                                            "fine-tuning strategy", "hardware and speed"))


def test_every_study_help_exits_0():
    from ptmlab.commands.study import SUITE_COMMANDS
    from ptmlab.studies import load_all

    studies = load_all()
    rc, out, _ = run("study", "--help")
    assert rc == 0 and all(name in out for name in studies)
    for name in [*studies, *SUITE_COMMANDS]:
        rc, out, err = run("study", name, "--help")
        assert rc == 0 and "usage:" in out, (name, rc, err[-300:])


def test_output_is_always_a_directory(tmp_path, capsys):
    bad = [f"{name}: {a.help}" for name, p in leaves().items() for a in p._actions if "--output" in a.option_strings
           and not any(w in (a.help or "") for w in ("director", "folder"))]
    assert not bad, "--output must name a directory:\n" + "\n".join(bad)
    assert output_file(str(tmp_path / "out"), "evaluation.json") == tmp_path / "out" / "evaluation.json"
    # the older spelling that named the file still writes it, with a one-line note
    assert output_file(str(tmp_path / "m.json"), "evaluation.json") == tmp_path / "m.json"
    assert "--output is a directory" in capsys.readouterr().err


def test_lists_take_one_syntax():
    bad = []
    for name, p in leaves().items():
        for a in p._actions:
            if not a.option_strings or a.option_strings[0] in PAIR_OPTIONS:
                continue
            if a.nargs in ("+", "*") and not isinstance(a, ListAction):
                bad.append(f"{name} {a.option_strings[0]}: space-separated values; use ListAction (A,B or A B)")
    assert not bad, "\n".join(bad)
    parser = ArgParser(prog="t")
    parser.add_argument("--files", action=ListAction)
    assert parser.parse_args(["--files", "a,b", "c"]).files == ["a", "b", "c"]


def test_one_name_for_a_text_column():
    for name, p in leaves().items():
        for flag in visible(p):
            assert flag not in ("--text-field", "--text-column", "--text-key"), (name, flag)
    assert "--text-col" in visible(leaves()["clean"])


def test_one_default_seed_and_max_length_or_a_documented_reason():
    grammar = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8").split("<!-- Generated")[0]
    bad = []
    for name, p in leaves().items():
        for a in p._actions:
            field = getattr(a, "field_name", None)
            if field not in ("seed", "max_length") or a.help is argparse.SUPPRESS:
                continue
            want = DEFAULT_EXCEPTIONS.get((name, field), 42 if field == "seed" else 128)
            if a.field_default != want:
                bad.append(f"{name} --{field.replace('_', '-')} defaults to {a.field_default}, not {want}")
            if (name, field) in DEFAULT_EXCEPTIONS and f"`{name}`" not in grammar:
                bad.append(f"docs/cli.md does not give the reason for {name}'s --{field.replace('_', '-')}")
    assert not bad, "\n".join(bad)


def test_options_a_command_does_not_use_are_not_offered():
    cmds = leaves()
    for name in ("distill", "meta-distill", "distill-embeddings", "pretrain"):
        assert not visible(cmds[name]) & {"--strategy", "--lora-r", "--adapter-size", "--unfreeze-every"}, name
    assert "--test" not in visible(cmds["pretrain"]) and "--test" not in visible(cmds["distill-embeddings"])
    assert {"--strategy", "--lora-r", "--test"} <= visible(cmds["finetune"])
    rc, _, err = run("distill", "--strategy", "lora")
    assert rc == 2 and "unrecognized arguments: --strategy" in err


@pytest.mark.parametrize("command", ["finetune", "distill", "pretrain"])
def test_resume_refuses_other_options(command, tmp_path):
    rc, _, err = run(command, "--resume", str(tmp_path / "run"), "--lr", "1e-3", "--epochs", "2")
    assert rc == 2 and err.count("\n") == 1, err
    assert "--resume" in err and "--epochs, --lr" in err
    rc, _, err = run(command, "--resume", str(tmp_path / "run"))  # alone: on to the run directory's own check
    assert rc == 2 and "not a ptmlab run directory" in err


def test_usage_errors_are_one_line_with_a_suggestion():
    rc, _, err = run("finetune", "--lrr", "1e-3")
    assert rc == 2 and err.count("\n") == 1 and "did you mean --lr?" in err, err
    rc, _, err = run("analyze", "heads", "RUN", "--tsk", "sst2")
    assert rc == 2 and "did you mean --task?" in err and "ptmlab analyze heads --help" in err, err
    rc, _, err = run("finetun", "--task", "sst2")
    assert rc == 2 and err.count("\n") == 1 and "did you mean 'finetune'?" in err, err
    rc, _, err = run("finetune", "--zzzzzz")
    assert rc == 2 and "unrecognized arguments: --zzzzzz" in err and "did you mean" not in err


def test_deprecated_spellings_still_work_with_a_note():
    args = full_parser().parse_args(["analyze", "anomaly", "--model", "tiny", "--blimp", "b"])
    assert args.model == "tiny"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        args = full_parser().parse_args(["clean", "in.jsonl", "--text-field", "body", "--output", "o"])
    assert args.text_col == "body" and "--text-field is deprecated: use --text-col" in err.getvalue()


def test_tasks_is_one_joint_model_and_a_teacher_is_used_as_it_is():
    """--tasks lists the tasks of one jointly trained model; glue, which runs each task on its own, selects them with
    --only (as study all selects studies); meta-distill trains its teacher from --teacher-model."""
    cmds = leaves()
    assert {name for name, p in cmds.items() if "--tasks" in visible(p)} == {"finetune", "distill"}
    assert "--only" in visible(cmds["glue"])
    assert "--teacher-model" in visible(cmds["meta-distill"]) and "--teacher" not in visible(cmds["meta-distill"])
    assert "--teacher" in visible(cmds["distill"]) and "--teacher" in visible(cmds["distill-embeddings"])
    grammar = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8").split("<!-- Generated")[0]
    assert "--only" in grammar and "--teacher-model" in grammar


def test_renamed_options_read_their_old_spelling_in_flags_yaml_and_run_records(tmp_path):
    from ptmlab.commands.glue import GlueConfig
    from ptmlab.core.config import build_config, load_yaml
    from ptmlab.distill.metakd import MetaDistillConfig

    for argv, field, value, note in (
            (["glue", "--model", "tiny", "--tasks", "sst2,mrpc"], "only", ["sst2", "mrpc"], "--tasks"),
            (["meta-distill", "--teacher", "tiny"], "teacher_model", "tiny", "--teacher")):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            args = full_parser().parse_args(argv)
        assert getattr(args, field) == value and f"{note} is deprecated: use --{field.replace('_', '-')}" in \
            err.getvalue()
        new = full_parser().parse_args([*argv[:-2], f"--{field.replace('_', '-')}", argv[-1]])
        assert getattr(new, field) == value
    (tmp_path / "glue.yaml").write_text("model: tiny\ntasks: [rte]\n")
    assert build_config(GlueConfig, load_yaml(tmp_path / "glue.yaml")).only == ["rte"]
    # a meta-distill run recorded before the rename (config.yaml: teacher: ...) still resumes
    old_record = {"command": "meta-distill", "teacher": "tiny", "student": "layers:1"}
    (tmp_path / "config.yaml").write_text(__import__("yaml").safe_dump(old_record))
    assert build_config(MetaDistillConfig, load_yaml(tmp_path / "config.yaml")).teacher_model == "tiny"
    with pytest.raises(Exception, match="'tasks' and 'only' .* name the same setting"):  # never read twice
        build_config(GlueConfig, {"tasks": ["rte"], "only": ["sst2"]})


def test_top_level_help_lists_every_verb_without_importing_torch():
    registered = {}
    for _, p in walk():
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction) and p.prog == "ptmlab":
                registered = {c.dest: c.help for c in a._choices_actions}
    assert registered == COMMAND_HELP  # what ptmlab --help lists is what the modules register
    code = ("import sys\nfrom ptmlab.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                       env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert p.stdout.strip().splitlines()[-1] == "False False", p.stdout[-500:] + p.stderr[-500:]
    assert all(verb in p.stdout for verb in COMMAND_HELP)
