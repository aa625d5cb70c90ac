"""Preregistration the code enforces: a study's design written down and committed before its run, and a result that
is confirmatory only when it was.

    ptmlab study preregister unfreezing --budget full --seeds 12,13,14,15,16,17,18,19,20
    git add studies/preregistered/unfreezing.json && git commit -m "preregister unfreezing"
    ptmlab study unfreezing --budget full --seeds 12,13,14,15,16,17,18,19,20 --output runs/unfreezing

``preregister`` writes ``studies/preregistered/NAME.json``: the claim, its metric, the rule in words with its margin,
the validity conditions, the paper's effect, the data (the task's training and dev rows each seed reads, as SHA-256
hashes of their ids or texts), the seeds, the budget and every option of the run, and the **rule hash**: a SHA-256 of
the code that decides (the study's ``decide``, ``validity`` and ``restate``, ``common.judge``, and every function of
``ptmlab.studies`` they call, docstrings and comments left out, with the module constants they read).

When a study starts (``common.parse_study_args``) it notes the git HEAD, the commit that last touched its
preregistration as of that HEAD, the preregistration's content at that commit and the rule hash of the code it runs.
Its results.json records them under ``preregistration``, with a status:

- ``confirmatory``: the preregistration was committed in an ancestor of the HEAD the run started from (``git
  merge-base --is-ancestor``), its rule hash is the hash of the code that ran, and the run's options (seeds, budget,
  data, everything but where it writes) are the preregistered ones;
- ``exploratory``, with why: no preregistration was committed before the run, the rule or the options differ, or
  (an installed release, no git) "no git to check".

``python -m ptmlab.studies.rederive`` checks the status again and turns a confirmatory result exploratory when the
rule has changed since its run: a changed rule needs a new preregistration and a fresh run.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import subprocess
import time
import tokenize
from pathlib import Path

from ptmlab.core.errors import PtmlabError

FORMAT = 1
FOLDER = Path("studies") / "preregistered"
CONFIRMATORY, EXPLORATORY = "confirmatory", "exploratory"
NO_GIT = "no git to check"
RULE_ROOTS = ("decide", "validity", "restate")
# options that say where a run writes or how it is scheduled: not part of the design a preregistration fixes
NOT_DESIGN = frozenset({"output", "overwrite", "executor", "ray_address", "ray_workers", "ray_cpus_per_run"})


# ------------------------------------------------------------------------------------------------ the rule's hash
def _normalised(func) -> str:
    """A function's source as tokens, docstrings, comments and blank lines left out: the same for the same code
    whatever its layout of comments and whichever Python reads it."""
    import ast
    import textwrap

    src = textwrap.dedent(inspect.getsource(func))
    skip = set()
    for node in ast.walk(ast.parse(src)):
        body = getattr(node, "body", None)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and body and \
                isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) and \
                isinstance(body[0].value.value, str):
            skip.update(range(body[0].lineno, body[0].end_lineno + 1))
    drop = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING}
    words = [t.string if t.type not in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT) else f"<{t.type}>"
             for t in tokenize.generate_tokens(io.StringIO(src).readline)
             if t.type not in drop and t.start[0] not in skip]
    return " ".join(words)


def _callees(func) -> tuple[list, dict]:
    """The functions of ``ptmlab.studies`` that ``func`` names (module globals, and names it imports inside its
    body), and the module constants it reads (UPPER_CASE names of numbers, strings and tuples of them)."""
    import ast
    import importlib
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    scope = dict(vars(inspect.getmodule(func)))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ptmlab.studies"):
            mod = importlib.import_module(node.module)
            scope.update({a.asname or a.name: getattr(mod, a.name, None) for a in node.names})
    funcs, consts = [], {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name):
            continue
        value = scope.get(node.id)
        if inspect.isfunction(value) and str(getattr(value, "__module__", "")).startswith("ptmlab.studies"):
            funcs.append(value)
        elif node.id.isupper() and isinstance(value, int | float | str | tuple | frozenset) and \
                not isinstance(value, bool):
            consts[f"{func.__module__}.{node.id}"] = repr(sorted(value) if isinstance(value, frozenset) else value)
    return funcs, consts


def rule_code(module) -> dict[str, str]:
    """The code that decides a study: ``RULE_ROOTS`` of ``module`` (and its ``RULE_FUNCTIONS``, where it names
    more) and ``common.judge`` (validity conditions to outcome, power notes), with every ``ptmlab.studies`` function
    they call, transitively, as {qualified name: normalised source}, and the constants they read as {name: repr}."""
    from ptmlab.studies.common import judge

    roots = [getattr(module, n) for n in (*RULE_ROOTS, *getattr(module, "RULE_FUNCTIONS", ()))
             if inspect.isfunction(getattr(module, n, None))] + [judge]  # judge: conditions, cannot test, power
    seen: dict[str, str] = {}
    consts: dict[str, str] = {}
    todo = list(roots)
    while todo:
        f = todo.pop()
        key = f"{f.__module__}.{f.__qualname__}"
        if key in seen:
            continue
        seen[key] = _normalised(f)
        more, c = _callees(f)
        consts.update(c)
        todo += more
    return {**dict(sorted(seen.items())), **{f"const {k}": v for k, v in sorted(consts.items())}}


def rule_hash(name: str, studies=None) -> str:
    """The SHA-256 of study ``name``'s rule code (``rule_code``) and its claim's rule text and margin."""
    from ptmlab.studies.rederive import claim_of, module_of

    module = module_of(name, studies)
    claim = claim_of(module, name)
    payload = {"code": rule_code(module), "rule": getattr(claim, "rule", None), "margin": getattr(claim, "margin",
                                                                                                    None)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


# ------------------------------------------------------------------------------------------------ git
def repo_root() -> Path | None:
    """The checkout ptmlab runs from (None for an installed release: no git to check)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / ".git").exists() else None


