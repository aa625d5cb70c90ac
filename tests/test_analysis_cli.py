"""``ptmlab analyze heads|layers|attention|explanation`` on a saved tiny model and a synthetic task; bad inputs."""

import csv
import json

import pytest
import torch

from ptmlab.cli import main
from ptmlab.models.loader import save_model
from ptmlab.models.zoo import load_model, load_tokenizer
from tests.conftest import run_cli
from tests.synthetic import write_task


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """The CLI in this process (imports are paid once): exit code, stdout, stderr."""
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def assert_error(result: tuple[int, str, str], needle: str) -> None:
    rc, _, err = result
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error:") and needle.lower() in lines[0].lower(), err


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("analyze")
    torch.manual_seed(0)
    save_model(load_model("tiny", num_labels=2), load_tokenizer("tiny"), root / "model")
    paths = write_task(root / "data", n_train=20, n_dev=24)
    data = ["--task", "syn", "--train-file", paths["train"], "--dev-file", paths["dev"], "--max-length", "32"]
    return root, data


def test_heads_writes_heatmaps_and_a_table_of_every_head(setup):
    root, data = setup
    out = root / "heads"
    proc = run_cli("analyze", "heads", str(root / "model"), *data, "--output", str(out), "--batch-size", "8")
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    rows = list(csv.DictReader((out / "heads.csv").open()))
    assert len(rows) == 8 == s["units"] and {(int(r["layer"]), int(r["head"])) for r in rows} == \
        {(la, h) for la in range(2) for h in range(4)}
    helps = [[int(r["layer"]), int(r["head"])] for r in rows if float(r["removed_delta"]) > 0]
    assert s["removed_helps"] == helps and s["removed_helps_count"] == len(helps)
    for r in rows:
        assert float(r["removed_delta"]) == pytest.approx(float(r["removed_accuracy"]) - s["base"], abs=1e-6)
    assert (out / "plots" / "heads_removed.png").is_file() and (out / "plots" / "heads_uniform.png").is_file()
    assert f"removal helps {len(helps)}" in proc.stdout and (out / "report.html").is_file()


def test_layers_attention_and_explanation_write_their_outputs(setup, capsys):
    root, data = setup
    assert cli(capsys, "analyze", "layers", str(root / "model"), *data, "--output", str(root / "layers"))[0] == 0
    assert len(json.loads((root / "layers" / "layers.json").read_text())) == 2
    assert cli(capsys, "analyze", "attention", str(root / "model"), *data, "--output", str(root / "att"),
               "--examples", "1")[0] == 0
    s = json.loads((root / "att" / "summary.json").read_text())
    assert sum(s["head_types"].values()) == 8
    for layer in range(2):
        assert sum(v[layer] for v in s["layer_shares"].values()) == pytest.approx(1.0, abs=1e-3)
    assert (root / "att" / "plots" / "pattern_shares.png").is_file()
    assert cli(capsys, "analyze", "explanation", str(root / "model"), *data, "--max-eval", "6", "--permutations",
               "2", "--output", str(root / "expl"))[0] == 0
    s = json.loads((root / "expl" / "summary.json").read_text())
    assert 1 <= s["examples"] <= 6 and -1 <= s["median_tau_last_grad"] <= 1
    assert (root / "expl" / "plots" / "kendall_tau.png").is_file()


def test_bad_inputs_exit_2(setup, tmp_path, capsys):
    root, data = setup
    model = str(root / "model")
    assert_error(cli(capsys, "analyze", "heads", model, *data), "--output")
    assert_error(cli(capsys, "analyze", "heads", model, "--task", "sst2x", "--output", str(tmp_path / "o")), "sst2x")
    assert_error(cli(capsys, "analyze", "heads", model, *data, "--batch-size", "0", "--output", str(tmp_path / "o")),
                 "--batch-size")
    three = tmp_path / "three"
    save_model(load_model("tiny", num_labels=3), load_tokenizer("tiny"), three)
    assert_error(cli(capsys, "analyze", "layers", str(three), *data, "--output", str(tmp_path / "o")), "3 outputs")
    assert not (tmp_path / "o").exists()  # nothing written for a bad input
    assert_error(cli(capsys, "analyze", "anomaly", "tiny", "--output", str(tmp_path / "o")), "--blimp")
    (tmp_path / "b.jsonl").write_text('{"sentence_good": "x"}\n')
    assert_error(cli(capsys, "analyze", "anomaly", "tiny", "--blimp", str(tmp_path / "b.jsonl"),
                     "--output", str(tmp_path / "o")), "sentence_bad")
