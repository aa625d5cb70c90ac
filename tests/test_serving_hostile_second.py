"""A second hostile review of serving, keys and extraction: pickle behind a decoy, unauthenticated exhaustion, a
stalled database, detector bypasses, secrets in records, and the crashes that followed odd input."""

from __future__ import annotations

import pickle
import shutil

import pytest
from safetensors.torch import load_file

from ptmlab.core.errors import PtmlabError
from ptmlab.serve.app import create_app
from ptmlab.serve.config import ServeConfig
from tests.conftest import assert_clean_error, run_cli


class _Payload:
    """A pickle that writes a marker file when it is unpickled: what a hostile checkpoint would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _decoy(victim, folder, decoy: str):
    shutil.copytree(victim, folder)
    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    marker = folder.parent / f"{folder.name}.unpickled"
    with open(folder / "pytorch_model.bin", "wb") as f:
        pickle.dump({"weights": state, "payload": _Payload(marker)}, f)
    (folder / decoy).write_bytes(b"")
    return marker


@pytest.mark.parametrize("decoy", ["adapter_model.safetensors", "model.safetensors", "other.safetensors"])
def test_a_pickle_behind_a_decoy_safetensors_is_never_unpickled(victim, tmp_path, store, decoy):
    folder = tmp_path / "decoy"
    marker = _decoy(victim, folder, decoy)
    with pytest.raises(PtmlabError, match="pickle|safetensors"):
        create_app(str(folder), ServeConfig(detector=False), store)
    assert not marker.exists()
    from ptmlab.models.zoo import load_model

    with pytest.raises(PtmlabError, match="pickle|safetensors"):
        load_model(str(folder))
    assert not marker.exists()


def test_the_commands_refuse_the_decoy_in_one_line(victim, tmp_path):
    folder = tmp_path / "decoy"
    marker = _decoy(victim, folder, "adapter_model.safetensors")
    env = {"PTMLAB_HOME": str(tmp_path / "h")}
    (tmp_path / "q.txt").write_text("a query\nanother one\n")
    (tmp_path / "in.jsonl").write_text('{"text": "good film"}\n')
    predict = ["predict", str(folder), "--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "p")]
    for args in (["serve", str(folder)], predict,
                 ["extract", "verify-watermark", str(folder), "--queries", str(tmp_path / "q.txt")]):
        assert_clean_error(run_cli(*args, env=env), "pickle", "--trust-pickle")
    assert not marker.exists()


def test_model_safetensors_shards_count_as_weights(tmp_path):
    from ptmlab.models.loader import has_model_safetensors

    (tmp_path / "adapter_model.safetensors").write_bytes(b"x" * 10)
    assert not has_model_safetensors(tmp_path)
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"x" * 10)
    assert has_model_safetensors(tmp_path)


# -- 4. the extraction detector against rephrasings ----------------------------------------------------------------
_ACCENTS = str.maketrans("aeiou", "áéíóú")
_CYRILLIC = str.maketrans("aeopcxy", "аеорсху")
REPHRASINGS = {
    "accents": lambda t: t.translate(_ACCENTS),
    "upper case": str.upper,
    "mixed case": lambda t: "".join(c.upper() if i % 2 else c for i, c in enumerate(t)),
    "look-alikes": lambda t: t.translate(_CYRILLIC),
    "full width": lambda t: "".join(chr(ord(c) + 0xFEE0) if "a" <= c <= "z" else c for c in t),
    "zero-width": lambda t: "\u200b".join(t),
    "inner punctuation": lambda t: " ".join(w[:len(w) // 2] + "." + w[len(w) // 2:] if len(w) > 3 else w
                                            for w in t.split()),
}


@pytest.fixture(scope="module")
def detector():
    from ptmlab.serve.detector import fit_default_detector

    return fit_default_detector()


@pytest.mark.parametrize("name", list(REPHRASINGS))
def test_a_rephrased_random_query_scores_as_the_query_does(detector, name):
    import random

    from ptmlab.data.wordlists import random_words

    queries = random_words(60, [12, 18, 25], random.Random(0))
    plain = detector.score(queries)
    rephrased = detector.score([REPHRASINGS[name](q) for q in queries])
    assert all(p is not None for p in plain) and sum(p > 0.9 for p in plain) >= 55
    assert all(r is not None for r in rephrased), name  # none escapes by being left unjudged
    assert max(abs(r - p) for r, p in zip(rephrased, plain, strict=True)) < 0.05, name


def test_accented_random_queries_are_blocked_like_plain_ones(victim, store):
    import random

    import httpx

    from ptmlab.data.wordlists import random_words
    from ptmlab.serve.server import serve_in_thread

    queries = [REPHRASINGS["accents"](q) for q in random_words(40, [12, 18, 25], random.Random(1))]
    thief = store.create_key("thief", rate=1e4, burst=1e4)
    cfg = ServeConfig(detector_action="block", detector_min_queries=20)
    with serve_in_thread(create_app(str(victim), cfg, store)) as url:
        def post(texts):
            return httpx.post(f"{url}/v1/predict", json={"texts": texts}, timeout=60,
                              headers={"Authorization": f"Bearer {thief}"})

        assert post(queries[:30]).status_code == 200
        blocked = post(queries[30:31])
    assert blocked.status_code == 403 and "extraction" in blocked.json()["error"]
    scored, score = store.key_score(store.resolve_key("thief").id)
    assert scored == 30 and score > 0.9


# -- 6-9: odd input that crashed, and settings that contradict ------------------------------------------------------
def test_deeply_nested_json_is_a_one_line_error(tmp_path):
    import httpx

    from ptmlab.extraction.client import _checked
    from ptmlab.serve.defences import read_queries

    deep = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(PtmlabError, match="nests too deep"):
        _checked(httpx.Response(200, content=deep), 1)
    (tmp_path / "q.json").write_bytes(b'{"texts": ' + deep + b"}")
    with pytest.raises(PtmlabError, match="is not a queries.json"):
        read_queries(str(tmp_path / "q.json"))


def test_a_victim_answering_huge_probabilities_is_refused():
    import httpx

    from ptmlab.extraction.client import _checked

    body = {"label_names": ["neg", "pos"], "policy": "probs",
            "predictions": [{"label_id": 0, "probs": [1e308, 1e308]}]}
    with pytest.raises(PtmlabError, match=r"numbers in \[0, 1\]"):
        _checked(httpx.Response(200, json=body), 1)


def test_settings_that_never_end_or_contradict_are_refused(tmp_path):
    from ptmlab.core.config import build_config, load_yaml
    from ptmlab.extraction.extract import ExtractConfig

    with pytest.raises(PtmlabError, match="--epochs must be at most"):
        build_config(ExtractConfig, {"victim": "http://127.0.0.1:1", "epochs": 1e308})
    with pytest.raises(PtmlabError, match="--seed must be in 0.."):
        build_config(ExtractConfig, {"victim": "http://127.0.0.1:1", "seed": 10**23})
    (tmp_path / "c.yaml").write_text("chunk: null\n")
    with pytest.raises(PtmlabError, match="option 'chunk' .* is empty \\(null\\).*default: 32"):
        build_config(ExtractConfig, load_yaml(tmp_path / "c.yaml"))
    with pytest.raises(PtmlabError, match="--max-wait-ms 10000 leaves no time within --timeout 2"):
        ServeConfig(max_wait_ms=10_000, timeout=2)
    out = tmp_path / "copy"
    proc = run_cli("extract", "--victim", "http://127.0.0.1:9", "--seed", str(10**23), "--output", str(out))
    assert_clean_error(proc, "--seed")
    assert not out.exists()  # refused before anything was queried or written


def test_a_tiny_rate_is_refused_and_a_stored_one_still_answers(store):
    from ptmlab.serve.ratelimit import MAX_RETRY_AFTER, retry_after_header

    with pytest.raises(PtmlabError, match="--rate 1e-310 is below"):
        store.create_key("slow", rate=1e-310)
    assert retry_after_header(1 / 1e-310) == str(MAX_RETRY_AFTER)
    assert retry_after_header(float("nan")) == str(MAX_RETRY_AFTER) and retry_after_header(0.2) == "1"


def test_key_names_that_look_alike_are_refused(store):
    store.create_key("alice")
    for lookalike in ("\u0430lice", "ａｌｉｃｅ", "ALICE", "álice", "\u03b1lice"):  # Cyrillic, full width, case, ...
        with pytest.raises(PtmlabError, match="looks like the name of key"):
            store.create_key(lookalike)
    with pytest.raises(PtmlabError, match="printable"):  # an invisible character is no name at all
        store.create_key("al\u200bice")
    store.create_key("alice")  # the same name again stays allowed: keys are told apart by id
    assert store.create_key("bob").startswith("ptm")
