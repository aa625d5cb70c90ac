"""Head/layer ablation studies keep each seed's ablation in a cache beside its fine-tuning, so a multi-seed run that
was stopped resumes where it stopped; the cache is ignored when it was made for another setting, when it is
unreadable, and with ``--overwrite``."""

from __future__ import annotations

import json

from ptmlab.studies.ablation import run_layers


def _run(out, *extra):
    assert run_layers(["--budget", "small", "--seeds", "0,1", "--output", str(out), *extra]) == 0
    return json.loads((out / "results.json").read_text())


def _removed(res):
    """Layer -> the removed model's dev metric, from the results' rows."""
    return {r["layer"]: v for r in res["rows"] for k, v in r.items()
            if k.startswith("removed_") and k != "removed_delta"}  # removed_<metric>


def test_layer_ablation_resumes_from_each_seeds_cache(tmp_path):
    out = tmp_path / "la"
    first = _run(out)
    caches = [out / "layer-ablation" / f"seed-{s}.json" for s in (0, 1)]
    assert all(c.is_file() for c in caches)
    removed = [json.loads(c.read_text())["table"]["removed"] for c in caches]
    assert len(removed[0]) == 2  # tiny has two layers
    # the table is the mean over the two seeds' cached tables
    rows = _removed(first)
    assert set(rows) == {0, 1}
    # each layer's removal interval (seeds, then examples) sits around its mean change
    assert all(r["removal_low"] - 1e-9 <= r["removed_delta"] <= r["removal_high"] + 1e-9 for r in first["rows"])
    for layer, value in rows.items():
        assert abs(value - (removed[0][layer] + removed[1][layer]) / 2) < 1e-9, (layer, value)

    # a marked cache is read back instead of recomputed: its numbers reach the results
    marked = json.loads(caches[1].read_text())
    marked["table"]["removed"] = [0.123, 0.456]
    caches[1].write_text(json.dumps(marked))
    again = _run(out)
    got = _removed(again)
    assert abs(got[0] - (removed[0][0] + 0.123) / 2) < 1e-9 and abs(got[1] - (removed[0][1] + 0.456) / 2) < 1e-9

    # a cache made for another dev subset is not used; nor is a corrupt one; --overwrite recomputes
    other = json.loads(caches[0].read_text())
    other["key"]["max_eval"] = 999
    other["table"]["removed"] = [0.0, 0.0]
    caches[0].write_text(json.dumps(other))
    caches[1].write_text("{not json")
    third = _run(out)
    assert _removed(third) == rows
    caches[1].write_text(json.dumps(marked))
    assert _removed(_run(out, "--overwrite")) == rows


def test_no_uniform_skips_the_uniform_column_and_keeps_the_removal_numbers(tmp_path):
    """``--no-uniform`` (what ``head-ablation --budget full`` uses) measures removal alone: the same removal numbers
    as a run that also makes attention uniform, no uniform column in the rows, and a cache of its own."""
    both = _run(tmp_path / "both")
    only = _run(tmp_path / "only", "--no-uniform")
    assert _removed(only) == _removed(both)
    assert any(k.startswith("uniform_") for k in both["rows"][0])
    assert not any(k.startswith("uniform_") for r in only["rows"] for k in r)
    cache = json.loads((tmp_path / "only" / "layer-ablation" / "seed-0.json").read_text())
    assert cache["key"]["uniform"] is False
    assert only["outcome"] == both["outcome"]


def test_split_design_reuses_the_removals_and_records_its_choice(tmp_path):
    """``--helps split`` reads the same cached removals (part 2's design is not part of a cache's key) and records
    the unit chosen on even dev positions, each unit's choosing-half gain and the chosen unit's held-out interval."""
    out = tmp_path / "la"
    first = _run(out, "--no-uniform")
    stamps = [(out / "layer-ablation" / f"seed-{s}.json").stat().st_mtime_ns for s in (0, 1)]
    split = _run(out, "--no-uniform", "--helps", "split")
    assert [(out / "layer-ablation" / f"seed-{s}.json").stat().st_mtime_ns for s in (0, 1)] == stamps
    assert _removed(split) == _removed(first)
    helps = split["counts"]["helps"]
    assert helps["design"] == "split" and set(helps["choosing_gains"]) == {"[0]", "[1]"}
    assert helps["chosen"] == [int(max(helps["choosing_gains"], key=helps["choosing_gains"].get)[1])]
    held = helps["held_out"]
    assert held["low"] <= held["value"] <= held["high"] and "held out" in held["metric"]
    assert "helps" not in first["counts"]
