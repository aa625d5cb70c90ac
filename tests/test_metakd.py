"""Meta-KD: prototype scores, the meta-distill command on synthetic domains (tiny model), bad input, the study."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import yaml

from tests.conftest import SHARED, assert_clean_error, run_cli

POS, NEG = ["great", "excellent", "wonderful", "superb"], ["bad", "awful", "terrible", "poor"]
NOUNS = {"kitchen": ["pan", "knife", "blender"], "toys": ["doll", "puzzle", "ball"], "music": ["album", "song", "band"]}


def write_domain(path, name: str, n: int = 60, labels=("0", "1"), header="text\tlabel") -> None:
    r = random.Random(name)
    lines = [header]
    for i in range(n):
        y = i % 2
        lines.append(f"the {r.choice(NOUNS[name])} is {r.choice(POS if y else NEG)} really\t{labels[y]}")
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture()
def domains(tmp_path):
    out = {}
    for name in NOUNS:
        write_domain(tmp_path / f"{name}.tsv", name)
        out[name] = tmp_path / f"{name}.tsv"
    return out


def test_prototype_scores_favour_instances_near_other_domains():
    from ptmlab.distill.metakd import prototype_scores

    vec = np.array([[1.0, 0.0], [1.0, 0.2], [0.0, 1.0], [0.2, 1.0]], dtype=np.float32)
    dom = [0, 0, 1, 1]
    t = prototype_scores(vec, dom, 2, alpha=0.5)
    # instance 1 leans towards domain 1's prototype more than instance 0 does: a higher score
    assert t[1] > t[0] and t[3] > t[2]
    p0 = vec[:2].mean(0) / np.linalg.norm(vec[:2].mean(0))
    p1 = vec[2:].mean(0) / np.linalg.norm(vec[2:].mean(0))
    v0 = vec[0] / np.linalg.norm(vec[0])
    assert t[0] == pytest.approx(0.5 * v0 @ p0 + 0.5 * v0 @ p1, abs=1e-6)
    assert np.allclose(prototype_scores(vec, dom, 2, alpha=1.0)[:1], v0 @ p0)


def test_domain_splits_are_deterministic_and_disjoint(domains):
    from ptmlab.distill.domains import load_domains

    named = [(n, p) for n, p in domains.items()]
    a, b = load_domains(named), load_domains(named)
    s = a.get("toys").splits
    assert [len(s[k]) for k in ("train", "dev", "test")] == [48, 6, 6]
    assert s["test"].text == b.get("toys").splits["test"].text
    assert not set(s["train"].ids) & set(s["test"].ids)
    pooled, dom = a.pooled(["kitchen", "music"])
    assert len(pooled.splits["train"]) == 96 and sorted(set(dom["train"])) == [0, 2]


def test_meta_distill_end_to_end_and_evaluate_on_an_unseen_domain(domains, tmp_path):
    out = tmp_path / "student"
    p = run_cli("meta-distill", "--domain", f"kitchen={domains['kitchen']}", "--domain", f"toys={domains['toys']}",
                "--teacher-model", "tiny", "--student", "layers:1", "--teacher-epochs", "2", "--epochs", "2",
                "--batch-size", "16", "--teacher-lr", "1e-3", "--lr", "1e-3", "--output", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["layers"] == 1 and s["teacher_layers"] == 2 and s["student_domains"] == ["kitchen", "toys"]
    assert set(s["final_losses"]) == {"embedding_mse", "hidden_mse", "attention_mse", "soft_ce",
                                      "transferable_knowledge"}
    assert 0 < s["prototype_scores"]["kitchen"] <= 1
    assert (out / "meta_teacher" / "domain_head.safetensors").is_file()
    teacher_log = [json.loads(x) for x in (out / "stages" / "meta_teacher" / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in r for r in teacher_log)
    # an ordinary run: ptmlab evaluate works on a domain it never saw
    e = run_cli("evaluate", str(out), "--task", "music", "--train-file", str(domains["music"]), "--dev-file",
                str(domains["music"]), "--output", str(tmp_path / "e.json"))
    assert e.returncode == 0, e.stderr[-2000:]
    res = json.loads((tmp_path / "e.json").read_text())
    assert res["examples"] == 60 and 0 <= res["metrics"]["accuracy"] <= 1

    # the saved meta-teacher is reused for a per-domain student, without training a new one
    out2 = tmp_path / "student2"
    p = run_cli("meta-distill", "--domain", f"kitchen={domains['kitchen']}", "--domain", f"toys={domains['toys']}",
                "--teacher-model", "tiny", "--meta-teacher", str(out / "meta_teacher"), "--student", "layers:1",
                "--student-domain", "toys", "--epochs", "1", "--batch-size", "16", "--output", str(out2))
    assert p.returncode == 0, p.stderr[-2000:]
    s2 = json.loads((out2 / "summary.json").read_text())
    assert s2["student_domains"] == ["toys"] and s2["train_examples"] == 48 and s2["stages"] == []


@pytest.mark.parametrize("case", ["no_column", "labels_differ", "empty"])
def test_bad_domain_files_are_one_line_errors_and_write_nothing(domains, tmp_path, case):
    bad = tmp_path / "bad.tsv"
    if case == "no_column":
        write_domain(bad, "music", header="review\tlabel")
    elif case == "labels_differ":
        write_domain(bad, "music", labels=("neg", "pos"))
    else:
        bad.write_text("")
    out = tmp_path / "out"
    p = run_cli("meta-distill", "--domain", f"kitchen={domains['kitchen']}", "--domain", f"bad={bad}",
                "--teacher-model", "tiny", "--output", str(out))
    assert_clean_error(p, str(bad))
    assert not out.exists()


def test_meta_kd_study_small(domains, tmp_path):
    out = tmp_path / "study"
    p = run_cli("study", "meta-kd", "--budget", "small", "--domains", "", "--domain-files",
                f"kitchen={domains['kitchen']},toys={domains['toys']}", "--parts", "c,d", "--output", str(out),
                timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads((out / "results.json").read_text())
    assert {row["seed"] for row in r["per_domain"]} == {0}  # --budget small keeps one seed
    assert len(r["leave_one_out"]) == 2 and all(0 <= x["tfidf_lr"] <= 1 for x in r["leave_one_out"])
    assert "Leave one domain out" in r["verdict"] and r["rule"]["outcome"] == "inconclusive"  # one seed
    assert r["outcome"] == "cannot test"  # one seed shows no student above its domain's majority class


def write_unique_domain(path, name: str, n: int) -> list[str]:
    """A domain file whose every row is a different text (so that rows can be traced through split files)."""
    r = random.Random(name)
    texts = [f"review {i} of the {r.choice(NOUNS[name])}: {r.choice(POS if i % 2 else NEG)} really" for i in range(n)]
    path.write_text("text\tlabel\n" + "".join(f"{t}\t{i % 2}\n" for i, t in enumerate(texts)))
    return texts


def test_folds_partition_every_domain_and_seeds_take_them_in_turn(tmp_path):
    from ptmlab.core.errors import PtmlabError
    from ptmlab.distill.domains import load_domains, seed_folds

    sizes = {"kitchen": 60, "toys": 47, "music": 23}
    named = []
    for name, n in sizes.items():
        write_unique_domain(tmp_path / f"{name}.tsv", name, n)
        named.append((name, tmp_path / f"{name}.tsv"))
    for k in (2, 3, 5):
        tested = {name: [] for name in sizes}
        for fold in range(k):
            for d in load_domains(named, fold=fold, folds=k).domains:
                train, dev, test = (set(d.splits[s].ids) for s in ("train", "dev", "test"))
                assert not (train & dev or train & test or dev & test)  # disjoint within the fold
                assert train | dev | test == set(range(sizes[d.name]))  # and every row is in one of them
                assert len(dev) == int(0.1 * sizes[d.name]) and len(d.splits["test"].ids) == len(test)
                tested[d.name] += sorted(test)
        for name, n in sizes.items():
            assert sorted(tested[name]) == list(range(n)), (k, name)  # over the K folds each row tested once
    assert seed_folds([3, 7, 9, 11, 4], 2) == {3: 0, 7: 1, 9: 0, 11: 1, 4: 0}
    assert seed_folds([3, 7], 0) == {3: None, 7: None}
    with pytest.raises(PtmlabError, match="--folds 1"):
        seed_folds([0], 1)


def test_meta_kd_study_with_folds_tests_every_row_once(tmp_path):
    from ptmlab.core.errors import PtmlabError
    from ptmlab.studies.meta_kd import decide, method_scores, run
    from ptmlab.studies.verdict import OUTCOMES

    texts = {"kitchen": write_unique_domain(tmp_path / "kitchen.tsv", "kitchen", 60),
             "toys": write_unique_domain(tmp_path / "toys.tsv", "toys", 47)}
    files = ",".join(f"{d}={tmp_path / d}.tsv" for d in texts)
    out = tmp_path / "study"
    with pytest.raises(PtmlabError, match="--folds 1"):
        run(["--budget", "small", "--domains", "", "--domain-files", files, "--folds", "1", "--output", str(out)])
    assert run(["--budget", "small", "--domains", "", "--domain-files", files, "--seeds", "0,1", "--folds", "2",
                "--output", str(out)]) == 0
    r = json.loads((out / "results.json").read_text())
    # the split files the runs read: per fold, test rows disjoint from training and dev rows; over the folds, every
    # row of every domain tested once
    for d, rows in texts.items():
        tested = []
        for fold in (0, 1):
            part = {s: (out / f"data-fold{fold}" / f"{d}.{s}.tsv").read_text().splitlines()[1:]
                    for s in ("train", "dev", "test")}
            test = {line.split("\t")[0] for line in part["test"]}
            assert not test & {line.split("\t")[0] for line in part["train"] + part["dev"]}
            tested += sorted(test)
        assert sorted(tested) == sorted(rows)
    # seed i on fold i: its students are tested on that fold's rows, dev and best epoch from the others
    assert [(p["seed"], p["fold"]) for p in r["per_fold"]] == [(0, 0), (1, 1)] and r["folds"] == 2
    for p in r["per_fold"]:
        base = out / f"seed{p['seed']}-fold{p['fold']}"
        fold_dir = out / f"data-fold{p['fold']}"
        for d in texts:
            n_test = len((fold_dir / f"{d}.test.tsv").read_text().splitlines()) - 1
            assert p["test_rows"][d] == n_test
            kd = yaml.safe_load((base / "a" / d / "student" / "config.yaml").read_text())
            assert (kd["test_file"], kd["dev_file"]) == (str(fold_dir / f"{d}.test.tsv"),
                                                         str(fold_dir / f"{d}.dev.tsv"))
            meta = json.loads((base / "c" / d / "summary.json").read_text())["per_domain_test_accuracy"]
            assert meta[d]["examples"] == n_test  # the meta-distilled student is scored on the same fold
        assert sum(p["test_rows"].values()) == sum(x["test_rows"] for x in r["leave_one_out"]
                                                  if x["seed"] == p["seed"])
        for m in ("single_kd", "pooled_kd", "meta_kd"):  # the per-fold numbers are the ones the rule pairs
            assert p[m] == pytest.approx(np.mean([x[m] for x in r["per_domain"] if x["seed"] == p["seed"]]))
            assert r["method_scores"][m][p["seed"]] == pytest.approx(p[m])
    assert sum(p["test_rows"]["toys"] for p in r["per_fold"]) == 47
    assert r["outcome"] in OUTCOMES and r["rule"]["outcome"] == decide(method_scores(r["per_domain"])).outcome
    assert "paired t over 2 seeds" in r["rule"]["reason"]


def test_meta_distill_fold_out_of_range_is_a_one_line_error(domains, tmp_path):
    p = run_cli("meta-distill", "--domain", f"kitchen={domains['kitchen']}", "--domain", f"toys={domains['toys']}",
                "--teacher-model", "tiny", "--folds", "2", "--fold", "2", "--output", str(tmp_path / "out"))
    assert_clean_error(p, "--fold 2")
    assert not (tmp_path / "out").exists()


# the verdict rule on synthetic numbers (every outcome): tests/test_study_rules_b.py


@pytest.mark.skipif(not (SHARED / "domains" / "books.tsv").is_file(), reason="shared domain data is absent")
def test_shared_domains_load_with_one_label_set():
    from ptmlab.distill.domains import load_domains, resolve_domains

    dd = load_domains(resolve_domains(["books", "airline"], [], str(SHARED / "domains")))
    assert dd.labels == ["0", "1"] and [len(d.splits["train"]) for d in dd.domains] == [1600, 1600]
