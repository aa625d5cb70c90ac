"""Backends: a structure's PyTorch model made runnable on one inference runtime (registry ``BACKENDS``).

Each builder is ``fn(model, tokenizer, cache, work, calibration) -> Built``: ``cache`` is the structure's own folder
(its fp32 and fused ONNX graphs are exported once there and shared by its backends), ``work`` the trial's folder
(files that are the candidate), ``calibration`` training texts for static int8. ONNX export and dynamic int8 are
``ptmlab.compress.quantize``'s (what ``ptmlab export --format onnx|onnx-int8`` writes); the graph optimizer is
onnxruntime's (``onnxruntime.transformers.optimizer``: fused attention, LayerNorm, GELU); static int8 is
onnxruntime's ``quantize_static`` (QDQ, int8 weights per channel, uint8 activations calibrated on training rows).
"""

from __future__ import annotations

import copy
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.core.registry import Registry

BACKENDS: Registry = Registry("backend")
OPENVINO_BACKENDS = ("openvino", "openvino-int8")
ONNX_BACKENDS = ("onnx", "onnx-fused", "onnx-int8", "onnx-int8-static", *OPENVINO_BACKENDS)  # a model.onnx each


@dataclass
class Built:
    model: nn.Module  # called like a transformers model (keyword tokenizer outputs -> ``.logits``)
    onnx: Path | None = None  # the candidate's ONNX file (None: the PyTorch model itself)
    info: dict = field(default_factory=dict)


class Bf16Model(nn.Module):
    """A PyTorch model run under bf16 autocast (``--precision bf16`` of evaluate, predict and serve)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.config = model.config

    def forward(self, **inputs):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = self.model(**inputs)
        names = ("start_logits", "end_logits") if getattr(out, "start_logits", None) is not None else ("logits",)
        return SimpleNamespace(**{n: getattr(out, n).float() for n in names})  # QA: start and end logits


def bf16_fast() -> bool:
    """Whether this CPU runs bf16 matmuls natively (AVX512-BF16 or AMX), as ``--precision auto`` decides."""
    from ptmlab.train.evaluate import resolve_precision

    return resolve_precision("auto", torch.device("cpu")) == "bf16"


def fp32_onnx(model: nn.Module, cache: Path) -> Path:
    """The structure's fp32 ONNX graph, exported once (``compress.quantize.export_onnx``)."""
    from ptmlab.compress.quantize import export_onnx

    path = cache / "model_fp32.onnx"
    return path if path.is_file() else export_onnx(model, path)


def attention_shape(model: nn.Module) -> tuple[int, int]:
    """(heads, hidden size) for onnxruntime's attention fusion: the config's when every layer has all its heads;
    (0, 0) after head pruning (the fusion then leaves attention unfused rather than assume one head count)."""
    from ptmlab.compress.surgery import heads_per_layer

    heads = int(getattr(model.config, "num_attention_heads", 0) or 0)
    try:
        per_layer = heads_per_layer(model)
    except Exception:  # an architecture without a structure map
        return 0, 0
    if not heads or any(h != heads for h in per_layer):
        return 0, 0
    return heads, int(model.config.hidden_size)


def eager_copy(model: nn.Module) -> nn.Module:
    """A copy running transformers' eager attention, whose exported graph onnxruntime's attention fusion recognises
    (the sdpa graph it does not); the model itself when it cannot switch."""
    try:
        clone = copy.deepcopy(model)
        clone.set_attn_implementation("eager")
        return clone
    except Exception:
        return model


