"""--long-strategy in finetune and evaluate: options checked, the strategy's loss and evaluator used end to end, the
evaluate command agrees with the run's own dev evaluation, and bad combinations are one-line errors."""

from __future__ import annotations

import json

import pytest

from ptmlab.cli import main
from ptmlab.core.config import build_config
from ptmlab.core.errors import PtmlabError
from ptmlab.longseq.runs import MICRO_TOKENS, micro_batch_accum, plan_long_finetune, tokens_per_example
from ptmlab.longseq.synthetic import long_documents, write_long_task
from ptmlab.train.args import FinetuneConfig

WORDS = 150  # ~150 tokens per document: longer than the 32-token chunks and truncation used below


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    folder = tmp_path_factory.mktemp("longtask")
    return write_long_task(folder, n_train=24, n_dev=12, words=WORDS)


def _data_flags(task) -> list[str]:
    return ["--task", "syn", "--train-file", task["train"], "--dev-file", task["dev"]]


def test_bad_long_options_are_refused():
    base = {"model": "tiny", "output": "x"}
    with pytest.raises(PtmlabError, match="--long-strategy 'slide'"):
        build_config(FinetuneConfig, {**base, "long_strategy": "slide"})
    with pytest.raises(PtmlabError, match="--long-stride 600"):
        build_config(FinetuneConfig, {**base, "long_stride": 600})
    with pytest.raises(PtmlabError, match="--long-pool 'median'"):
        build_config(FinetuneConfig, {**base, "long_pool": "median"})
    cfg = build_config(FinetuneConfig, {**base, "long_strategy": "chunk", "long_chunk": 64, "long_stride": 62})
    assert cfg.long_strategy == "chunk" and cfg.long_chunk == 64


