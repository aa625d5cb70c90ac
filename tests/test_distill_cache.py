"""The teacher-output cache on disk: exact size estimate, maps rebuilt from stored projections, the on-the-fly mode
giving the same features, a killed computation leaving nothing trusted, the free-disk check and stage lines."""

import json
from pathlib import Path

import pytest
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.data.encode import encode_split
from ptmlab.distill import cache
from ptmlab.distill.cache import PROJ, LiveTeacher, Shapes, estimate_bytes, teacher_outputs
from ptmlab.distill.config import DistillConfig
from ptmlab.distill.pipeline import run_distill
from tests.synthetic import tiny_teacher, write_task

NEEDS = {("hidden", 1), ("embeddings", -1), ("cls", 0), ("attention", 1), ("qk_relation", 1), ("vv_relation", 0)}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("task"), n_train=48, n_dev=16)


@pytest.fixture(scope="module")
def teacher(files, tmp_path_factory):
    return tiny_teacher(files, tmp_path_factory.mktemp("teacher") / "run")


def _setup(files, teacher):
    from ptmlab.data.loaders import load_task
    from ptmlab.distill.teacher import fingerprint
    from ptmlab.models.zoo import load_model, load_tokenizer

    t, tok = load_model(teacher), load_tokenizer(teacher)
    enc = encode_split(tok, load_task("synthetic", train_file=files["train"]).splits["train"], 32)
    return t, fingerprint(t), enc


def test_cache_is_the_estimated_size_and_reads_back_what_the_teacher_computes(files, teacher):
    t, fp, enc = _setup(files, teacher)
    out = teacher_outputs(t, fp, enc, 0, NEEDS, relation_heads=16, batch_size=8)
    assert not out.hit and out.batches_run == 6
    shapes = Shapes(t, 16)
    assert out.path.stat().st_size == estimate_bytes(enc.lengths, NEEDS, shapes)
    # 16 relation heads on width 64: short examples keep the map, longer ones the projections (half the bytes)
    forms = out.shape_rows["qk_relation@1"][:, 0]
    assert (forms == PROJ).any() and (forms != PROJ).any()
    live = LiveTeacher(t, enc, 0, NEEDS, shapes, 8)
    idx = sorted(range(len(enc)), key=lambda i: -enc.lengths[i])[:8]
    length = max(enc.lengths[i] for i in idx) + 3  # the student's batch may be padded further
    for key in [*NEEDS, ("logits", -1)]:
        a, b = out.gather(key, idx, length), live.gather(key, idx, length)
        assert a.shape == b.shape, key
        assert torch.allclose(a, b, atol=2e-3, rtol=2e-3), (key, float((a - b).abs().max()))
    assert live.batches_run == 1  # one teacher pass served every feature of the batch
    rows = out.gather(("attention", 1), idx, length)
    assert torch.allclose(rows.sum(-1)[:, :, : min(enc.lengths[i] for i in idx)], torch.ones(1), atol=2e-3)
    again = teacher_outputs(t, fp, enc, 0, NEEDS, relation_heads=16, batch_size=8)
    assert again.hit and again.batches_run == 0
    assert torch.equal(again.logits(len(enc)), out.logits(len(enc)))


def test_a_killed_computation_leaves_no_trusted_entry(files, teacher, monkeypatch):
    t, fp, enc = _setup(files, teacher)
    calls = {"n": 0}
    original = cache._store_batch

    def dies(*a, **k):
        calls["n"] += 1
        if calls["n"] > 3:
            raise KeyboardInterrupt
        return original(*a, **k)

    monkeypatch.setattr(cache, "_store_batch", dies)
    with pytest.raises(KeyboardInterrupt):
        teacher_outputs(t, fp, enc, 0, {("hidden", 0)}, batch_size=8)
    monkeypatch.setattr(cache, "_store_batch", original)
    assert not list(cache.teacher_dir().glob("*.partial*"))
    out = teacher_outputs(t, fp, enc, 0, {("hidden", 0)}, batch_size=8)
    assert not out.hit and out.batches_run == 6
    # a computation killed outright (SIGKILL) leaves its partial file: the next computation of that entry removes it
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = out.path.with_name(out.path.name + f".partial{dead.stdout.strip()}")
    stale.write_bytes(b"x" * 100)
    out.path.unlink()
    assert not teacher_outputs(t, fp, enc, 0, {("hidden", 0)}, batch_size=8).hit and not stale.exists()


