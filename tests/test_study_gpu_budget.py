"""``--budget gpu``: the budget sized to decide a claim on one GPU where the full budget cannot on 2 CPU cores (the
pre-training studies on the unigram plateau, the multi-task studies with tasks at chance), ``full`` for the others;
and ``--corpus english``, the larger shared text it pre-trains on."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import pytest

from ptmlab.core.config import opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies.common import BUDGETS, StudyBase, parse_study_args
from tests.conftest import SHARED

needs_books = pytest.mark.skipif(not (SHARED / "text" / "gutenberg" / "austen-emma.txt").is_file(),
                                 reason=f"shared Gutenberg books not found at {SHARED / 'text'} (shared data is "
                                        f"absent)")


def _args(module: str, cls: str, name: str, budget: str):
    m = importlib.import_module(f"ptmlab.studies.{module}")
    return parse_study_args(name, getattr(m, cls), ["--budget", budget], small=m.SMALL, full=m.FULL,
                            gpu=getattr(m, "GPU", None))


@dataclass(frozen=True)
class _Toy(StudyBase):
    seeds: list[str] = opt(["0"], "seeds")
    steps: int = opt(10, "steps")


def test_a_study_without_a_gpu_preset_takes_its_full_budget():
    assert "gpu" in BUDGETS
    full = {"seeds": ["0", "1", "2"], "steps": 100}
    a = parse_study_args("toy", _Toy, ["--budget", "gpu"], full=full)
    assert (a.budget, a.seeds, a.steps) == ("gpu", ["0", "1", "2"], 100)
    b = parse_study_args("toy", _Toy, ["--budget", "gpu", "--steps", "7"], full=full, gpu={"steps": 1000})
    assert (b.seeds, b.steps) == (["0"], 7)  # its own preset, then flags over it


PRETRAINING = [("objectives", "ObjectivesArgs", "objectives"),
               ("span_corruption", "SpanCorruptionArgs", "span-corruption")]


@pytest.mark.parametrize("module,cls,name", PRETRAINING)
def test_pretraining_studies_pretrain_far_longer_on_more_text(module, cls, name):
    full, gpu = _args(module, cls, name, "full"), _args(module, cls, name, "gpu")
    assert gpu.max_flops >= 10 * full.max_flops  # thousands of steps, not the plateau's hundreds
    assert (full.corpus, gpu.corpus) == ("wikitext-2", "english")
    assert gpu.seeds == full.seeds == ["0", "1", "2"] and gpu.max_eval is None and gpu.max_train is None


def test_tokenizers_downstream_makes_many_passes_over_more_text():
    full = _args("tokenizers_downstream", "TokenizersDownstreamArgs", "tokenizers-downstream", "full")
    gpu = _args("tokenizers_downstream", "TokenizersDownstreamArgs", "tokenizers-downstream", "gpu")
    assert gpu.pretrain_epochs >= 5 * full.pretrain_epochs and gpu.corpus == "english"


def test_data_quality_pretrains_larger_models_for_many_passes_over_most_documents():
    full = _args("data_quality", "DataQualityArgs", "data-quality", "full")
    gpu = _args("data_quality", "DataQualityArgs", "data-quality", "gpu")
    assert full.pt_epochs == 1.0 and gpu.pt_epochs >= 10
    assert gpu.docs >= 5 * full.docs and gpu.pt_hidden > full.pt_hidden and gpu.pt_layers > full.pt_layers


def test_scaling_sweeps_budgets_a_hundred_times_larger_with_larger_models():
    full = _args("scaling", "ScalingStudyArgs", "scaling", "full")
    gpu = _args("scaling", "ScalingStudyArgs", "scaling", "gpu")
    assert max(map(float, gpu.budgets)) >= 100 * max(map(float, full.budgets))
    hidden = [int(s.split("x")[1]) for s in gpu.sizes]
    assert max(hidden) > max(int(s.split("x")[1]) for s in full.sizes) and gpu.corpus == "english"


@pytest.mark.parametrize("module,cls,name", [("multitask", "MultitaskStudyArgs", "multitask"),
                                             ("ticket_sharing", "TicketSharingArgs", "ticket-sharing")])
def test_multitask_studies_use_a_base_size_encoder_on_whole_training_sets(module, cls, name):
    full, gpu = _args(module, cls, name, "full"), _args(module, cls, name, "gpu")
    assert (full.model, gpu.model) == ("minilm", "mpnet")
    assert full.max_train == 2000 and gpu.max_train is None and gpu.lr < full.lr and gpu.max_eval == 0


def test_gpu_budget_results_count_as_whole_dev_set_runs():
    from ptmlab.studies.common import eval_size

    assert eval_size({"run": {"budget": "gpu", "command": "ptmlab study multitask --budget gpu"}}) == 0
    assert eval_size({"run": {"budget": "gpu", "command": "ptmlab study x --budget gpu --max-eval 9"}}) == 9


@needs_books
def test_the_english_corpus_is_one_utf8_file_the_pretraining_reader_accepts(tmp_path):
    from ptmlab.data.shared import more_text
    from ptmlab.pretrain.corpus import iter_documents

    assert more_text("wikitext-2", tmp_path) == []
    [path] = more_text("english", tmp_path)
    text = (tmp_path / "gutenberg-books.txt").read_text(encoding="utf-8")
    assert path == str(tmp_path / "gutenberg-books.txt") and len(text) > 4_000_000
    assert "Emma Woodhouse" in text and "Caesar" in text  # a UTF-8 book and a Latin-1 one
    docs = list(iter_documents([path]))  # raised "not UTF-8 text" on the books as shipped
    assert len(docs) > 1000
    mtime = (tmp_path / "gutenberg-books.txt").stat().st_mtime_ns
    assert more_text("english", tmp_path) == [path]
    assert (tmp_path / "gutenberg-books.txt").stat().st_mtime_ns == mtime  # written once, then reused
    with pytest.raises(PtmlabError, match="--corpus 'web' is not a corpus"):
        more_text("web", tmp_path)
