"""onnxruntime dynamic int8 with chosen Linear layers left in fp32 (``--keep-fp32``).

Dynamic int8 quantizes each MatMul's activations per tensor at run time; inputs with outliers (the GELU outputs
that feed a BERT FFN's output projection are the known case) lose the most, and on a small model that can flip a
few percent of the labels. ``--keep-fp32`` names layers to leave in fp32, either as structure parts (``ffn_in``,
``ffn_out``, ``ffn`` for both, ``attn_output``, ``query``, ``key``, ``value``) or as module-name patterns
(``*.output.dense``); the ONNX exporter names each MatMul after its module, which is how they are matched. With no
layer kept, this is ``ptmlab.compress.quantize.onnx_int8`` itself.
"""

from __future__ import annotations

import fnmatch
import logging
import re
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.models.structure import structure_of

PARTS = ("query", "key", "value", "attn_output", "ffn_in", "ffn_out")


def layer_matcher(model, keep: list[str]):
    """A test on module names for ``keep``: structure parts match exactly that projection in every layer (and its
    low-rank factors), other entries are module-name glob patterns."""
    s = structure_of(model)
    regexes, globs = [], []
    for k in keep:
        parts = ("ffn_in", "ffn_out") if k == "ffn" else (k,) if k in PARTS else ()
        for p in parts:
            regexes.append(re.compile(rf"^{re.escape(s.base)}\.{re.escape(s.layers)}\.\d+\."
                                      rf"{re.escape(getattr(s, p))}(\..*)?$"))
        if not parts:
            globs.append(k)
    return lambda name: any(r.match(name) for r in regexes) or any(fnmatch.fnmatch(name, g) for g in globs)


def node_module(node_name: str) -> str:
    """'/model/bert/encoder/layer.0/output/dense/MatMul' -> 'bert.encoder.layer.0.output.dense'."""
    parts = [p for p in node_name.split("/") if p]
    if parts and parts[0] == "model":
        parts = parts[1:]
    return ".".join(parts[:-1])


def onnx_int8_keep(src: Path, dst: Path, model, keep: list[str]) -> list[str]:
    """Quantize ``src`` into ``dst`` leaving the MatMuls of the ``keep`` layers in fp32; returns their node names."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    keeps = layer_matcher(model, keep)
    graph = onnx.load(str(src), load_external_data=False).graph
    nodes = [n.name for n in graph.node if n.op_type == "MatMul" and keeps(node_module(n.name))]
    if not nodes:
        raise PtmlabError(f"--keep-fp32 {','.join(keep)} matches no layer of this model: use ffn, ffn_in, ffn_out, "
                          f"attn_output, query, key, value or a module-name pattern such as '*.output.dense'")
    tmp = dst.with_name(f".{dst.name}.tmp")
    logging.disable(logging.WARNING)
    try:
        quantize_dynamic(str(src), str(tmp), weight_type=QuantType.QInt8, per_channel=True, nodes_to_exclude=nodes)
    finally:
        logging.disable(logging.NOTSET)
    tmp.replace(dst)
    return nodes


def onnx_int8_weights(src: Path, dst: Path, min_size: int = 4096) -> int:
    """Weight-only int8: every constant MatMul weight (per output column) and embedding table (per row) is stored
    as symmetric int8 with an fp32 scale and a ``DequantizeLinear`` in front of its user, so the file is about as
    small as dynamic int8 while every product runs in fp32 on fp32 activations. Nothing is quantized at run time,
    which is why this keeps the fp32 model's predictions where dynamic int8 flips a few percent of them; the price
    is speed (fp32 matmuls). Returns the number of tensors stored in int8."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    done: dict[str, str] = {}
    added, dq_nodes = [], []
    for node in graph.node:
        if node.op_type == "MatMul" and len(node.input) > 1 and node.input[1] in inits:
            slot, axis = 1, 1  # weight [in, out]: one scale per output column
        elif node.op_type == "Gather" and node.input[0] in inits:
            slot, axis = 0, 0  # embedding table [vocab, dim]: one scale per row
        else:
            continue
        name = node.input[slot]
        if name not in done:
            w = numpy_helper.to_array(inits[name]).astype(np.float32)
            if w.ndim != 2 or w.size < min_size:
                continue
            scale = np.maximum(np.abs(w).max(axis=1 - axis), 1e-12) / 127.0
            q = np.clip(np.round(w / (scale if axis == 1 else scale[:, None])), -127, 127).astype(np.int8)
            added += [numpy_helper.from_array(q, f"{name}_int8"),
                      numpy_helper.from_array(scale.astype(np.float32), f"{name}_scale"),
                      numpy_helper.from_array(np.zeros_like(scale, dtype=np.int8), f"{name}_zero")]
            dq_nodes.append(helper.make_node("DequantizeLinear", [f"{name}_int8", f"{name}_scale", f"{name}_zero"],
                                             [f"{name}_dequantized"], axis=axis, name=f"{name}_DequantizeLinear"))
            graph.initializer.remove(inits[name])
            done[name] = f"{name}_dequantized"
        node.input[slot] = done[name]
    graph.initializer.extend(added)
    for i, n in enumerate(dq_nodes):
        graph.node.insert(i, n)
    tmp = dst.with_name(f".{dst.name}.tmp")
    onnx.save(model, str(tmp))
    tmp.replace(dst)
    return len(done)
