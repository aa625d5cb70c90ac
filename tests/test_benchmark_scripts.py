"""The benchmark scripts (and the investigations beside them) run end to end on the tiny model: a script that no
test runs drifts from the API it calls (``benchmarks/compress.py`` once failed with a TypeError after ``recover()``
changed)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import GLUE, ROOT, SHARED, needs_glue


def _run_on_tiny(script: str, out, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """``benchmarks/SCRIPT --model tiny ARGS --output OUT`` run to success: the process and the JSON it wrote."""
    proc = subprocess.run([sys.executable, f"benchmarks/{script}", "--model", "tiny", *args, "--output", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def _ratio_of_rounded(ratio, num_ms, den_ms, step=0.1):
    """Whether ``ratio`` (an unrounded ratio, rounded to 0.001) fits two times the benchmark rounded to ``step``."""
    h = step / 2
    return (num_ms - h) / (den_ms + h) - 0.001 <= ratio <= (num_ms + h) / max(den_ms - h, 1e-9) + 0.001


@needs_glue
def test_compress_benchmark_runs_on_a_tiny_sst2_model(tmp_path):
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    run = tmp_path / "tiny-sst2"
    run_finetune(FinetuneConfig(model="tiny", task="sst2", glue_dir=str(GLUE), max_train=64, max_eval=32,
                                max_length=32, epochs=1.0, batch_size=16, output=str(run), test=False))
    out = tmp_path / "compress.json"
    proc = subprocess.run([sys.executable, "benchmarks/compress.py", "--model", str(run), "--glue-dir", str(GLUE),
                           "--recover-train", "64", "--repeats", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    rows = {r["variant"]: r for r in res["rows"]}
    assert {"fp32 base", "heads -40% + recovery", "onnx int8", "vocab pruned"} <= set(rows), list(rows)
    assert res["dev_examples"] == 872 and all(0.0 <= r["dev"] <= 1.0 for r in rows.values())
    assert res["heads"]["after"] < res["heads"]["heads_before"]
    assert rows["onnx int8"]["size_mb"] < rows["fp32 base"]["size_mb"]
    assert set(res["targets_met"]) == {"heads", "int8", "vocab", "combined"}


def test_cpu_flops_benchmark_measures_both_inference_paths(tmp_path):
    out = tmp_path / "cpu_flops.json"
    proc = subprocess.run([sys.executable, "benchmarks/cpu_flops.py", "--model", "tiny", "--repeats", "1",
                           "--length", "16", "--batch-size", "4", "--output", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["machine_gflops"] == max([*res["matmul_gflops"].values(), *res["matmul_gflops_onnxruntime"].values()])
    for side in ("inference", "inference_onnx", "training_step"):
        assert res[side]["gflops"] > 0 and res[side]["fraction_of_matmul_rate"] > 0, side
    assert res["inference_onnx"]["speedup_vs_pytorch"] > 0
    assert abs(sum(res["training_step"]["time_breakdown_aten_self_cpu"].values()) - 1) < 0.01


def test_first_token_benchmark_times_both_sides(tmp_path):
    _, res = _run_on_tiny("investigations/first_token.py", tmp_path / "r.json", "--rounds", "1",
                          "--shapes", "4x16,2x32")
    assert [(r["batch"], r["length"]) for r in res["rows"]] == [(4, 16), (2, 32)]
    for r in res["rows"]:
        assert r["cut_ms"] > 0 and r["full_ms"] > 0
        assert _ratio_of_rounded(r["speedup_cut"], r["full_ms"], r["cut_ms"])
    bad = subprocess.run([sys.executable, "benchmarks/investigations/first_token.py", "--model", "tiny",
                          "--shapes", "32by16"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert bad.returncode != 0 and "BATCHxLENGTH" in bad.stderr


def test_host_memory_benchmark_runs_both_sides_in_their_own_processes(tmp_path):
    proc, res = _run_on_tiny("investigations/host_memory.py", tmp_path / "r.json", "--rounds", "2", "--shapes", "4x16")
    [row] = res["rows"]
    assert row["shape"] == "4x16" and row["default_ms"] > 0 and row["reuse_ms"] > 0
    assert _ratio_of_rounded(row["speedup"], row["default_ms"], row["reuse_ms"])
    assert proc.stdout.count("round 0") == 2 and proc.stdout.count("round 1") == 2  # both sides, each round
    from ptmlab.core.host_memory import _glibc

    assert res["applied"] is (_glibc() is not None)


def test_embedding_share_benchmark_alternates_full_and_frozen_steps(tmp_path):
    proc, res = _run_on_tiny("investigations/embedding_share.py", tmp_path / "r.json", "--rounds", "2",
                             "--shapes", "4x16,2x8")
    assert [r["shape"] for r in res["rows"]] == ["4x16", "2x8"]
    for r in res["rows"]:
        assert r["full_ms"] > 0 and r["frozen_ms"] > 0
        # the ms are rounded to 0.1 and the share to 0.001: allow what that rounding can move the ratio by
        slack = 0.05 / r["full_ms"] * (1 + r["frozen_ms"] / r["full_ms"]) + 0.0006
        assert abs(r["embedding_share"] - (1 - r["frozen_ms"] / r["full_ms"])) <= slack
    assert res["embedding_rows"] > 1000 and proc.stdout.count("round ") == 2


@pytest.mark.skipif(not (SHARED / "blimp" / "adjunct_island.jsonl").is_file(),
                    reason=f"BLiMP not found at {SHARED / 'blimp'} (shared data is absent on this machine)")
def test_anomaly_reference_benchmark_chooses_on_dev_and_reports_held_out(tmp_path):
    _, res = _run_on_tiny("investigations/anomaly_reference.py", tmp_path / "r.json", "--per-phenomenon", "2",
                          "--base", "40", "--most", "80")
    rows = res["variants"]
    assert len(rows) == 8 and len({r["variant"] for r in rows}) == 8
    for r in rows:
        assert r["dev"] == max(r["dev_curve"]) and r["dev_curve"][r["dev_layer"]] == r["dev"]
        assert r["held_out_at_dev_layer"] == r["held_out_curve"][r["dev_layer"]]
        assert len(r["dev_curve"]) == len(r["held_out_curve"]) >= 2 and all(0 <= a <= 1 for a in r["dev_curve"])
    best = max(rows, key=lambda r: r["dev"])
    assert res["chosen"]["variant"] == best["variant"]
    assert res["pairs"]["dev"] > 0 and res["pairs"]["held_out"] > 0


def test_clipped_step_benchmark_alternates_three_sides(tmp_path):
    proc, res = _run_on_tiny("investigations/clipped_step.py", tmp_path / "r.json", "--rounds", "3", "--shapes", "4x16")
    (row,) = res["rows"]
    assert row["shape"] == "4x16" and all(row[f"{s}_ms"] > 0 for s in ("torch", "ptmlab", "unclipped"))
    assert _ratio_of_rounded(row["speedup"], row["torch_ms"], row["ptmlab_ms"])
    (t_lo, t_hi), (p_lo, p_hi) = row["torch_ms_range"], row["ptmlab_ms_range"]
    lo, hi = (t_lo - 0.05) / (p_hi + 0.05), (t_hi + 0.05) / (p_lo - 0.05)  # the ms are rounded to 0.1
    assert lo - 0.001 <= row["speedup_paired"] <= hi + 0.001  # a ratio of two rounds' medians lies in the ranges
    assert res["grad_norm_median"] > 0 and proc.stdout.count("round ") == 3


@needs_glue
def test_gpu_finetune_benchmark_still_runs_on_a_cpu(tmp_path):
    """The GPU benchmark still runs on a CPU: every side trains the same rows and is scored on the full dev set; the
    ratio and the FLOP rate are computed from what the sides recorded."""
    _, res = _run_on_tiny("gpu_finetune.py", tmp_path / "gpu_finetune.json", "--glue-dir", str(GLUE),
                          "--max-train", "64", "--repeats", "1", "--no-compile", "--mfu-batch", "64")
    sides = res["sides"]
    assert set(sides) == {"ptmlab", "trainer_random", "trainer_grouped", "bare_loop"} and res["device"] == "cpu"
    assert all(s["runs"][0]["examples"] == 64 and 0 <= s["accuracy_median"] <= 1 for s in sides.values())
    best = res["best_trainer"]
    assert res["speedup_vs_best_trainer"] == pytest.approx(
        sides["ptmlab"]["examples_per_second_median"] / sides[best]["examples_per_second_median"], rel=0.01)
    assert res["complete"] is True
    fr = res["flop_rate"]
    assert fr["tflops"] > 0 and fr["tflops"] == pytest.approx(
        6 * fr["non_embedding_params"] * fr["tokens"] / fr["train_seconds"] / 1e12, rel=0.01)


@needs_glue
def test_the_gpu_check_script_runs_end_to_end_on_a_cpu(tmp_path):
    """scripts/gpu_checks.sh, the one script a GPU machine runs, goes through every default step with DEVICE=cpu
    on the tiny model: the fine-tuning comparison and the long-attention costs each write their JSON under $OUT."""
    import os

    out = tmp_path / "out"
    env = {**os.environ, "DEVICE": "cpu", "GLUE_DIR": str(GLUE), "OUT": str(out), "PYTHON": sys.executable,
           "PTMLAB_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", "scripts/gpu_checks.sh"], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert (out / "gpu.txt").read_text().startswith("cpu: no GPU")
    finetune = json.loads(next(out.glob("gpu_finetune.cpu-*.json")).read_text())
    assert finetune["device"] == "cpu" and finetune["complete"] is True
    assert set(finetune["sides"]) == {"ptmlab", "trainer_random", "trainer_grouped", "bare_loop"}
    assert finetune["speedup_vs_best_trainer"] > 0
    long = json.loads(next(out.glob("long_attention.cpu-*.json")).read_text())
    cells = {(r["impl"], r["length"]) for r in long["rows"] if r["latency_s"] and r["latency_s"] > 0}
    assert cells == {(i, n) for i in ("sdpa", "window") for n in (64, 128)}


def test_alternating_sides_report_progress_after_every_run(tmp_path):
    """A benchmark with a time limit (the GPU check) writes after every run, so what finished survives a cut; with
    keep_going a side that fails is recorded and the others still run."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import _finetune_job as job
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    sides = {k: (lambda out, k=k: {"train_seconds": 2.0, "examples": 10 * (1 + "ab".index(k)), "accuracy": 0.5})
             for k in "ab"}
    seen = []
    records = job.alternate(sides, 2, tmp_path,
                            progress=lambda r: seen.append(json.loads(json.dumps(job.summarise(r)))))  # a copy
    assert [sorted(s) for s in seen] == [["a"], ["a", "b"], ["a", "b"], ["a", "b"]]
    assert [len(s["b"]["runs"]) for s in seen[1:]] == [1, 2, 2]  # round 2 starts with b (rotated order)
    assert job.summarise(records)["b"]["examples_per_second_median"] == 10.0

    def broken(out):
        raise RuntimeError("CUDA graphs refused")

    with pytest.raises(RuntimeError):
        job.alternate({**sides, "c": broken}, 1, tmp_path)
    records = job.alternate({"c": broken, **sides}, 1, tmp_path, keep_going=True)  # one failure stops nothing
    summary = job.summarise(records)
    assert summary["c"] == {"errors": ["RuntimeError: CUDA graphs refused"]}
    assert summary["a"]["examples_per_second_median"] == 5.0 and summary["b"]["runs"][0]["round"] == 0
    job.print_summary(summary)


