"""Benchmark: ``ptmlab clean`` throughput and near-duplicate detection.

1. MB/s of the full default pipeline with 1 and with 2 worker processes, on the same generated noisy corpus (clean
   WikiText/Gutenberg prose with boilerplate lines, plus boilerplate pages, menus, copies, code and other languages;
   ``ptmlab.clean.noisy``), in one run. Both runs must write identical outputs; the ratio is the parallel speed-up.
   The acceptance numbers (noise removed, clean kept, boilerplate lines removed) are reported for the same corpus.
2. Near-duplicate precision and recall of ``near_dedup`` alone, on clean documents followed by edited copies at
   several word-edit rates (the known near duplicates) and no other copies: precision = removed documents that are
   copies / removed documents; recall = copies removed / copies.

Run from the project root: ``python benchmarks/clean.py`` (needs ../shared/data). Writes
``benchmarks/results/clean.MACHINE.json`` and prints a table.
"""

from __future__ import annotations

# isort: off
import _env  # noqa: F401  (first: offline defaults)
# isort: on

import argparse
import json
import random
import tempfile
from pathlib import Path

from ptmlab.clean import CleanConfig, run_clean
from ptmlab.clean.noisy import _near_copy, load_text_documents, make_noisy_corpus, score
from ptmlab.core.io import atomic_write_json

TEXT = _env.ROOT.parent / "shared" / "data" / "text"


def _write(path: Path, docs: list[dict]) -> None:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")


def throughput(tmp: Path, n_clean: int) -> dict:
    docs, truth = make_noisy_corpus(load_text_documents(TEXT, n_clean, seed=11), seed=11)
    src = tmp / "noisy.jsonl"
    _write(src, docs)
    rows, outputs = [], []
    for workers in (1, 2):
        out = tmp / f"out{workers}"
        s = run_clean(CleanConfig(inputs=[str(src)], output=str(out), workers=workers))
        outputs.append((out / "clean.jsonl").read_text() + (out / "removed.jsonl").read_text())
        rows.append({"workers": workers, "mb": s["totals"]["bytes_in"] / 1e6, "seconds": s["seconds"],
                     "mb_per_s": s["mb_per_s"]})
    kept = {r["id"]: r["text"] for r in map(json.loads, (tmp / "out1" / "clean.jsonl").read_text().splitlines())}
    return {"documents": len(docs), "rows": rows, "identical_outputs": outputs[0] == outputs[1],
            "speedup_2_workers": rows[0]["seconds"] / rows[1]["seconds"], "acceptance": score(truth, kept)}


def near_duplicates(tmp: Path, n_base: int, rates: list[float]) -> list[dict]:
    base = load_text_documents(TEXT, n_base * (len(rates) + 1), seed=21)
    rows = []
    for k, rate in enumerate(rates):
        rng = random.Random(k)
        originals = base[k * n_base:(k + 1) * n_base]
        docs = [{"id": f"o{i}", "text": t} for i, t in enumerate(originals)]
        docs += [{"id": f"c{i}", "text": _near_copy(t, rng, rate)} for i, t in enumerate(originals)]
        src = tmp / f"near{k}.jsonl"
        _write(src, docs)
        out = tmp / f"near{k}"
        run_clean(CleanConfig(inputs=[str(src)], output=str(out), rules=["near_dedup"]))
        removed = [json.loads(line)["id"] for line in (out / "removed.jsonl").read_text().splitlines()]
        true = sum(r.startswith("c") for r in removed)
        rows.append({"edit_rate": rate, "pairs": n_base, "removed": len(removed),
                     "precision": true / max(1, len(removed)), "recall": true / n_base})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=1500, help="clean documents in the throughput corpus")
    ap.add_argument("--pairs", type=int, default=300, help="original/copy pairs per edit rate")
    args = ap.parse_args()
    if not TEXT.is_dir():
        raise SystemExit(f"shared text not found at {TEXT}")
    with tempfile.TemporaryDirectory() as tmp:
        thr = throughput(Path(tmp), args.docs)
        near = near_duplicates(Path(tmp), args.pairs, [0.01, 0.03, 0.05, 0.10, 0.20])
    result = {"machine": _env.machine_info(), "throughput": thr,
              "near_duplicates": near}
    atomic_write_json(_env.result_path("clean"), result)
    print(f"throughput on {thr['documents']} documents (outputs identical: {thr['identical_outputs']})")
    print("| workers | MB | seconds | MB/s |\n|---|---|---|---|")
    for r in thr["rows"]:
        print(f"| {r['workers']} | {r['mb']:.2f} | {r['seconds']:.1f} | {r['mb_per_s']:.3f} |")
    a = thr["acceptance"]
    print(f"noise removed {a['noise_removed']:.3f}, clean kept {a['clean_kept']:.3f}, boilerplate lines removed "
          f"{a['boilerplate_removed']:.3f}")
    print("| edit rate | pairs | removed | precision | recall |\n|---|---|---|---|---|")
    for r in near:
        print(f"| {r['edit_rate']:.2f} | {r['pairs']} | {r['removed']} | {r['precision']:.3f} | {r['recall']:.3f} |")


if __name__ == "__main__":
    main()
