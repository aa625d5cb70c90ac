"""What the BLiMP anomaly benchmarks share: their common options and the anomaly study's development / held-out
split of the phenomena."""

from __future__ import annotations

import argparse

from _env import ROOT, result_path


def blimp_parser(doc: str, name: str) -> argparse.ArgumentParser:
    """--model, --blimp, --per-phenomenon, --seed (reference sample) and --output (default
    benchmarks/investigations/results/NAME.MACHINE.json); a script adds its own."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--model", default="mpnet")
    p.add_argument("--blimp", default=str(ROOT.parent / "shared" / "data" / "blimp"))
    p.add_argument("--per-phenomenon", type=int, default=100)
    p.add_argument("--seed", type=int, default=0, help="reference sample")
    p.add_argument("--output", default=str(result_path(name, investigation=True)))
    return p


def blimp_split(args) -> tuple[list, object]:
    """The BLiMP pairs and a bool array [pairs]: True for the development phenomena (the anomaly study's split)."""
    import numpy as np

    from ptmlab.analysis.anomaly import load_blimp
    from ptmlab.studies.anomaly import split_phenomena

    pairs = load_blimp(args.blimp, args.per_phenomenon)
    dev_names, _ = split_phenomena([x.phenomenon for x in pairs])
    return pairs, np.array([x.phenomenon in dev_names for x in pairs])
