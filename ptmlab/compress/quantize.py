"""Quantization: torch dynamic int8, ONNX export + onnxruntime dynamic int8, and simulated k-bit weights.

Every variant is measured the same way (dev metric, size on disk, batch-1/32 latency) so the table is honest.
By default the task head and pooler stay in fp32 (``keep_fp32``): they are a tiny share of the time and the
classifier's logits are where int8 rounding costs accuracy.
"""

from __future__ import annotations

import copy
import fnmatch
import tempfile
from pathlib import Path

import torch
from torch import nn

from ptmlab.compress.config import DEFAULT_KEEP_FP32, QUANT_METHODS, QuantizeConfig  # noqa: F401
from ptmlab.core.config import config_to_dict
from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_save_file
from ptmlab.models.onnx import OrtModel  # noqa: F401  (re-exported: ONNX models behind the model interface)


def is_quantized(model: nn.Module) -> bool:
    return any(type(m).__module__.startswith(("torch.ao.nn.quantized", "torch.nn.quantized"))
               for m in model.modules())


def linear_names(model: nn.Module, keep_fp32: list[str]) -> set[str]:
    """Names of Linear layers to quantize: all but those matching a ``keep_fp32`` pattern."""
    return {n for n, m in model.named_modules() if isinstance(m, nn.Linear)
            and not any(fnmatch.fnmatch(n, p) for p in keep_fp32)}


def torch_int8(model: nn.Module, keep_fp32: list[str] | None = None) -> nn.Module:
    """A dynamically quantized copy (int8 weights, activations quantized per batch) of the chosen Linear layers."""
    if is_quantized(model):
        raise PtmlabError("the model is already quantized: quantize the fp32 model it came from")
    from torch.ao.quantization import quantize_dynamic

    names = linear_names(model, DEFAULT_KEEP_FP32 if keep_fp32 is None else keep_fp32)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantize_dynamic(copy.deepcopy(model).eval(), names, dtype=torch.qint8)


def int8_state(qmodel: nn.Module) -> dict[str, torch.Tensor]:
    """The tensors a torch-int8 model stores: int8 weights with per-channel/per-tensor scales, fp32 elsewhere."""
    state = {}
    for name, m in qmodel.named_modules():
        if hasattr(m, "_packed_params") and callable(getattr(m, "weight", None)):
            w, b = m.weight(), m.bias()
            state[f"{name}.weight"] = w.int_repr()
            if w.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
                state[f"{name}.scale"] = w.q_per_channel_scales().float()
            else:
                state[f"{name}.scale"] = torch.tensor([w.q_scale()], dtype=torch.float32)
            if b is not None:
                state[f"{name}.bias"] = b.detach()
        elif not list(m.children()):
            for pname, p in m.named_parameters(recurse=False):
                state[f"{name}.{pname}"] = p.detach()
    return state


def kbit_weights(model: nn.Module, bits: int, keep_fp32: list[str] | None = None) -> tuple[nn.Module, float]:
    """Simulated k-bit weights: symmetric per-output-channel rounding of Linear weights (and embeddings).

    Returns the model (weights rounded, still fp32 tensors) and the size in MB if stored packed at ``bits``.
    """
    if bits not in (2, 3, 4, 8):
        raise PtmlabError(f"--bits {bits} is not supported: use 8, 4, 3 or 2")
    q = copy.deepcopy(model).eval()
    names = linear_names(q, DEFAULT_KEEP_FP32 if keep_fp32 is None else keep_fp32)
    levels = 2 ** (bits - 1) - 1
    packed_bits = 0
    with torch.no_grad():
        for n, m in q.named_modules():
            if n in names or isinstance(m, nn.Embedding):
                w = m.weight
                scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / levels
                w.copy_((w / scale).round().clamp(-levels, levels) * scale)
                packed_bits += w.numel() * bits + w.shape[0] * 32
        quantized = {id(m.weight) for n, m in q.named_modules() if n in names or isinstance(m, nn.Embedding)}
        packed_bits += sum(p.numel() * 32 for p in q.parameters() if id(p) not in quantized)
    return q, packed_bits / 8 / 2**20


# ----------------------------------------------------------------------------------------------------- ONNX
def onnx_outputs(model: nn.Module) -> dict[str, dict[int, str]]:
    """The ONNX outputs of a model's task head with their dynamic axes: ``logits`` per text (sequence
    classification) or per token (token classification), ``start_logits`` and ``end_logits`` (extractive QA)."""
    head = type(model).__name__
    if head.endswith("ForQuestionAnswering"):
        return {"start_logits": {0: "batch", 1: "tokens"}, "end_logits": {0: "batch", 1: "tokens"}}
    if head.endswith("ForTokenClassification"):
        return {"logits": {0: "batch", 1: "tokens"}}
    return {"logits": {0: "batch"}}