def test_micro_batches_bound_the_tokens_per_pass():
    window = build_config(FinetuneConfig, {"max_length": 4096, "long_strategy": "window", "batch_size": 32})
    k = micro_batch_accum(window)
    assert 32 % k == 0 and (32 // k) * 4096 <= MICRO_TOKENS < (32 // k) * 2 * 4096
    chunk = build_config(FinetuneConfig, {"max_length": 4096, "long_strategy": "chunk", "batch_size": 32})
    # 4,094 body tokens in 510-token windows 256 apart: 15 windows of 512 tokens
    assert tokens_per_example(chunk) == 15 * 512 and micro_batch_accum(chunk) == 32
    short = build_config(FinetuneConfig, {"max_length": 128, "long_strategy": "chunk", "batch_size": 32})
    assert micro_batch_accum(short) == 1


def test_synthetic_documents_carry_their_class_keywords():
    from ptmlab.longseq.synthetic import CLASSES

    rows = long_documents(20, words=50, marks=2, seed=3)
    assert rows == long_documents(20, words=50, marks=2, seed=3)
    for text, label in rows:
        words = text.split()
        assert len(words) == 50 and any(w in CLASSES[label] for w in words)
        other = next(c for c in CLASSES if c != label)
        assert not any(w in CLASSES[other] for w in words)


def test_chunk_finetune_then_evaluate_agree(task, tmp_path, capsys):
    run = tmp_path / "chunk"
    rc = main(["finetune", "--model", "tiny", *_data_flags(task), "--max-length", "512", "--long-strategy", "chunk",
               "--long-chunk", "32", "--long-stride", "16", "--long-pool", "max", "--batch-size", "16",
               "--max-steps", "3", "--output", str(run)])
    assert rc == 0
    err = capsys.readouterr().err
    assert "--grad-accum" in err  # 16 documents of up to 31 windows of 32 tokens do not fit one micro-batch
    summary = json.loads((run / "summary.json").read_text())
    config = (run / "config.yaml").read_text()
    assert "long_strategy: chunk" in config and "grad_accum: 1\n" not in config
    rc = main(["evaluate", str(run), *_data_flags(task), "--max-length", "512", "--long-strategy", "chunk",
               "--long-chunk", "32", "--long-stride", "16", "--long-pool", "max"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["long_strategy"] == "chunk"
    assert out["metrics"]["accuracy"] == pytest.approx(summary["metrics"]["accuracy"])
    assert out["metrics"]["macro_f1"] == pytest.approx(summary["metrics"]["macro_f1"])


def test_window_run_reads_the_whole_document(task, tmp_path, capsys):
    import numpy as np
    import torch

    from ptmlab.data.encode import encode_split
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.longseq.strategies import long_logits
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.evaluate import predict_logits

    long_model = tmp_path / "L"
    assert main(["longify", "tiny", "--max-length", "1024", "--window", "16", "--output", str(long_model)]) == 0
    run = tmp_path / "window"
    assert main(["finetune", "--model", str(long_model), *_data_flags(task), "--max-length", "1024",
                 "--long-strategy", "window", "--batch-size", "4", "--max-steps", "2", "--output", str(run)]) == 0
    summary = json.loads((run / "summary.json").read_text())
    capsys.readouterr()
    assert main(["evaluate", str(run), *_data_flags(task), "--max-length", "1024", "--long-strategy", "window"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["metrics"]["accuracy"] == pytest.approx(summary["metrics"]["accuracy"])
    # the window strategy is the plain batched forward pass over whole documents (nothing cut at 512 or 16)
    model = load_model(str(run)).eval()
    tok = load_tokenizer(str(run))
    cfg = build_config(FinetuneConfig, {"model": str(run), "task": "syn", "train_file": task["train"],
                                        "dev_file": task["dev"], "max_length": 1024})
    enc = encode_split(tok, load_task_data(cfg).splits["dev"], 1024)
    assert max(enc.lengths) > 100
    plain = predict_logits(model, enc, tok.pad_token_id, batch_size=5)
    ours = long_logits(model, enc.input_ids, "window").numpy()
    assert np.allclose(plain, ours, atol=1e-4)
    with torch.no_grad():  # and it is not the truncated reading
        cut = model(input_ids=torch.tensor([enc.input_ids[0][:16]])).logits[0].numpy()
    # the tiny random model's logits move little with the input (about 1e-4 here), far above float noise (~1e-7)
    assert np.abs(cut - ours[0]).max() > 1e-5


def test_long_runs_refuse_bad_combinations_before_writing(task, tmp_path, capsys):
    out = tmp_path / "bad"
    cases = [
        (["--model", "tiny", "--max-length", "1024", "--long-strategy", "window"], "longify"),
        (["--model", "tiny", "--max-length", "1024"], "beyond what this model supports (512 tokens)"),
        (["--model", "tiny", "--max-length", "1024", "--long-strategy", "chunk", "--long-chunk", "1024",
          "--long-stride", "512"], "beyond what this model supports"),
    ]
    for flags, needle in cases:
        rc = main(["finetune", *flags, *_data_flags(task), "--output", str(out)])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and err[0].startswith("error:") and needle in err[0], err
        assert not out.exists()
    rc = main(["evaluate", "tiny", "--task", "syn", "--train-file", task["train"], "--dev-file", task["dev"],
               "--max-length", "2048"])
    err = capsys.readouterr().err
    assert rc == 2 and "beyond what this model supports" in err


def test_pair_tasks_are_refused_for_chunk(tmp_path):
    train = tmp_path / "pairs.csv"
    train.write_text("a,b,label\n" + "".join(f"x{i} y,z w {i},{i % 2}\n" for i in range(30)))
    cfg = build_config(FinetuneConfig, {"model": "tiny", "task": "pairs", "train_file": str(train),
                                        "text_col": "a", "text_pair_col": "b", "max_length": 256,
                                        "long_strategy": "chunk", "long_chunk": 64, "long_stride": 32,
                                        "output": str(tmp_path / "r")})
    with pytest.raises(PtmlabError, match="text pairs"):
        plan_long_finetune(cfg)
