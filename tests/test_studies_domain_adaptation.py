"""domain-adaptation on every row of a domain: K folds, one per seed, so that K seeds test each row once."""

from __future__ import annotations

import pytest
import yaml
from conftest import SHARED

from ptmlab.core.errors import PtmlabError
from ptmlab.distill.domains import load_domains

DOMAINS = SHARED / "domains"


@pytest.mark.skipif(not (DOMAINS / "airline.tsv").is_file(), reason=f"no domain data at {DOMAINS}")
def test_folds_test_every_row_once():
    named = [("airline", DOMAINS / "airline.tsv")]
    fixed = load_domains(named).get("airline").splits
    n = sum(len(s.ids) for s in fixed.values())
    tested = []
    for k in range(5):
        sp = load_domains(named, fold=k, folds=5).get("airline").splits
        assert not set(sp["test"].ids) & (set(sp["train"].ids) | set(sp["dev"].ids))
        assert len(sp["dev"].ids) == len(fixed["dev"].ids) and len(sp["test"].ids) == pytest.approx(n / 5, abs=1)
        assert len(sp["train"].ids) + len(sp["dev"].ids) + len(sp["test"].ids) == n
        tested += sp["test"].ids
    assert sorted(tested) == list(range(n))  # every row tested exactly once over the five folds
    with pytest.raises(PtmlabError, match="fold 5"):
        load_domains(named, fold=5, folds=5)


@pytest.mark.skipif(not (DOMAINS / "airline.tsv").is_file(), reason=f"no domain data at {DOMAINS}")
def test_each_seed_tests_on_its_own_fold(tmp_path):
    from ptmlab.studies.domain_adaptation import run

    assert run(["--budget", "small", "--seeds", "0,1", "--folds", "2", "--output", str(tmp_path)]) == 0
    tests = [yaml.safe_load((tmp_path / f"airline-base-seed{s}" / "config.yaml").read_text())["test_file"]
             for s in (0, 1)]
    assert tests[0].endswith("data-fold0/airline/test.tsv") or "data-fold0" in tests[0]
    assert "data-fold1" in tests[1]
    adapted = yaml.safe_load((tmp_path / "airline-adapted-seed1" / "config.yaml").read_text())["test_file"]
    assert adapted == tests[1]  # base and adapted models of one seed meet the same test rows