def fused_onnx(model: nn.Module, cache: Path) -> Path:
    """The graph through onnxruntime's transformer optimizer (attention, embedding + LayerNorm, LayerNorm, GELU
    fused), exported once from eager attention."""
    path = cache / "model_fused.onnx"
    if path.is_file():
        return path
    from ptmlab.compress.quantize import export_onnx

    src = export_onnx(eager_copy(model), cache / "model_eager.onnx")
    heads, hidden = attention_shape(model)
    from onnxruntime.transformers import optimizer

    logging.disable(logging.WARNING)  # its fusion statistics are logged at INFO/WARNING through the root logger
    try:
        opt = optimizer.optimize_model(str(src), model_type="bert", num_heads=heads, hidden_size=hidden,
                                       opt_level=0)
    except Exception as e:
        raise PtmlabError(f"onnxruntime's transformer optimizer cannot fuse this graph ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:160] if str(e) else ''})") from None
    finally:
        logging.disable(logging.NOTSET)
    tmp = path.with_name(f".{path.name}.tmp")
    opt.save_model_to_file(str(tmp))
    tmp.replace(path)
    src.unlink(missing_ok=True)
    return path


def fused_ops(path: Path) -> dict[str, int]:
    """How many fused operators (attention, LayerNorm, GELU) a graph holds."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    kinds = ("Attention", "SkipLayerNormalization", "LayerNormalization", "EmbedLayerNormalization", "BiasGelu",
             "FastGelu", "Gelu")
    out: dict[str, int] = {}
    for n in graph.node:
        if n.op_type in kinds:
            out[n.op_type] = out.get(n.op_type, 0) + 1
    return out


def _place(src: Path, work: Path) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    dst = work / "model.onnx"
    shutil.copyfile(src, dst)
    return dst


def _ort(path: Path, model: nn.Module):
    from ptmlab.models.onnx import OrtModel

    return OrtModel(path, model.config)


@BACKENDS.register("torch-fp32", help="PyTorch, fp32")
def _torch_fp32(model, tokenizer, cache: Path, work: Path, calibration) -> Built:
    return Built(model, info={"precision": "fp32"})


@BACKENDS.register("torch-bf16", help="PyTorch under bf16 autocast (CPUs with AVX512-BF16 or AMX)")
def _torch_bf16(model, tokenizer, cache: Path, work: Path, calibration) -> Built:
    return Built(Bf16Model(model), info={"precision": "bf16"})


@BACKENDS.register("onnx", help="onnxruntime, fp32 graph (its own session optimizations)")
def _onnx(model, tokenizer, cache: Path, work: Path, calibration) -> Built:
    path = _place(fp32_onnx(model, cache), work)
    return Built(_ort(path, model), path)


@BACKENDS.register("onnx-fused", help="onnxruntime, fp32 graph through its transformer optimizer")
def _onnx_fused(model, tokenizer, cache: Path, work: Path, calibration) -> Built:
    path = _place(fused_onnx(model, cache), work)
    return Built(_ort(path, model), path, {"fused": fused_ops(path)})


@BACKENDS.register("onnx-int8", help="onnxruntime dynamic int8 (per-channel weights) of the fused graph")
def _onnx_int8(model, tokenizer, cache: Path, work: Path, calibration) -> Built:
    from ptmlab.compress.quantize import onnx_int8

    try:
        src, fused = fused_onnx(model, cache), True
    except PtmlabError:
        src, fused = fp32_onnx(model, cache), False
    work.mkdir(parents=True, exist_ok=True)
    path = onnx_int8(src, work / "model.onnx", {"DefaultTensorType": 1} if fused else None)  # 1: FLOAT
    return Built(_ort(path, model), path, {"quantization": "dynamic int8, weights per channel", "fused": fused})


class _Calibration:
    """onnxruntime's ``CalibrationDataReader``: tokenized training texts in batches of 16."""

    def __init__(self, tokenizer, texts: list, pairs: list | None, names: list[str], max_length: int):
        self.batches = []
        for s in range(0, len(texts), 16):
            enc = tokenizer(texts[s:s + 16], pairs[s:s + 16] if pairs else None, truncation=True,
                            max_length=max_length, padding=True, return_tensors="np", return_token_type_ids=True)
            self.batches.append({n: enc[n].astype("int64") for n in names if n in enc})
        self.it = iter(self.batches)

    def get_next(self):
        return next(self.it, None)

    def rewind(self):
        self.it = iter(self.batches)


