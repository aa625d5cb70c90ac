"""docs/api.md's examples run as written: every ``python`` block, in order, in one namespace, in an empty folder."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def test_every_python_example_in_docs_api_runs(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_api"}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"docs/api.md block {i + 1}", "exec"), namespace)
        except Exception as e:  # name the block that broke
            raise AssertionError(f"docs/api.md python block {i + 1} failed: {type(e).__name__}: {e}") from e
    out = capsys.readouterr().out
    assert "did you mean 'epochs'" in out and "whole numbers written as floats" in out
    assert (tmp_path / "runs" / "quick" / "summary.json").is_file()
