"""Peak resident memory of the README's and the docs' example commands that train or distil, on their default data.

Commands are read from README.md and docs/*.md (indented ``ptmlab VERB ...`` lines, ``\\`` continuations joined,
comments dropped) and run as written except that outputs under ``runs/`` go to a scratch folder, steps are capped
with ``--max-steps`` (and Meta-KD's meta-teacher with ``--teacher-epochs``) where the verb has the flag, since memory
held for the data grows with the data and not with the steps, and distillation verbs run a second time with
``--no-teacher-cache``. A command whose inputs are placeholders (RUN, M, ...), user files that do not exist or runs
no earlier command made is listed as skipped, with the reason.

Peak memory: the process tree's summed resident memory (VmRSS, polled every 0.1 s) and the largest single process's
``ru_maxrss``. ``--scaling 4000,all`` also runs ``distill`` with hidden-state and attention losses at each training
size (``--max-train``) with the same step cap: peak memory against the number of examples.

    python benchmarks/memory.py --verbs finetune,distill,meta-distill --scaling 4000,all

``--rerun RESULT.json`` runs the commands a result file records instead of the docs' current examples, so a
committed figure can be measured again as it was taken.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _env import ROOT, machine_info, result_path  # first: offline defaults, repository on sys.path

TRAINS = ("finetune", "pretrain", "distill", "distill-embeddings", "meta-distill", "prune", "compress", "ghost",
          "lowrank", "share", "magnitude", "glue", "scale")
DISTILS = ("distill", "distill-embeddings", "meta-distill")
ZOO = ("minilm", "mpnet")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$|[\[\]]|\.\.\.")
RUNS = re.compile(r"(?<![\w/.-])runs/[\w.-]+")
GiB = 1024**3


def doc_commands(paths: list[Path]) -> list[tuple[str, str]]:
    """(where, command) for each ``ptmlab VERB`` example of a verb that trains, in document order."""
    out = []
    for path in paths:
        lines = path.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            line, start = lines[i], i
            text = line.strip()
            while text.endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text[:-1].rstrip() + " " + lines[i].strip()
            i += 1
            if not line.startswith("    ptmlab "):
                continue
            for part in text.split("&&"):
                part = part.split(" #")[0].strip()
                words = part.split()
                if len(words) > 1 and words[0] == "ptmlab" and words[1] in TRAINS:
                    out.append((f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{start + 1}", part))
    return out


def flags_of(verb: str) -> set[str]:
    """The option strings ``ptmlab VERB`` accepts (its parser, built in this process)."""
    from ptmlab.cli import build_parser

    parser = build_parser([verb])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices[verb]._option_string_actions)


def shown(args: list[str], scratch: Path) -> str:
    """The command as the result records it: the scratch folder written as SCRATCH, so no machine path is kept."""
    return " ".join(args).replace(str(scratch), "SCRATCH")


def prepare(command: str, scratch: Path, made: set[str], max_steps: int, model: str | None,
            flags: dict[str, set[str]]) -> tuple[list[str] | None, str]:
    """The argv to run (or None) and why not: outputs moved to ``scratch``, steps capped, zoo models swapped."""
    words = shlex.split(command)[1:]
    verb = words[0]
    if verb not in flags:
        flags[verb] = flags_of(verb)
    argv, prev = [], None
    for w in words:
        if PLACEHOLDER.search(w) and not w.startswith("-"):
            return None, f"placeholder '{w}'"
        for r in RUNS.findall(w):
            if prev != "--output" and r not in made:
                return None, f"needs {r}, which no earlier command made"
        if prev in ("--model", "--teacher", "--student") and model and w in ZOO:
            w = model
        looks_like_file = "/" in w or re.search(r"\.(txt|gz|jsonl|csv|tsv)$", w)
        if not w.startswith("-") and looks_like_file and not RUNS.search(w) and "=" not in w \
                and not (ROOT / w).exists():
            return None, f"needs the user's file '{w}'"
        argv.append(RUNS.sub(lambda m: str(scratch / m.group(0)), w))
        prev = w
    if "--overwrite" in flags[verb] and "--overwrite" not in argv:
        argv.append("--overwrite")  # a scratch folder used before
    if max_steps <= 0:
        return argv, ""  # uncapped: the command as written
    if "--max-steps" in argv:  # a command's own step count, capped like the others
        i = argv.index("--max-steps") + 1
        argv[i] = str(min(int(argv[i]), max_steps)) if argv[i].isdigit() else argv[i]
    elif "--max-steps" in flags[verb]:
        argv += ["--max-steps", str(max_steps)]
    if verb == "meta-distill" and "--teacher-epochs" not in argv:
        argv += ["--teacher-epochs", "0.02"]  # the meta-teacher stage ignores --max-steps
    return argv, ""


def _tree_rss(root: int) -> int:
    """Summed VmRSS (bytes) of ``root`` and its descendants."""
    import psutil

    try:
        procs = [psutil.Process(root)]
        procs += procs[0].children(recursive=True)
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def measure(argv: list[str], timeout: float, log: Path) -> dict:
    """Run ``ptmlab ARGV`` in its own process; peak memory, seconds, exit code."""
    t0 = time.perf_counter()
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.Popen([sys.executable, "-m", "ptmlab", *argv], cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
        peak = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # this child's own ru_maxrss
            if pid:
                break
            peak = max(peak, _tree_rss(proc.pid))
            if time.perf_counter() - t0 > timeout:
                proc.kill()
            time.sleep(0.1)
    proc.returncode = rc = os.waitstatus_to_exitcode(status)
    tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
    return {"rc": rc, "seconds": round(time.perf_counter() - t0, 1), "peak_rss_mib": round(peak / 2**20, 1),
            "max_process_rss_mib": round(usage.ru_maxrss / 1024, 1), "tail": tail if rc else []}  # kB on Linux


def _output_of(argv: list[str]) -> Path | None:
    return Path(argv[argv.index("--output") + 1]) if "--output" in argv else None


def _examples(out: Path | None) -> int | None:
    try:
        return json.loads((out / "summary.json").read_text())["train_examples"]
    except (OSError, TypeError, KeyError, ValueError):
        return None


def write_result(a, rows: list[dict], scaling: list[dict]) -> tuple[Path, list[dict], list[dict], dict]:
    """Write the result file atomically (after every command, so a cut run keeps what it measured); with
    ``--append`` the records of an earlier run that this one did not remake (same source and teacher-cache side)
    are kept, and its scaling runs unless this run made some. Returns the file and what it holds."""
    dest = Path(a.output) if a.output else result_path("memory")
    if a.append and dest.is_file():
        old = json.loads(dest.read_text(encoding="utf-8"))
        mine = {(x["source"], x.get("teacher_cache")) for x in rows}
        rows = [r for r in old["commands"] if (r["source"], r.get("teacher_cache")) not in mine] + rows
        scaling = scaling or old.get("scaling", [])
    ok = [r for r in rows if r.get("status") == "ok"]
    readme = [r for r in ok if r["source"].startswith("README.md")]
    on = [r for r in scaling if r["teacher_cache"] == "on" and r["rc"] == 0 and r["train_examples"]]
    ratio = None
    if len(on) >= 2:
        small, big = min(on, key=lambda r: r["train_examples"]), max(on, key=lambda r: r["train_examples"])
        ratio = {"examples": [small["train_examples"], big["train_examples"]],
                 "peak_rss_mib": [small["peak_rss_mib"], big["peak_rss_mib"]],
                 "memory_ratio": round(big["peak_rss_mib"] / small["peak_rss_mib"], 3),
                 "data_ratio": round(big["train_examples"] / small["train_examples"], 2)}
    targets = {
        "readme_under_8_gib": {"measured": len(readme), "met": all(r["peak_rss_mib"] < 8 * 1024 for r in readme)
                               if readme else None,
                               "worst_mib": max((r["peak_rss_mib"] for r in readme), default=None)},
        "every_command_under_8_gib": {"measured": len(ok), "met": all(r["peak_rss_mib"] < 8 * 1024 for r in ok)
                                      if ok else None,
                                      "worst_mib": max((r["peak_rss_mib"] for r in ok), default=None)},
        "distill_all_vs_small_within_1_5x": {**(ratio or {}), "met": ratio["memory_ratio"] <= 1.5 if ratio else None},
    }
    result = {"benchmark": "memory", "machine": machine_info(), "max_steps": a.max_steps, "model": a.model,
              "commands": rows, "scaling": scaling, "targets": targets}
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    tmp.replace(dest)
    return dest, rows, scaling, targets


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", nargs="+", help="markdown files to read commands from (default: README.md, docs/*.md)")
    p.add_argument("--verbs", default=",".join(TRAINS), help="verbs to run, comma-separated")
    p.add_argument("--sources", help="only these examples, as FILE:LINE (e.g. README.md:38,README.md:89)")
    p.add_argument("--rerun", help="run the commands a result file records (its `command`s, under their recorded "
                                   "sources) instead of the docs' examples: reproduces that file's figures")
    p.add_argument("--cache-sides", default="on,off", help="teacher cache settings of the distillation commands")
    p.add_argument("--append", action="store_true",
                   help="keep the other records of an existing result file (a rerun replaces its own)")
    p.add_argument("--max-steps", type=int, default=20,
                   help="step cap for verbs with --max-steps (0: none, the commands run to their end)")
    p.add_argument("--model", help="swap the zoo models of the commands for this one (tests: tiny)")
    p.add_argument("--scaling", help="training sizes for the distill scaling runs, e.g. 4000,all")
    p.add_argument("--scaling-teacher", default="runs/sst2", help="teacher of the scaling runs")
    p.add_argument("--scaling-student", default="layers:3", help="student of the scaling runs")
    p.add_argument("--scaling-args", default="--task sst2 --losses soft_ce,hidden_mse,attention_kl",
                   help="the rest of the scaling runs' distill command (without --max-train and --output)")
    p.add_argument("--scaling-cache", default="on,off", help="teacher cache settings of the scaling runs")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per command")
    p.add_argument("--scratch", help="folder for the runs (default: a temporary folder)")
    p.add_argument("--output", help="result JSON (default benchmarks/results/memory.MACHINE.json)")
    a = p.parse_args()

    docs = [Path(d) for d in a.docs] if a.docs else [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    verbs = set(a.verbs.split(","))
    scratch = Path(a.scratch or tempfile.mkdtemp(prefix="ptmlab-memory-"))
    scratch.mkdir(parents=True, exist_ok=True)
    made: set[str] = set()
    flags: dict[str, set[str]] = {}
    rows = []
    if a.rerun:
        recorded = json.loads(Path(a.rerun).read_text(encoding="utf-8"))["commands"]
        examples = list(dict.fromkeys((r["source"], r["command"]) for r in recorded))
    else:
        examples = doc_commands(docs)
    for where, command in examples:
        verb = command.split()[1]
        row = {"source": where, "command": command, "verb": verb}
        if verb not in verbs or (a.sources and where not in a.sources.split(",")):
            continue
        argv, why = prepare(command, scratch, made, a.max_steps, a.model, flags)
        if argv is None:
            rows.append({**row, "status": f"skipped: {why}"})
            print(f"skip {where}: {why}", flush=True)
            continue
        out = _output_of(argv)
        sides = [(c, argv if c == "on" else [*argv, "--no-teacher-cache"]) for c in a.cache_sides.split(",")]
        sides = sides if verb in DISTILS else [("on", argv)]
        for cache, args in sides:
            if cache == "off" and out is not None:
                args = [*args[:args.index("--output") + 1], str(out) + "-nocache", *args[args.index("--output") + 2:]]
            r = measure(args, a.timeout, scratch / f"log-{len(rows)}.txt")
            rec = {**row, "teacher_cache": cache if verb in DISTILS else None, "ran": shown(args, scratch),
                   "status": "ok" if r["rc"] == 0 else f"failed (exit {r['rc']})", **r,
                   "train_examples": _examples(_output_of(args))}
            rows.append(rec)
            print(f"{where} [{cache}] {rec['status']}: peak {r['peak_rss_mib']:.0f} MiB, "
                  f"{rec['train_examples']} examples, {r['seconds']} s", flush=True)
            write_result(a, rows, [])
        if any(x["source"] == where and x.get("teacher_cache") in ("on", None) and x["status"] == "ok" for x in rows):
            made.update(m for m in RUNS.findall(command) if f"--output {m}" in command)

    scaling = []
    if a.scaling:
        words = ["--teacher", a.scaling_teacher, "--student", a.scaling_student, *shlex.split(a.scaling_args)]
        if a.scaling_teacher == "runs/sst2" and "runs/sst2" not in made and not (scratch / "runs/sst2").is_dir():
            print("scaling runs need runs/sst2 (the README's finetune command): run with finetune in --verbs")
        else:
            for size in a.scaling.split(","):
                extra = [] if size == "all" else ["--max-train", size]
                for cache in a.scaling_cache.split(","):
                    out = scratch / f"scaling-{size}-{cache}"
                    args = ["distill", *[RUNS.sub(lambda m: str(scratch / m.group(0)), w)
                                         for w in words], *extra, "--max-steps",
                            str(a.max_steps), "--output", str(out), "--overwrite"]
                    args += ["--no-teacher-cache"] if cache == "off" else []
                    if a.model:
                        args = [a.model if prev in ("--teacher", "--student") and w in ZOO else w
                                for prev, w in zip([None, *args], args, strict=False)]
                    r = measure(args, a.timeout, scratch / f"log-scaling-{size}-{cache}.txt")
                    rec = {"size": size, "teacher_cache": cache, "ran": shown(args, scratch), **r,
                           "train_examples": _examples(out)}
                    scaling.append(rec)
                    print(f"scaling {size} [{cache}]: peak {r['peak_rss_mib']:.0f} MiB, {rec['train_examples']} "
                          f"examples, exit {r['rc']}", flush=True)
                    write_result(a, rows, scaling)

    dest, rows, scaling, targets = write_result(a, rows, scaling)
    print(f"\n{'command':58} {'cache':5} {'examples':>8} {'peak MiB':>9} {'status'}")
    for r in rows + [{**s, "command": f"distill (scaling, {s['size']})", "status": "ok" if s["rc"] == 0 else
                      f"failed (exit {s['rc']})"} for s in scaling]:
        print(f"{r['command'][:58]:58} {str(r.get('teacher_cache') or '-'):5} {str(r.get('train_examples') or '-'):>8} "
              f"{str(r.get('peak_rss_mib', '-')):>9} {r['status']}")
    print(f"targets: {json.dumps(targets)}\nwrote {dest}")


if __name__ == "__main__":
    main()
