"""``ptmlab export``: a run directory or zoo model as a portable transformers / ONNX / int8 model directory."""

from __future__ import annotations

import argparse

from ptmlab.core.config import add_config_args, resolve_config


def register(sub) -> None:
    from ptmlab.export.run import ExportConfig

    p = sub.add_parser("export", help="write a model as transformers, ONNX, ONNX int8 or torch int8, with parity",
                       description="Export a ptmlab run directory or zoo model so users load it without ptmlab: "
                                   "transformers (plain, or with modelling code registered through auto_map when "
                                   "pruning, low rank, sharing, ghost modules, adapters or RNN students are not "
                                   "stock), ONNX fp32 / onnxruntime int8, or torch dynamic int8. Checks parity with "
                                   "the PyTorch model on dev text (parity.json) and writes a model card.")
    p.add_argument("model", metavar="RUN_DIR_OR_MODEL", help="a run directory (finetune, distill, prune, ...) or "
                                                            "zoo model")
    p.add_argument("--config", help="YAML file with options (flags override it)")
    add_config_args(p, ExportConfig, exclude=("model",))
    p.set_defaults(func=_export)


def _export(args: argparse.Namespace) -> int:
    from ptmlab.export.run import ExportConfig, export_model
    from ptmlab.report.model_card import AGREEMENT

    info = export_model(resolve_config(ExportConfig, args, args.config))
    p = info["parity"]
    agree = "n/a (regression)" if p["label_agreement"] is None else f"{p['label_agreement']:.4f}"
    code = " (with modelling code: load with trust_remote_code=True)" if info.get("custom_code") else ""
    print(f"exported {info['source']} as {info['format']}{code}")
    print(f"parity on {p['examples']} dev texts of {p['task']}: max |logit diff| {p['max_abs_logit_diff']:.3g}, "
          f"{AGREEMENT.get(p.get('kind'), 'label agreement')} {agree}")
    print(f"export: {info['output']}")
    return 0
