"""``benchmarks/memory.py`` on tiny data: commands read from a markdown file, run with their peak memory and data
size, distillation also without the teacher cache, placeholders and missing inputs skipped with the reason."""

import json
import subprocess
import sys

from tests.conftest import ROOT
from tests.synthetic import write_task


def test_memory_benchmark_measures_doc_commands_and_the_scaling_pair(tmp_path):
    f = write_task(tmp_path / "task", n_train=48, n_dev=16)
    data = f"--task synthetic --train-file {f['train']} --dev-file {f['dev']} --max-length 32"
    doc = tmp_path / "doc.md"
    doc.write_text("Examples:\n\n"
                   f"    ptmlab distill --teacher minilm --student layers:1 --losses soft_ce,hidden_mse {data} \\\n"
                   f"        --output runs/s   # minilm: swapped for tiny\n"
                   "    ptmlab distill --teacher RUN --student layers:1 --output runs/x\n"
                   "    ptmlab distill --teacher runs/missing --output runs/y\n"
                   "    ptmlab evaluate runs/s --task synthetic\n")
    out = tmp_path / "memory.json"
    proc = subprocess.run([sys.executable, "benchmarks/memory.py", "--docs", str(doc), "--model", "tiny",
                           "--max-steps", "2", "--scaling", "16,all", "--scaling-cache", "on", "--scaling-teacher",
                           "minilm", "--scaling-student", "layers:1", "--scaling-args",
                           f"--losses soft_ce,hidden_mse,attention_kl {data}",
                           "--scratch", str(tmp_path / "scratch"), "--output", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    rows = {(c["source"].rsplit(":", 1)[1], c.get("teacher_cache")): c for c in r["commands"]}
    assert set(rows) == {("3", "on"), ("3", "off"), ("5", None), ("6", None)}  # evaluate: no training
    for key in (("3", "on"), ("3", "off")):
        c = rows[key]
        assert c["status"] == "ok" and c["train_examples"] == 48, c
        assert 100 < c["peak_rss_mib"] < 8192 and "--max-steps 2" in c["ran"]
        assert 100 < c["max_process_rss_mib"] <= c["peak_rss_mib"] * 1.2  # the CLI's own high-water mark
    on, off = rows[("3", "on")]["ran"], rows[("3", "off")]["ran"]
    assert "--teacher tiny" in on and "--output SCRATCH/runs/s" in on and "--no-teacher-cache" in off
    assert rows[("5", None)]["status"] == "skipped: placeholder 'RUN'"
    assert rows[("6", None)]["status"] == "skipped: needs runs/missing, which no earlier command made"
    sizes = {s["size"]: s for s in r["scaling"]}
    assert sizes["16"]["train_examples"] == 16 and sizes["all"]["train_examples"] == 48
    ratio = r["targets"]["distill_all_vs_small_within_1_5x"]
    assert ratio["examples"] == [16, 48] and ratio["memory_ratio"] == round(
        sizes["all"]["peak_rss_mib"] / sizes["16"]["peak_rss_mib"], 3)
    assert r["targets"]["readme_under_8_gib"]["measured"] == 0  # no README command in this run
    assert "peak MiB" in proc.stdout