def git(root: Path, *args: str) -> str | None:
    """``git -C root ARGS``'s output, stripped; None when it fails or git is not installed."""
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def is_ancestor(root: Path, commit: str, head: str) -> bool | None:
    """Whether ``commit`` is an ancestor of ``head`` (or ``head`` itself); None when git cannot say (no git, or a
    commit this checkout does not have)."""
    try:
        out = subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor", commit, head],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return {0: True, 1: False}.get(out.returncode)


# ------------------------------------------------------------------------------------------------ writing one
class ParsedOnly(Exception):  # noqa: N818 (a signal, not an error)
    """Raised by ``common.parse_study_args`` in parse-only mode, carrying the study's resolved options."""

    def __init__(self, cfg):
        super().__init__("parsed")
        self.cfg = cfg


def study_options(name: str, argv: list[str], studies=None):
    """Study ``name``'s options for ``argv`` exactly as its run would resolve them (budget presets, YAML, flags),
    without running it."""
    from ptmlab.studies import common, load_all

    studies = studies or load_all()
    if name not in studies.names():
        raise PtmlabError(f"'{name}' is not a registered study: `ptmlab study` lists them")
    token = common.PARSE_ONLY.set(True)
    try:
        studies.get(name)(list(argv))
    except ParsedOnly as parsed:
        return parsed.cfg
    finally:
        common.PARSE_ONLY.reset(token)
    raise PtmlabError(f"study '{name}' did not parse its options through common.parse_study_args")


def design(cfg) -> dict:
    """The options a preregistration fixes: every option of the study but where it writes and how it is
    scheduled (``NOT_DESIGN``), as JSON."""
    from ptmlab.core.config import config_to_dict

    values = json.loads(json.dumps(config_to_dict(cfg), default=str))
    return {k: v for k, v in sorted(values.items()) if k not in NOT_DESIGN}


