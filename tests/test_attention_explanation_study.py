"""Study ``attention-explanation`` with several fine-tunings (``--seeds``): one model per seed, the examples of every
seed pooled in the rule and in the adversarial section, and each seed's own numbers beside the pooled ones."""

from __future__ import annotations

import json

from ptmlab.studies.attention_explanation import run
from tests.conftest import GLUE, needs_glue


def test_attention_explanation_pools_the_examples_of_every_seed(tmp_path):
    out = tmp_path / "ae"
    assert run(["--budget", "small", "--seeds", "0,1", "--output", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["run"]["seeds"] == [0, 1]
    per_seed = {s: [e for e in res["examples"] if e["seed"] == s] for s in (0, 1)}
    assert len(per_seed[0]) == len(per_seed[1]) > 0 and len(res["examples"]) == 2 * len(per_seed[0])
    for s in (0, 1):
        assert (out / "finetuned" / f"seed-{s}" / "config.json").is_file() or \
            any((out / "finetuned" / f"seed-{s}").rglob("*.safetensors")), s
    # the two fine-tunings are different models: their attention/gradient agreement is not identical
    taus = [[e["tau_last_grad"] for e in per_seed[s]] for s in (0, 1)]
    assert taus[0] != taus[1]
    rows = {r["statistic"]: r for r in res["rows"]}
    for s in (0, 1):
        mean = float(sum(taus[s]) / len(taus[s])) if all(t == t for t in taus[s]) else None
        row = rows[f"seed {s}: tau_last_grad"]
        if mean is not None:
            assert abs(row["mean"] - mean) < 1e-9, (row, mean)
        share = sum(e["permutation_tvd"] < 0.05 for e in per_seed[s]) / len(per_seed[s])
        assert rows[f"seed {s}: share of examples with TVD < 0.05"]["median"] == share
    assert res["adversarial"]["examples"] == len(res["examples"])
    assert len(res["adversarial"]["per_example_jsd"]) == len(res["examples"])
    # the interval resamples the two seeds, then each seed's examples (not 24 pooled examples as if independent)
    assert f"2 seeds then {len(per_seed[0])} examples" in res["verdict"] or "no example" in res["verdict"]


@needs_glue
def test_heldout_rows_are_rows_no_fine_tuning_read():
    """``--explain heldout`` explains SST-2 training sentences outside every seed's fine-tuning subset (seeds 0 to
    the largest), outside dev, long enough, and holding no fine-tuned phrase of three words or more."""
    from types import SimpleNamespace

    from ptmlab.data.loaders import load_task, subset
    from ptmlab.studies.attention_explanation import data_split, heldout_rows
    from ptmlab.studies.fresh import SHORTEST_SHARED

    cfg = SimpleNamespace(task="sst2", glue_dir=str(GLUE), max_train=4000, max_eval=300, min_words=10,
                          explain="heldout", seeds=["1", "2"], seed=0)
    rows = heldout_rows(cfg, [1, 2])
    data = load_task("sst2", str(GLUE))
    read = {t.strip() for s in (0, 1, 2) for t in subset(data.splits["train"], 4000, s).text}
    assert len(rows) == 300 and len(set(rows.ids)) == 300 and rows.label is not None
    assert not {t.strip() for t in rows.text} & (read | {t.strip() for t in data.splits["dev"].text})
    assert min(len(t.split()) for t in rows.text) >= 10
    phrases = {t for t in read if len(t.split()) >= SHORTEST_SHARED}
    for t in rows.text[:50]:
        w = t.split()
        assert not any(" ".join(w[i:j]) in phrases for i in range(len(w))
                       for j in range(i + SHORTEST_SHARED, len(w) + 1)), t
    assert heldout_rows(cfg, [1, 2]).ids == rows.ids  # the draw is fixed: the same rows every run
    assert data_split(cfg)["explained"]["examples"] == 300
    assert data_split(SimpleNamespace(explain="dev")) == {}
