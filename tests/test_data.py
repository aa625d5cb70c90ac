import pytest
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.data.batching import collate, eval_batches, shard, train_batches
from ptmlab.data.encode import encode_split
from ptmlab.data.loaders import Split, load_task, subset
from tests.conftest import GLUE, needs_glue


@needs_glue
@pytest.mark.parametrize("task,train,dev,test,labels", [
    ("cola", 8551, 1043, 1063, 2), ("sst2", 67349, 872, 1821, 2), ("mrpc", 3668, 408, 1725, 2),
    ("stsb", 5749, 1500, 1379, 1), ("rte", 2490, 277, 3000, 2), ("wnli", 635, 71, 146, 2)])
def test_glue_tasks_load_with_official_sizes(task, train, dev, test, labels):
    data = load_task(task, str(GLUE))
    assert [len(data.splits[s]) for s in ("train", "dev", "test")] == [train, dev, test]
    assert data.spec.num_labels == labels
    assert data.splits["test"].label is None
    assert (data.splits["train"].text_pair is not None) == (task in ("mrpc", "stsb", "rte", "wnli"))


@needs_glue
def test_glue_quoting_and_labels():
    sst = load_task("sst2", str(GLUE)).splits["train"]
    assert all(y in (0, 1) for y in sst.label)
    rte = load_task("rte", str(GLUE))
    assert set(rte.splits["train"].label) == {0, 1}
    stsb = load_task("stsb", str(GLUE)).splits["dev"]
    assert stsb.label[0] == pytest.approx(5.0) and min(stsb.label) >= 0 and max(stsb.label) <= 5
    mrpc = load_task("mrpc", str(GLUE)).splits["dev"]
    assert mrpc.text_pair[0].startswith('" The foodservice')  # quotes kept (QUOTE_NONE), BOM stripped


def test_tweets_split_is_fixed_and_disjoint():
    d1 = load_task("tweets")
    d2 = load_task("tweets")
    sizes = {k: len(v) for k, v in d1.splits.items()}
    assert sum(sizes.values()) == 37243  # unique texts of the corpus
    assert sizes["train"] == int(37243 * 0.8)
    assert d1.splits["test"].text[:20] == d2.splits["test"].text[:20]
    train, test = set(d1.splits["train"].text), set(d1.splits["test"].text)
    assert not train & test
    assert set(d1.splits["train"].label) == {0, 1, 2}


def test_files_task_and_errors(tmp_path):
    f = tmp_path / "train.csv"
    f.write_text("sentence,y\ngood film,pos\nbad film,neg\nok film,pos\n")
    data = load_task("mine", train_file=str(f), dev_file=str(f), text_col="sentence", label_col="y")
    assert data.spec.labels == ("neg", "pos") and data.splits["train"].label == [1, 0, 1]
    with pytest.raises(PtmlabError, match="column 'text' .*--text-col"):
        load_task("mine", train_file=str(f), label_col="y")
    bad = tmp_path / "dev.csv"
    bad.write_text("sentence,y\nfine,maybe\n")
    with pytest.raises(PtmlabError, match="dev.csv:2: label 'maybe' is not in the label set"):
        load_task("mine", train_file=str(f), dev_file=str(bad), text_col="sentence", label_col="y")
    empty = tmp_path / "e.jsonl"
    empty.write_text('{"text": "a", "label": "x"}\n{"text": "  ", "label": "y"}\n')
    with pytest.raises(PtmlabError, match="e.jsonl:2: empty text"):
        load_task("mine", train_file=str(empty))
    reg = tmp_path / "r.tsv"
    reg.write_text("text\tlabel\na\t1.5\nb\tnan\n")
    with pytest.raises(PtmlabError, match="not a finite number"):
        load_task("mine", train_file=str(reg), label_kind="regression")
    with pytest.raises(PtmlabError, match="does not exist"):
        load_task("mine", train_file=str(tmp_path / "missing.csv"))
    with pytest.raises(PtmlabError, match="unknown task 'sst3'.*sst2"):
        load_task("sst3")


def test_subset_is_seeded_shuffle():
    s = Split([f"t{i}" for i in range(100)], None, list(range(100)), list(range(100)))
    a, b, c = subset(s, 10, 0), subset(s, 10, 0), subset(s, 10, 1)
    assert a.text == b.text and a.text != c.text and len(a) == 10
    assert a.text != s.text[:10]
    assert subset(s, None, 0) is s


def test_train_batches_cover_epoch_and_group_lengths():
    lengths = [(i * 37) % 61 + 3 for i in range(1000)]
    b1 = train_batches(lengths, 32, seed=3, epoch=0)
    assert b1 == train_batches(lengths, 32, seed=3, epoch=0)
    assert b1 != train_batches(lengths, 32, seed=3, epoch=1)
    flat = sorted(i for b in b1 for i in b)
    assert flat == list(range(1000))
    pad_grouped = sum(max(lengths[i] for i in b) * len(b) for b in b1)
    b_rand = train_batches(lengths, 32, seed=3, epoch=0, group_by_length=False)
    pad_random = sum(max(lengths[i] for i in b) * len(b) for b in b_rand)
    assert pad_grouped < 0.75 * pad_random
    assert sorted(i for b in eval_batches(lengths, 50) for i in b) == list(range(1000))


def test_shard_splits_global_batch():
    batch = list(range(7))
    parts = [shard(batch, r, 2) for r in range(2)]
    assert parts[0] + parts[1] == batch and abs(len(parts[0]) - len(parts[1])) <= 1


def test_encode_cache_and_collate():
    from ptmlab.models.zoo import load_tokenizer

    tok = load_tokenizer("tiny")
    split = Split(["a short text", "a somewhat longer text than the first one"], None, [0, 1], [0, 1])
    e1 = encode_split(tok, split, 16)
    e2 = encode_split(tok, split, 16)  # from the cache
    assert e1.input_ids == e2.input_ids and e1.lengths[0] < e1.lengths[1] <= 16
    batch = collate(e1, [0, 1], tok.pad_token_id)
    assert batch["input_ids"].shape[1] == max(e1.lengths)  # padded to the longest example only
    assert batch["attention_mask"].sum(1).tolist() == e1.lengths
    assert torch.equal(batch["labels"], torch.tensor([0, 1]))
    pair = Split(["first"], ["second part"], [1], [0])
    ep = encode_split(tok, pair, 16)
    assert ep.token_type_ids is not None and 1 in ep.token_type_ids[0]


def test_a_task_from_a_dev_file_alone_evaluates(tmp_path):
    """`ptmlab evaluate RUN --task X --dev-file F` needs no training file: labels come from the dev file."""
    from ptmlab.core.config import build_config
    from ptmlab.core.errors import PtmlabError
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.train.args import FinetuneConfig

    f = tmp_path / "dev.csv"
    f.write_text("text,label\ngood film,1\nbad film,0\nfine,1\n")
    cfg = build_config(FinetuneConfig, {"task": "reviews", "dev_file": str(f)})
    data = load_task_data(cfg, need_train=False)
    assert list(data.splits) == ["dev"] and data.spec.labels == ("0", "1") and len(data.splits["dev"]) == 3
    with pytest.raises(PtmlabError, match="train-file"):
        load_task_data(cfg)