def test_a_cache_larger_than_the_free_disk_is_refused_before_any_work(files, teacher, tmp_path, monkeypatch):
    monkeypatch.setattr(cache.shutil, "disk_usage", lambda _p: type("U", (), {"free": 1000})())
    out = tmp_path / "s"
    cfg = DistillConfig(teacher=teacher, task="synthetic", train_file=files["train"], dev_file=files["dev"],
                        max_length=32, student="layers:1", losses=["soft_ce", "hidden_mse", "attention_kl"],
                        max_steps=2, output=str(out), precision="fp32")
    with pytest.raises(PtmlabError, match=r"need .* on disk but .* free: pass --no-teacher-cache"):
        run_distill(cfg)
    assert not out.exists()
    # on the fly, nothing is written and the student still learns from the teacher's layers
    before = set(cache.teacher_dir().glob("*")) if cache.teacher_dir().is_dir() else set()
    cfg = DistillConfig(**{**cfg.__dict__, "teacher_cache": False, "max_steps": 6, "logging_steps": 1})
    s = run_distill(cfg)
    after = set(cache.teacher_dir().glob("*")) if cache.teacher_dir().is_dir() else set()
    assert after == before and s["teacher_cache"] == "computed" and s["steps"] == 6
    assert set(s["final_losses"]) == {"soft_ce", "hidden_mse", "attention_kl"}
    rows = [json.loads(x) for x in Path(out, "metrics.jsonl").read_text().splitlines()]
    stages = [r["stage"] for r in rows if "stage" in r]
    assert stages == ["teacher outputs", "final"]  # each stage logged as it starts
    assert rows.index(next(r for r in rows if r.get("stage") == "final")) < rows.index(
        next(r for r in rows if "loss" in r))


def test_a_run_killed_while_the_teacher_runs_says_so_and_resumes(files, teacher, tmp_path, monkeypatch):
    from tests.conftest import run_cli

    out = tmp_path / "k"
    cfg = DistillConfig(teacher=teacher, task="synthetic", train_file=files["train"], dev_file=files["dev"],
                        max_length=32, student="layers:1", losses=["soft_ce", "cosine"], max_steps=3,
                        output=str(out), precision="fp32", teacher_batch_size=8)
    calls = {"n": 0}
    original = cache._store_batch

    def dies(*a, **k):
        calls["n"] += 1
        if calls["n"] > 2:
            raise KeyboardInterrupt  # the kill, as the teacher's third batch is written
        return original(*a, **k)

    monkeypatch.setattr(cache, "_store_batch", dies)
    with pytest.raises(KeyboardInterrupt):
        run_distill(cfg)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["stage"] == "teacher outputs" and rows[-1]["examples"] == 48
    assert not (out / "checkpoint").exists()
    r = run_cli("distill", "--resume", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["steps"] == 3 and s["teacher_cache"] == "computed"


def test_meta_distill_killed_after_its_meta_teacher_resumes_without_training_it_again(tmp_path, monkeypatch):
    from ptmlab.core.rundir import RunDir
    from ptmlab.distill.metakd import MetaDistillConfig, run_meta_distill
    from tests.test_metakd import write_domain

    files = []
    for name in ("kitchen", "toys"):
        write_domain(tmp_path / f"{name}.tsv", name, n=40)
        files.append(f"{name}={tmp_path / f'{name}.tsv'}")
    out = tmp_path / "m"
    cfg = MetaDistillConfig(domain_files=files, teacher_model="tiny", student="layers:1", teacher_epochs=1, epochs=1,
                            batch_size=16, max_length=32, output=str(out))

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cache, "teacher_outputs", killed)
    with pytest.raises(KeyboardInterrupt):
        run_meta_distill(cfg)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["stage"] for r in rows if "stage" in r] == ["prototype scores", "meta_teacher", "teacher outputs"]
    saved = out / "meta_teacher" / "model.safetensors"
    stamp = saved.stat().st_mtime_ns
    monkeypatch.undo()
    s = run_meta_distill(RunDir.resume_config(out, MetaDistillConfig, "meta-distill"), resume=True)
    assert s["stages"] == [{"stage": "meta_teacher", "ran_before_resume": True}]
    assert saved.stat().st_mtime_ns == stamp and s["steps"] == 4 and (out / "summary.json").is_file()