def weight_matmuls(path: Path) -> list[str]:
    """The MatMul nodes whose second input is a constant weight (the Linear layers; attention's score and context
    products multiply two activations and stay in fp32)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    return [n.name for n in graph.node if n.op_type == "MatMul" and len(n.input) > 1 and n.input[1] in inits]


@BACKENDS.register("onnx-int8-static", help="onnxruntime static int8 (QDQ, per-channel weights, activations "
                                            "calibrated on training rows)")
def _onnx_int8_static(model, tokenizer, cache: Path, work: Path, calibration) -> Built:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    src = fp32_onnx(model, cache)
    texts, pairs, max_length = calibration
    from ptmlab.models.loader import model_inputs

    names = list(model_inputs(model, {"input_ids": 0, "attention_mask": 0, "token_type_ids": 0}))
    reader = type("Reader", (_Calibration, CalibrationDataReader), {})(tokenizer, texts, pairs, names, max_length)
    work.mkdir(parents=True, exist_ok=True)
    dst = work / "model.onnx"
    tmp = dst.with_name(f".{dst.name}.tmp")
    nodes = weight_matmuls(src)
    logging.disable(logging.WARNING)
    try:
        quantize_static(str(src), str(tmp), reader, quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
                        nodes_to_quantize=nodes, calibrate_method=CalibrationMethod.MinMax,
                        extra_options={"WeightSymmetric": True, "ActivationSymmetric": False,
                                       "DefaultTensorType": 1})
    except Exception as e:
        tmp.unlink(missing_ok=True)
        raise PtmlabError(f"static int8 quantization failed ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:160] if str(e) else ''})") from None
    finally:
        logging.disable(logging.NOTSET)
    tmp.replace(dst)
    return Built(_ort(dst, model), dst, {"quantization": "static int8 QDQ: weights int8 per channel, activations "
                                                          "uint8 per tensor (MinMax)", "calibration_rows": len(texts),
                                         "quantized_matmuls": len(nodes)})


def _ov(path: Path, model: nn.Module):
    from ptmlab.models.onnx import OvModel

    return OvModel(path, model.config)


@BACKENDS.register("openvino", help="the fp32 ONNX graph on the OpenVINO runtime")
def _openvino(model, tokenizer, cache: Path, work: Path, calibration) -> Built:
    path = _place(fp32_onnx(model, cache), work)
    return Built(_ov(path, model), path, {"runtime": "openvino"})


@BACKENDS.register("openvino-int8", help="NNCF's int8 of the fp32 ONNX graph (activations calibrated on training "
                                         "rows) on the OpenVINO runtime")
def _openvino_int8(model, tokenizer, cache: Path, work: Path, calibration) -> Built:
    import nncf
    import onnx

    from ptmlab.models.loader import model_inputs

    texts, pairs, max_length = calibration
    names = list(model_inputs(model, {"input_ids": 0, "attention_mask": 0, "token_type_ids": 0}))
    batches = _Calibration(tokenizer, texts, pairs, names, max_length).batches
    src = fp32_onnx(model, cache)
    work.mkdir(parents=True, exist_ok=True)
    dst = work / "model.onnx"
    tmp = dst.with_name(f".{dst.name}.tmp")
    logging.disable(logging.WARNING)
    try:
        quantized = nncf.quantize(onnx.load(str(src)), nncf.Dataset(batches), model_type=nncf.ModelType.TRANSFORMER,
                                  subset_size=len(texts))
        onnx.save(quantized, str(tmp))
    except Exception as e:
        tmp.unlink(missing_ok=True)
        raise PtmlabError(f"NNCF int8 quantization failed ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:160] if str(e) else ''})") from None
    finally:
        logging.disable(logging.NOTSET)
    tmp.replace(dst)
    return Built(_ov(dst, model), dst, {"runtime": "openvino", "quantization": "NNCF int8 (transformer preset), "
                                        "activations calibrated", "calibration_rows": len(texts)})


def build(name: str, model, tokenizer, cache: Path, work: Path, calibration) -> Built:
    cache.mkdir(parents=True, exist_ok=True)
    return BACKENDS.get(name)(model, tokenizer, cache, work, calibration)