def defaults(cfg) -> dict:
    """Every option of ``cfg``'s study at its declared default, as ``design`` writes it: what an option added to
    ptmlab after a preregistration means when the run leaves it alone (the behaviour before it existed)."""
    import dataclasses

    from ptmlab.studies.common import portable

    values = {}
    for f in dataclasses.fields(cfg):
        if f.name in NOT_DESIGN:
            continue
        if f.default is not dataclasses.MISSING:
            values[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            values[f.name] = f.default_factory()
    return portable(json.loads(json.dumps(values, default=str)))


def seeds_of(cfg) -> list[int] | None:
    raw = getattr(cfg, "seeds", None)
    if raw:
        return [int(s) for s in raw]
    return [int(cfg.seed)] if isinstance(getattr(cfg, "seed", None), int) else None


def data_split(cfg) -> dict:
    """The rows a run of ``cfg`` reads, for a study on a task: per split (``train``, ``dev``), the rows each seed's
    subset takes (``--max-train`` / ``--max-eval``, the shuffle ``data.loaders.subset`` makes) as a SHA-256 of their
    ids (or of their texts and labels where a split has no ids). A study may add its own (``data_split(cfg)`` in
    its module)."""
    from ptmlab.data.loaders import load_task, subset

    task = getattr(cfg, "task", None)
    if not task:
        return {"note": "no task option: the data is named by the options"}
    out: dict = {"task": task}
    try:
        data = load_task(task, getattr(cfg, "glue_dir", None), getattr(cfg, "train_file", None),
                         getattr(cfg, "dev_file", None), getattr(cfg, "test_file", None),
                         getattr(cfg, "text_col", "text"), getattr(cfg, "text_pair_col", None),
                         getattr(cfg, "label_col", "label"), getattr(cfg, "label_kind", "auto"))
    except (PtmlabError, OSError, ValueError) as e:
        return {**out, "note": f"the task's data is not at hand here ({str(e).splitlines()[0][:120]}): its options "
                               "name it"}
    seeds = seeds_of(cfg) or [0]
    for split, size in (("train", getattr(cfg, "max_train", None)), ("dev", getattr(cfg, "max_eval", None))):
        if split not in data.splits:
            continue
        hashes = {}
        for seed in seeds:
            part = subset(data.splits[split], size or None, seed)
            rows = [str(i) for i in part.ids] if part.ids else [
                json.dumps([t, p, lab]) for t, p, lab in zip(part.text, part.text_pair or [None] * len(part),
                                                            part.label or [None] * len(part), strict=True)]
            hashes[str(seed)] = {"examples": len(part), "sha256": hashlib.sha256("\n".join(rows).encode()).hexdigest()}
        same = len({h["sha256"] for h in hashes.values()}) == 1
        out[split] = next(iter(hashes.values())) if same else hashes
    return out


def data_of(module, cfg) -> dict:
    """``data_split(cfg)`` with what the study's own ``data_split`` adds (as JSON)."""
    extra = getattr(module, "data_split", None)
    data = data_split(cfg)
    if callable(extra):
        data = {**data, **extra(cfg)}
    return json.loads(json.dumps(data, default=str))


def preregistration(name: str, argv: list[str], studies=None) -> dict:
    """What ``studies/preregistered/NAME.json`` holds for a run of study ``name`` with ``argv``."""
    import shlex

    from ptmlab.studies import load_all
    from ptmlab.studies.common import portable
    from ptmlab.studies.rederive import claim_of, module_of

    studies = studies or load_all()
    cfg = study_options(name, argv, studies)
    module = module_of(name, studies)
    claim = claim_of(module, name)
    if claim is None:
        raise PtmlabError(f"study '{name}' declares no Claim: nothing to preregister")
    data = data_of(module, cfg)
    code = rule_code(module)
    record = {
        "format": FORMAT, "study": name,
        "command": shlex.join(["ptmlab", "study", name, *argv]),
        "budget": getattr(cfg, "budget", None), "seeds": seeds_of(cfg),
        "claim": claim.to_dict(), "metric": claim.metric or None,
        "rule": {"text": claim.rule, "margin": claim.margin, "hash": rule_hash(name, studies),
                 "functions": [k for k in code if not k.startswith("const ")]},
        "conditions": list(claim.conditions), "paper_effect": claim.paper_effect,
        "data": data, "options": design(cfg),
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return portable(record)


def write(name: str, argv: list[str], root: Path | None = None, overwrite: bool = False, studies=None) -> Path:
    """Write ``ROOT/studies/preregistered/NAME.json`` (ROOT: the checkout, else the working directory). An existing
    preregistration is replaced only with ``overwrite``: a run may already have started from it."""
    from ptmlab.core.io import atomic_write_json

    root = Path(root) if root is not None else repo_root() or Path.cwd()
    path = root / FOLDER / f"{name}.json"
    if path.exists() and not overwrite:
        raise PtmlabError(f"'{path}' exists: a new design needs --overwrite (and a fresh run after committing it)")
    record = preregistration(name, argv, studies)
    atomic_write_json(path, record)
    return path


# ------------------------------------------------------------------------------------------------ a run's status
_STARTED: dict[str, dict] = {}


def note_start(name: str, cfg, root: Path | None = None, studies=None) -> dict:
    """What the run of study ``name`` starting now with ``cfg`` records about its preregistration: the HEAD it
    starts from, the commit that last touched ``studies/preregistered/NAME.json`` as of that HEAD and the content at
    that HEAD, the rule hash of the code it runs and its own design. Kept for ``run_record``."""
    from ptmlab.studies.common import portable

    root = Path(root) if root is not None else repo_root()
    state: dict = {"study": name, "rule_hash": rule_hash(name, studies), "design": portable(design(cfg)),
                   "defaults": defaults(cfg),
                   "file": (FOLDER / f"{name}.json").as_posix(), "root": None if root is None else str(root)}
    head = git(root, "rev-parse", "HEAD") if root is not None else None
    if head is None:
        state["git"] = False
    else:
        state["head_at_start"] = head
        state["commit"] = git(root, "log", "-1", "--format=%H", head, "--", state["file"]) or None
        text = git(root, "show", f"{head}:{state['file']}") if state["commit"] else None
        try:
            state["preregistered"] = json.loads(text) if text else None
        except ValueError:
            state["preregistered"] = None
        if state["preregistered"]:  # the rows the run reads, against the preregistered ones
            from ptmlab.studies.rederive import module_of

            data = portable(data_of(module_of(name, studies), cfg))
            state["data_matches"] = data == state["preregistered"].get("data")
    _STARTED[name] = state
    return state


def started(name: str) -> dict | None:
    return _STARTED.get(name)


def run_record(state: dict | None, root: Path | None = None) -> dict:
    """The ``preregistration`` block of a run's results.json from its start (``note_start``), with its status."""
    if state is None:
        return {"status": EXPLORATORY, "why": "the run did not note its start (no preregistration checked)"}
    if state.get("error"):
        return {"status": EXPLORATORY, "why": f"its preregistration could not be checked ({state['error']})"}
    if root is None and state.get("root"):
        root = Path(state["root"])
    pre = state.get("preregistered") or {}
    rec = {"file": state.get("file"), "commit": state.get("commit"), "head_at_start": state.get("head_at_start"),
           "rule_hash": state.get("rule_hash"), "preregistered_rule_hash": (pre.get("rule") or {}).get("hash"),
           "design_matches": _design_differences(pre.get("options"), state.get("design"),
                                                 state.get("defaults")) == [] if pre else None,
           "data_matches": state.get("data_matches")}
    if state.get("git") is False:
        rec["git"] = False
    differ = _design_differences(pre.get("options"), state.get("design"), state.get("defaults")) if pre else []
    if pre and state.get("data_matches") is False:
        differ.append("data")
        rec["design_matches"] = False
    return {**rec, **status(rec, differ=differ, root=root)}


def _design_differences(pre: dict | None, now: dict | None, default: dict | None = None) -> list[str]:
    """The options whose preregistered value differs from the run's. An option the preregistration does not name
    (added to ptmlab after it) differs only when the run sets it to something other than its default (``default``):
    left at its default it keeps the behaviour the preregistration fixed."""
    if not isinstance(pre, dict) or not isinstance(now, dict):
        return ["options"]
    default = default if isinstance(default, dict) else {}
    return [k for k in sorted(set(pre) | set(now)) if k not in NOT_DESIGN and pre.get(k) != now.get(k)
            and not (k not in pre and k in default and now.get(k) == default[k])]


def status(rec: dict, current_hash: str | None = None, differ: list[str] | None = None,
           root: Path | None = None) -> dict:
    """``{"status", "why"}`` for a run's preregistration block ``rec``: confirmatory only when the preregistration
    was committed in an ancestor of the run's starting HEAD, its rule hash is the one that ran (and, where
    ``current_hash`` is given, the one that judges the result now) and the run's design is the preregistered one."""
    if rec.get("git") is False:
        return {"status": EXPLORATORY, "why": NO_GIT}
    if not rec.get("commit") or not rec.get("head_at_start"):
        return {"status": EXPLORATORY, "why": "no preregistration was committed before the run started"}
    root = Path(root) if root is not None else repo_root()
    if root is None:
        return {"status": EXPLORATORY, "why": NO_GIT}
    ancestor = is_ancestor(root, rec["commit"], rec["head_at_start"])
    if ancestor is None:
        return {"status": EXPLORATORY, "why": f"git cannot check the preregistration's commit "
                                              f"{str(rec['commit'])[:12]} against the run's start here"}
    if not ancestor:
        return {"status": EXPLORATORY, "why": "the preregistration's commit is not an ancestor of the commit the "
                                              "run started from"}
    if rec.get("rule_hash") != rec.get("preregistered_rule_hash"):
        return {"status": EXPLORATORY, "why": "the rule that ran differs from the preregistered one (rule hash)"}
    if current_hash is not None and current_hash != rec.get("rule_hash"):
        return {"status": EXPLORATORY, "why": "the rule changed after the run: judged again by a rule that was not "
                                              "preregistered before it"}
    if differ or rec.get("design_matches") is False:
        shown = ", ".join(differ or []) or "options"
        return {"status": EXPLORATORY, "why": f"the run's options differ from the preregistered ones ({shown})"}
    return {"status": CONFIRMATORY, "why": f"preregistered in {str(rec['commit'])[:12]}, an ancestor of the run's "
                                           f"start {str(rec['head_at_start'])[:12]}, with the same rule and options"}


def recheck(record: dict, name: str, studies=None, root: Path | None = None) -> dict:
    """A committed result's ``preregistration`` block checked again now (``rederive``): the rule that judges it
    today must be the one that ran. A result without the block was not preregistered."""
    rec = record.get("preregistration")
    if not isinstance(rec, dict) or "commit" not in rec:
        return {"status": EXPLORATORY, "why": "no preregistration was committed before the run started"}
    fixed = {k: v for k, v in rec.items() if k not in ("status", "why")}
    return {**fixed, **status(fixed, rule_hash(name, studies), root=root)}


# ------------------------------------------------------------------------------------------------ the command
def main(argv: list[str]) -> int:
    """``ptmlab study preregister NAME [--budget B] [the study's options ...]``."""
    import argparse

    from ptmlab.core.cli_parser import ArgParser
    from ptmlab.studies.common import BUDGETS

    p = ArgParser(prog="ptmlab study preregister", description="Write studies/preregistered/NAME.json: the claim, "
                  "metric, rule and margin, validity conditions, data, seeds, budget, options and the rule's code "
                  "hash of a study's run, to commit before the run. A result is confirmatory only when its "
                  "preregistration was committed before the run started and its rule hash and options match.",
                  epilog="Any other option is the study's own (ptmlab study NAME --help), as the run will be given.",
                  formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help="the study")
    p.add_argument("--budget", default="default", choices=BUDGETS, help="the budget the run will use")
    p.add_argument("--overwrite", action="store_true", help="replace an existing preregistration (a new design: "
                                                            "commit it, then run the study afresh)")
    p.add_argument("--root", default=None, help="the checkout whose studies/preregistered/ it is written in "
                                                "(default: the one ptmlab runs from, else the working directory)")
    a, rest = p.parse_known_args(argv)
    path = write(a.name, ["--budget", a.budget, *rest], root=a.root, overwrite=a.overwrite)
    record = json.loads(path.read_text(encoding="utf-8"))
    try:
        shown = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        shown = path
    print(f"wrote {shown} (rule hash {record['rule']['hash'][:12]}, seeds {record['seeds']}, budget "
          f"{record['budget']})")
    print(f"commit it before the run: git add {shown} && git commit -m 'preregister {a.name}'")
    print(f"then run: {record['command']} --output runs/{a.name}")
    return 0
