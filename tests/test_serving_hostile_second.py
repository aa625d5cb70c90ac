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
    for args in (["serve", str(folder)], ["predict", str(folder), "--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "p")],
                 ["extract", "verify-watermark", str(folder), "--queries", str(tmp_path / "q.txt")]):
        assert_clean_error(run_cli(*args, env=env), "pickle", "--trust-pickle")
    assert not marker.exists()


def test_model_safetensors_shards_count_as_weights(tmp_path):
    from ptmlab.models.loader import has_model_safetensors

    (tmp_path / "adapter_model.safetensors").write_bytes(b"x" * 10)
    assert not has_model_safetensors(tmp_path)
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"x" * 10)
    assert has_model_safetensors(tmp_path)
