"""``ptmlab prune`` / ``quantize`` / ``compress`` / ``lowrank`` / ``share`` / ``magnitude`` / ``ghost``: structured
pruning, int8 quantization, the pipeline, low-rank factorisation, cross-layer sharing, unstructured magnitude pruning
and GhostBERT ghost modules."""

from __future__ import annotations

import argparse

from ptmlab.core.cli_parser import config_command
from ptmlab.core.config import resolve_config


def register(sub) -> None:
    from ptmlab.compress.config import CompressConfig, PruneConfig, QuantizeConfig

    model = ("model", "RUN_DIR_OR_MODEL", "a fine-tuned run directory or model")
    config_command(sub, "prune", PruneConfig, _prune, thing=model, exclude=("model", "epochs"),
                   help="remove attention heads, FFN neurons or layers, then recover by fine-tuning",
                   description="Score heads and FFN neurons, slice out the least important ones (real weight "
                               "removal), fine-tune to recover; writes a run directory that `ptmlab evaluate` loads.")
    config_command(sub, "quantize", QuantizeConfig, _quantize, thing=model, exclude=("model",),
                   help="int8 / k-bit quantization with size, latency and dev metric",
                   description="Measure torch dynamic int8, ONNX fp32 and onnxruntime int8, and simulated k-bit "
                               "weights against the fp32 model; writes the ONNX int8 model and a report.")
    config_command(sub, "compress", CompressConfig, _compress, thing=("model", "RUN_DIR", model[2]),
                   exclude=("model",), help="run compression steps in order and tabulate each step's cost",
                   description="Apply steps (vocab, heads=F, ffn=F, layers=I+J, magnitude=F, lowrank=R, share=G, "
                               "int8) in order; report size, parameters, latency and dev metric after each, with a "
                               "Pareto plot.")

    from ptmlab.compress.transform import CHANGES

    helps = {"lowrank": ("factorise Linear layers by truncated SVD, then recover by fine-tuning",
                         "Replace encoder Linear layers by rank-r SVD factor pairs (rank by --rank-ratio or "
                         "--energy) where that saves parameters; fine-tune to recover; the result reloads."),
             "share": ("tie groups of consecutive layers to one set of weights (ALBERT-style), then recover",
                       "Split the layers into --groups runs; each run uses one layer's weights (mean of the group "
                       "or its first layer); fine-tune to recover; the result stores each group once."),
             "magnitude": ("zero the smallest encoder weights (unstructured), then recover",
                           "torch.nn.utils.prune L1 pruning of encoder Linear weights, global or per layer, made "
                           "permanent; weights stay dense, so size and speed do not change."),
             "ghost": ("add GhostBERT ghost features to a pruned model, then fine-tune",
                       "In every layer, a depthwise convolution along the sequence (--ghost-kernel) over the "
                       "remaining FFN activations and head outputs makes ghost features that reach the hidden size "
                       "through new zero-initialised weights; fine-tune (--recover-epochs) to train them.")}
    for verb, (cls, _) in CHANGES.items():
        short, long = helps[verb]
        v = config_command(sub, verb, cls, _change, help=short, description=long, thing=model,
                           exclude=("model", "epochs"))
        v.set_defaults(verb=verb)


def _prune(args: argparse.Namespace) -> int:
    from ptmlab.compress.prune import PruneConfig, run_prune

    s = run_prune(resolve_config(PruneConfig, args, args.config))
    metric = s["main_metric"]
    before, after = s["dev_unpruned"].get(metric), s["metrics"].get(metric)
    print(f"heads {s['heads_before']} -> {s['heads']} (per layer {s['heads_per_layer']}); FFN per layer "
          f"{s['ffn_per_layer']}; params {s['params_before']:,} -> {s['params']:,}")
    print(f"dev {metric}: {before:.4f} unpruned -> {after:.4f} pruned"
          + (" (after recovery)" if s["prune_steps"][-1].get(f"dev_recovered_{metric}") is not None else ""))
    print(f"run directory: {args.output}")
    return 0


def _quantize(args: argparse.Namespace) -> int:
    from ptmlab.compress.quantize import QuantizeConfig, run_quantize

    run_quantize(resolve_config(QuantizeConfig, args, args.config))
    return 0


def _compress(args: argparse.Namespace) -> int:
    from ptmlab.compress.pipeline import CompressConfig, run_compress

    run_compress(resolve_config(CompressConfig, args, args.config))
    return 0


def _change(args: argparse.Namespace) -> int:
    from ptmlab.compress.transform import CHANGES, run_change

    cls, change = CHANGES[args.verb]
    s = run_change(resolve_config(cls, args, args.config), change, command=args.verb)
    m = s["main_metric"]
    after = s["metrics"].get(m)
    print(f"params {s['params_before']:,} -> {s['params']:,}; dev {m}: {s['dev_before'].get(m):.4f} before -> "
          f"{s['dev_changed'].get(m):.4f} after {args.verb} -> {after:.4f} final")
    if args.verb == "ghost":
        print(f"ghost parameters: {s['ghost_params']:,} (kernel {s['change']['kernel']})")
    if args.verb == "magnitude":
        print(f"sparsity of encoder Linear weights: {s['change']['sparsity_encoder_linear']:.4f} (dense storage: "
              f"file size and CPU latency are unchanged)")
    print(f"run directory: {args.output}")
    return 0