def export_onnx(model: nn.Module, path: str | Path, opset: int = 17) -> Path:
    """Export a sequence-classification, token-classification or QA model to ONNX with dynamic batch and length
    axes (outputs: ``onnx_outputs``)."""
    if is_quantized(model):
        raise PtmlabError("the model is already quantized: export the fp32 model and quantize the ONNX file")
    from ptmlab.models.loader import model_inputs

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dummy = {"input_ids": torch.ones(2, 8, dtype=torch.long), "attention_mask": torch.ones(2, 8, dtype=torch.long),
             "token_type_ids": torch.zeros(2, 8, dtype=torch.long)}
    inputs = model_inputs(model, dummy)
    names = list(inputs)
    outputs = onnx_outputs(model)
    wrapper = _PositionalLogits(model, names, list(outputs)).eval()
    tmp = path.with_name(f".{path.name}.tmp")
    import warnings

    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(wrapper, tuple(inputs.values()), str(tmp), input_names=names, output_names=list(outputs),
                              dynamic_axes={**{n: {0: "batch", 1: "tokens"} for n in names}, **outputs},
                              opset_version=opset, dynamo=False)
    except Exception as e:
        tmp.unlink(missing_ok=True)
        raise PtmlabError(f"cannot export architecture '{model.config.model_type}' to ONNX "
                          f"({type(e).__name__}: {str(e).splitlines()[0][:200]}): use torch int8 instead") from None
    tmp.replace(path)
    return path


class _PositionalLogits(nn.Module):
    def __init__(self, model: nn.Module, names: list[str], outputs: tuple[str, ...] = ("logits",)):
        super().__init__()
        self.model, self.names, self.outputs = model, names, tuple(outputs)

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args, strict=True)))
        return tuple(getattr(out, n) for n in self.outputs) if len(self.outputs) > 1 else out.logits


def onnx_int8(src: str | Path, dst: str | Path, extra_options: dict | None = None) -> Path:
    """onnxruntime dynamic int8 quantization of an ONNX file (MatMul weights int8, per channel); ``extra_options``:
    onnxruntime's (a graph with fused contrib operators needs ``DefaultTensorType``)."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    dst = Path(dst)
    tmp = dst.with_name(f".{dst.name}.tmp")
    logging.disable(logging.WARNING)  # its pre-processing advice is printed through the root logger
    try:
        quantize_dynamic(str(src), str(tmp), weight_type=QuantType.QInt8, per_channel=True,
                         extra_options=extra_options)
    finally:
        logging.disable(logging.NOTSET)
    tmp.replace(dst)
    return dst


# ----------------------------------------------------------------------------------------------------- command
def check_not_quantized(path: str) -> None:
    p = Path(path)
    if p.is_dir() and any(p.glob("*.onnx")) and not any(p.glob("*.safetensors")):
        raise PtmlabError(f"'{path}' holds an ONNX (already quantized or exported) model: quantize the fp32 run "
                          f"directory it came from")


def run_quantize(cfg: QuantizeConfig) -> list[dict]:
    """Measure every variant, write the ONNX int8 model (if asked) and a table + plot into ``cfg.output``."""
    from ptmlab.compress.measure import Measurer, write_table_report
    from ptmlab.core.rundir import RunDir
    from ptmlab.core.seed import configure_threads
    from ptmlab.models.zoo import load_model, load_tokenizer

    configure_threads()
    check_not_quantized(cfg.model)
    if not cfg.output:
        raise PtmlabError("no output directory: pass --output RUN_DIR")
    run = RunDir.create(cfg.output, cfg.overwrite)
    run.write_config(config_to_dict(cfg), "quantize")
    model = load_model(cfg.model)
    tokenizer = load_tokenizer(cfg.model)
    meas = Measurer(cfg, tokenizer)
    rows = [meas.row("fp32", model, size_mb=meas.saved_size(model))]
    if "torch-int8" in cfg.methods:
        q = torch_int8(model, cfg.keep_fp32)
        with tempfile.TemporaryDirectory() as tmp:
            atomic_save_file(int8_state(q), Path(tmp) / "model.safetensors")
            rows.append(meas.row("torch int8", q, size_mb=_mb(Path(tmp) / "model.safetensors")))
    if "onnx-int8" in cfg.methods:
        from ptmlab.models.loader import save_model

        fp = export_onnx(model, run.file("model_fp32.onnx"))
        rows.append(meas.row("onnx fp32", OrtModel(fp, model.config), size_mb=_mb(fp)))
        q8 = onnx_int8(fp, run.file("model.onnx"))
        fp.unlink()
        rows.append(meas.row("onnx int8", OrtModel(q8, model.config), size_mb=_mb(q8)))
        save_model(_ConfigOnly(model.config), tokenizer, run.path)
    if "kbit" in cfg.methods:
        for b in sorted({int(x) for x in cfg.bits}, reverse=True):
            qk, size = kbit_weights(model, b, cfg.keep_fp32)
            rows.append(meas.row(f"{b}-bit weights (simulated)", qk, size_mb=round(size, 2)))
    write_table_report(run, "Quantization", rows, baseline=rows[0])
    return rows


class _ConfigOnly:
    """Saves only config.json (the ONNX model's labels and sizes) through the normal ``save_model`` path."""

    def __init__(self, config):
        self.config = config

    def save_pretrained(self, path, safe_serialization: bool = True) -> None:
        self.config.save_pretrained(path)


def _mb(path: Path) -> float:
    return round(path.stat().st_size / 2**20, 2)
