"""The built-in longdocs task: long passages, 13 books, disjoint deterministic splits, headers removed."""

from __future__ import annotations

import pytest
from conftest import SHARED

from ptmlab.core.errors import PtmlabError
from ptmlab.data.longdocs import BOOKS, longdocs_passages, strip_gutenberg

GUTENBERG = SHARED / "text" / "gutenberg"
needs_books = pytest.mark.skipif(not (GUTENBERG / "austen-emma.txt").is_file(),
                                 reason=f"Gutenberg books not found at {GUTENBERG} (shared data is absent)")


def test_strip_headers():
    text = ("The Project Gutenberg Etext of X\nlegal stuff\n*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*END*\n"
            "\nCHAPTER 1\n" + "It was a dark night.\n" * 20 + "\nEnd of The Project Gutenberg Etext of X\nmore\n")
    assert strip_gutenberg(text) == "CHAPTER 1\n" + "It was a dark night.\n" * 19 + "It was a dark night."


def test_missing_data_names_the_path(tmp_path):
    with pytest.raises(PtmlabError, match=str(tmp_path)):
        longdocs_passages(tmp_path)


@needs_books
def test_longdocs_task():
    from ptmlab.data.loaders import load_task
    from ptmlab.models.zoo import load_tokenizer

    data = load_task("longdocs")
    train, dev = data.split("train"), data.split("dev")
    assert data.spec.labels == BOOKS and set(train.label) == set(range(13)) == set(dev.label)
    assert len(train) > 200 and len(dev) > 40
    tok = load_tokenizer("minilm")
    lengths = [len(tok(t, verbose=False)["input_ids"]) - 2 for t in train.text[::25] + dev.text[::10]]
    assert min(lengths) >= 1990 and max(lengths) <= 4010
    assert not set(train.text) & set(dev.text)
    assert not any("gutenberg" in t.lower() for t in train.text + dev.text)
    again = load_task("longdocs")
    assert again.split("dev").text == dev.text and again.split("train").label == train.label
