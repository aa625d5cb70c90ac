"""``ptmlab export``: a run directory or zoo model as a portable transformers / ONNX / int8 model directory."""

from __future__ import annotations

import argparse

from ptmlab.core.cli_parser import config_command
from ptmlab.core.config import resolve_config


def register(sub) -> None:
    from ptmlab.export.run import ExportConfig

    config_command(sub, "export", ExportConfig, _export,
                   help="write a model as transformers, ONNX, ONNX int8 or torch int8, with parity",
                   thing=("model", "RUN_DIR_OR_MODEL", "a run directory (finetune, distill, prune, ...) or zoo model"),
                   exclude=("model",),
                   description="Export a ptmlab run directory or zoo model so users load it without ptmlab: "
                               "transformers (plain, or with modelling code registered through auto_map when "
                               "pruning, low rank, sharing, ghost modules, adapters or RNN students are not "
                               "stock), ONNX fp32 / onnxruntime int8, or torch dynamic int8. Checks parity with "
                               "the PyTorch model on dev text (parity.json) and writes a model card.")


def _export(args: argparse.Namespace) -> int:
    from ptmlab.export.run import ExportConfig, export_model
    from ptmlab.report.model_card import AGREEMENT

    info = export_model(resolve_config(ExportConfig, args, args.config))
    p = info["parity"]
    if p.get("kind") == "embedding":  # a sentence embedder: cosine of its vectors and the export's
        print(f"exported {info['source']} as {info['format']} (sentence-transformers layout)")
        print(f"parity on {p['examples']} sentences ({p['loaded_with']}): min cosine {p['min_cosine']:.6f}, max "
              f"|diff| {p['max_abs_diff']:.3g}")
        print(f"export: {info['output']}")
        return 0
    agree = "n/a (regression)" if p["label_agreement"] is None else f"{p['label_agreement']:.4f}"
    code = " (with modelling code: load with trust_remote_code=True)" if info.get("custom_code") else ""
    print(f"exported {info['source']} as {info['format']}{code}")
    print(f"parity on {p['examples']} dev texts of {p['task']}: max |logit diff| {p['max_abs_logit_diff']:.3g}, "
          f"{AGREEMENT.get(p.get('kind'), 'label agreement')} {agree}")
    print(f"export: {info['output']}")
    return 0