def test_alternate_medians_times_every_side_after_a_call_of_its_own():
    """warm_each: each timed call follows an untimed call of the same side, so a side is never timed in what the
    previous one left behind (onnxruntime's spinning workers); the rotation itself is kept."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_timing", ROOT / "benchmarks" / "_timing.py")
    timing = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(timing)
    calls: list[str] = []
    sides = {k: (lambda k=k: calls.append(k)) for k in "ab"}
    res = timing.alternate_medians(sides, 3, warm_each=True)
    assert set(res) == {"a", "b"} and all(v >= 0 for v in res.values())
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] * 3
    calls.clear()
    timing.alternate_medians(sides, 2)
    assert calls == ["a", "b"] + ["a", "b"] * 2


@pytest.mark.slow
def test_flex_baseline_of_the_long_attention_benchmark_equals_window_attention_at_two_lengths():
    """The GPU check's FlexAttention baseline (benchmarks/long_attention.py) computes the same attention as ptmlab's
    window attention, and compiles again at a second length (a dynamically shaped compile failed there)."""
    import importlib.util

    import torch

    from ptmlab.longseq import cost

    spec = importlib.util.spec_from_file_location("long_attention_bench", ROOT / "benchmarks" / "long_attention.py")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    model = cost.minilm_shaped_model(256, window=32)
    model.encoder.layer = model.encoder.layer[:1]  # one layer: the attention is what is compared
    for n in (128, 192):
        ids = torch.randint(1000, 20000, (1, n), generator=torch.Generator().manual_seed(n))
        model.set_attn_implementation("ptmlab_window")
        with torch.no_grad():
            window = model(input_ids=ids).last_hidden_state
        bench._register_flex(model, n, 32, [0], "cpu")
        with torch.no_grad():
            flex = model(input_ids=ids).last_hidden_state
        assert torch.allclose(window, flex, atol=1e-4), (n, (window - flex).abs().max())
    # the check the GPU run starts with: ptmlab's two kernels agree (on a CPU forward only: no flex backward there)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # uncompiled FlexAttention warns that it is uncompiled: this is the check
        check = bench._kernel_check("cpu")
    assert check["max_abs_diff_forward"] < 1e-5 and check["max_abs_diff_grad"] is None and not check["flex_failed"]


RESULT_NAME = r"[a-z0-9_]+\.(cpu|cpu-[a-z0-9-]+|gpu-[a-z0-9-]+)\.(json|png)"


def test_result_files_are_named_by_benchmark_and_machine_and_hold_no_absolute_path():
    """One current file per benchmark and machine (``BENCHMARK.MACHINE.json``), and nothing in them that only makes
    sense on the machine that wrote them."""
    import re

    files = [*(ROOT / "benchmarks" / "results").iterdir(),
             *(ROOT / "benchmarks" / "investigations" / "results").iterdir()]
    assert files
    assert [f.name for f in files if not re.fullmatch(RESULT_NAME, f.name)] == []
    absolute = re.compile(r'(?<![\w.])/(?:tmp|work|home|root|usr|mnt|data)/|"[A-Za-z]:\\\\')  # also inside a command
    assert [f.name for f in files if f.suffix == ".json" and absolute.search(f.read_text())] == []


def test_benchmarks_write_by_default_where_their_result_belongs():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import _env
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    import re

    tag = _env.machine_tag()
    assert re.fullmatch(r"cpu(-[a-z0-9-]+)?", tag)
    assert _env.result_path("serve") == ROOT / "benchmarks" / "results" / f"serve.{tag}.json"
    assert _env.result_path("clipped_step_fp32", investigation=True).parent == (
        ROOT / "benchmarks" / "investigations" / "results")
    info = _env.machine_info()
    assert info["label"] == tag and info["cores"] >= 1 and info["torch"]
    assert _env.portable(ROOT / "benchmarks" / "results") == "benchmarks/results"
    assert _env.portable("/tmp/some-run") == "some-run"


def test_an_investigation_writes_its_default_result_under_investigations(tmp_path):
    """An investigation run from its new folder imports the benchmarks' helpers and names its output by machine."""
    proc = subprocess.run([sys.executable, "benchmarks/investigations/first_token.py", "--help"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0 and "--shapes" in proc.stdout, proc.stderr[-2000:]


def _synthetic_ner_and_qa(folder) -> tuple:
    """Small CoNLL-2003 and SQuAD v1.1 look-alikes (the built-in tasks read them through PTMLAB_CONLL2003_DIR and
    PTMLAB_SQUAD_DIR): a few sentences tagged with every CoNLL-2003 tag, and questions over contexts long enough
    for several 192-token windows."""
    import gzip
    import random

    rng = random.Random(0)
    ner, qa = folder / "conll2003", folder / "squad"
    ner.mkdir()
    qa.mkdir()
    names = {"PER": ["Peter Blackburn", "Anna Schmidt"], "LOC": ["Bonn", "New York"], "ORG": ["EU", "Acme Corp"],
             "MISC": ["German", "British"]}
    filler = "the council said on Monday that it would consider rejects call boycott lamb".split()
    for n_sent, name in ((40, "eng.train.gz"), (12, "eng.testa.gz"), (12, "eng.testb.gz")):
        lines = ["-DOCSTART- -X- O O", ""]
        for _ in range(n_sent):
            for _ in range(rng.randint(1, 3)):
                lines += [f"{w} NN O O" for w in rng.sample(filler, 3)]
                kind = rng.choice(sorted(names))
                lines += [f"{w} NNP I-NP {'B' if i == 0 else 'I'}-{kind}"
                          for i, w in enumerate(rng.choice(names[kind]).split())]
            lines.append("")
        with gzip.open(ner / name, "wt") as f:
            f.write("\n".join(lines) + "\n")
    for n_q, name in ((16, "train-v1.1.reconstructed.json.gz"), (8, "dev-v1.1.reconstructed.json.gz")):
        paragraphs = []
        for p in range(n_q // 2):
            words = [rng.choice(filler) for _ in range(rng.choice([20, 300]))]  # some contexts need several windows
            at = rng.randrange(len(words))
            words[at] = f"Bonn{p}"
            context = " ".join(words)
            start = context.index(f"Bonn{p}")
            qas = [{"id": f"{name[:3]}{p}-{k}", "question": f"Where did the council meet {k}?",
                    "answers": [{"text": f"Bonn{p}", "answer_start": start}]} for k in range(2)]
            paragraphs.append({"context": context, "qas": qas})
        with gzip.open(qa / name, "wt") as f:
            json.dump({"data": [{"title": "synthetic", "paragraphs": paragraphs}]}, f)
    return ner, qa


def _ner_qa_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import ner_qa
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return ner_qa


def test_ner_qa_trainer_features_are_the_rows_ptmlab_trains_on(tmp_path, monkeypatch):
    """The Trainer side's own feature preparation (first sub-token labels; QA windows with a 128-token stride and
    answer spans) gives the same token ids and labels as ptmlab's data layer, so only the training differs."""
    from ptmlab.data.loaders import load_task
    from ptmlab.data.qa import qa_features
    from ptmlab.data.tokens import encode_tokens
    from ptmlab.models.zoo import load_tokenizer

    ner_dir, qa_dir = _synthetic_ner_and_qa(tmp_path)
    monkeypatch.setenv("PTMLAB_CONLL2003_DIR", str(ner_dir))
    monkeypatch.setenv("PTMLAB_SQUAD_DIR", str(qa_dir))
    bench = _ner_qa_module()
    tok = load_tokenizer("tiny")
    train = load_task("conll2003").splits["train"]
    ours, theirs = encode_tokens(tok, train, 12), bench.trainer_token_features(tok, train, 12)
    assert theirs["input_ids"] == ours.input_ids and theirs["labels"] == ours.labels
    assert any(len(w) > 12 for w in train.tokens)  # truncation was exercised
    train = load_task("squad").splits["train"]
    ours, theirs = qa_features(tok, train, 192, 128, train=True), bench.trainer_qa_features(tok, train, 192)
    assert theirs["input_ids"] == ours.input_ids and theirs["token_type_ids"] == ours.token_type_ids
    assert theirs["start_positions"] == ours.start_positions and theirs["end_positions"] == ours.end_positions
    assert len(ours.input_ids) > len(train) and 0 in ours.start_positions  # several windows, some without answer
    assert bench.per_task("ner=all,qa=8000", ["ner", "qa"], "--max-train") == {"ner": None, "qa": 8000}
    assert bench.per_task("64", ["ner", "qa"], "--max-eval") == {"ner": 64, "qa": 64}


def test_ner_qa_benchmark_compares_ptmlab_and_the_trainer_and_distils(tmp_path, monkeypatch):
    """Both tasks, both sides and a distilled student on tiny: scores in [0, 1], the same rows on both sides, the
    ratio computed from the recorded training times."""
    ner_dir, qa_dir = _synthetic_ner_and_qa(tmp_path)
    monkeypatch.setenv("PTMLAB_CONLL2003_DIR", str(ner_dir))
    monkeypatch.setenv("PTMLAB_SQUAD_DIR", str(qa_dir))
    proc, res = _run_on_tiny("ner_qa.py", tmp_path / "ner_qa.json", "--tasks", "ner,qa", "--max-train",
                             "ner=32,qa=12", "--max-eval", "8", "--max-length", "ner=32,qa=192", "--batch-size", "8",
                             "--precision", "fp32", "--student", "layers:1")
    assert set(res["tasks"]) == {"ner", "qa"} and res["precision_all_sides"] == "fp32"
    for kind, main in (("ner", "entity_f1"), ("qa", "f1")):
        r = res["tasks"][kind]
        assert r["main_metric"] == main and set(r["sides"]) == {"ptmlab", "trainer"} and r["eval_examples"] == 8
        runs = {name: s["runs"][0] for name, s in r["sides"].items()}
        assert runs["ptmlab"]["examples"] == runs["trainer"]["examples"] >= r["train_rows"]
        for run in runs.values():
            assert run["examples_per_second"] == pytest.approx(run["examples"] / run["train_seconds"], rel=0.01)
            assert all(0.0 <= v <= 1.0 for v in run["metrics"].values()) and run["score"] == run["metrics"][main]
        assert r["speedup_vs_trainer"] == pytest.approx(
            runs["ptmlab"]["examples_per_second"] / runs["trainer"]["examples_per_second"], rel=0.01)
        d = r["distilled"]
        assert 0.0 <= d["score"] <= 1.0 and d["speedup_b32"] > 0 and d["params"] < d["teacher_params"]
        assert d["teacher_score"] == runs["ptmlab"]["score"]
        if d["teacher_score"]:
            assert d["retained_pct"] == pytest.approx(100 * d["score"] / d["teacher_score"], abs=0.01)
    assert res["tasks"]["qa"]["train_rows"] == 12 and res["tasks"]["qa"]["sides"]["ptmlab"]["runs"][0]["examples"] > 12
    assert proc.stdout.count("x the Trainer") == 2 and "% of the teacher" in proc.stdout  # the printed table


def test_ner_grouping_investigation_trains_both_batchings_and_reuses_finished_runs(tmp_path, monkeypatch):
    """Grouped and random batches per size and seed, scored on the development split; a second call over the same
    --runs folder reads the finished runs instead of training them again, and a run of other settings trains anew."""
    ner_dir, _ = _synthetic_ner_and_qa(tmp_path)
    monkeypatch.setenv("PTMLAB_CONLL2003_DIR", str(ner_dir))
    runs = tmp_path / "runs"
    args = ("investigations/ner_grouping.py", tmp_path / "g.json", "--sizes", "16,all", "--seeds", "1",
            "--runs", str(runs))
    _, res = _run_on_tiny(*args)
    assert [r["train_sentences"] for r in res["rows"]] == [16, "all"] and res["scored_on"] == "dev (testa)"
    for row in res["rows"]:
        g, r = row["sides"]["grouped"]["runs"][0], row["sides"]["random"]["runs"][0]
        assert not g["reused_run"] and not r["reused_run"] and 0.0 <= g["entity_f1"] <= 1.0
        assert row["f1_grouped_minus_random_per_seed"] == [pytest.approx(g["entity_f1"] - r["entity_f1"], abs=1e-4)]
    assert res["rows"][0]["sides"]["grouped"]["runs"][0]["steps"] == 1  # 16 sentences at batch 32
    assert res["rows"][1]["sides"]["grouped"]["runs"][0]["steps"] == 2  # all 40
    _, again = _run_on_tiny(*args)
    assert all(s["runs"][0]["reused_run"] for row in again["rows"] for s in row["sides"].values())
    assert again["rows"] == [{**row, "sides": {k: {**v, "runs": [{**v["runs"][0], "reused_run": True}]}
                                                for k, v in row["sides"].items()}} for row in res["rows"]]
    conf = runs / "16-grouped-1" / "config.yaml"  # a finished run of other settings is trained again
    conf.write_text(conf.read_text().replace("seed: 1\n", "seed: 7\n"))
    _, other = _run_on_tiny(args[0], args[1], "--sizes", "16", *args[4:])
    sides = other["rows"][0]["sides"]
    assert not sides["grouped"]["runs"][0]["reused_run"] and sides["random"]["runs"][0]["reused_run"]
