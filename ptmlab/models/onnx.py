"""ONNX models behind the PyTorch model interface: ``OrtModel`` (an onnxruntime session that evaluation, latency
measurement, prediction and serving call like a transformers model), ``OvModel`` (the same graph compiled by the
OpenVINO runtime) and ``load_onnx_dir`` (a directory holding ``model.onnx``, ``config.json`` and the tokenizer, as
``ptmlab export --format onnx|onnx-int8``, ``ptmlab quantize``, ``ptmlab compress ... int8`` and ``ptmlab optimize``
write it; ``"ptmlab_runtime": "openvino"`` in config.json runs it on OpenVINO, as ``ptmlab optimize`` measured it)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from ptmlab.core.errors import PtmlabError

ONNX_FILE = "model.onnx"
RUNTIME_KEY = "ptmlab_runtime"  # config.json: the runtime an ONNX model was chosen on (absent: onnxruntime)


class OrtModel(nn.Module):
    """An onnxruntime session behind the model interface ``evaluate`` and ``measure_latency`` use."""

    def __init__(self, path: str | Path, config, threads: int | None = None):
        super().__init__()
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads or torch.get_num_threads()
        opts.inter_op_num_threads = 1
        self.path = Path(path)
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.config = config
        self._anchor = nn.Parameter(torch.zeros(0), requires_grad=False)  # gives a device to callers

    def forward(self, **inputs):
        ids = inputs["input_ids"]
        feed = {n: (inputs[n] if n in inputs else torch.zeros_like(ids)).cpu().numpy() for n in self.input_names}
        res = self.session.run(self.output_names, feed)
        return SimpleNamespace(**{n: torch.from_numpy(r) for n, r in zip(self.output_names, res, strict=True)})


class OvModel(nn.Module):
    """An ONNX graph compiled by the OpenVINO runtime (CPU), behind the same interface as ``OrtModel``."""

    def __init__(self, path: str | Path, config, threads: int | None = None):
        super().__init__()
        try:
            import openvino as ov
        except ImportError:
            raise PtmlabError(f"'{path}' was chosen on OpenVINO, which is not installed: pip install "
                              f"openvino") from None
        core = ov.Core()
        self.path = Path(path)
        model = core.read_model(str(path))
        self.input_names = [i.get_any_name() for i in model.inputs]
        self.output_names = [o.get_any_name() for o in model.outputs]
        self.compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads or torch.get_num_threads()})
        self.request = self.compiled.create_infer_request()
        self.config = config
        self._anchor = nn.Parameter(torch.zeros(0), requires_grad=False)  # gives a device to callers

    def forward(self, **inputs):
        ids = inputs["input_ids"]
        feed = {n: (inputs[n] if n in inputs else torch.zeros_like(ids)).cpu().numpy() for n in self.input_names}
        res = self.request.infer(feed)
        return SimpleNamespace(**{n: torch.from_numpy(res[self.compiled.output(n)].copy())
                                  for n in self.output_names})


def onnx_runtime_model(path: str | Path, config, runtime: str | None = None) -> nn.Module:
    """The ONNX file on its runtime: OpenVINO when ``runtime`` (or the config's ``ptmlab_runtime``) says so, else
    onnxruntime."""
    runtime = runtime or getattr(config, RUNTIME_KEY, None)
    return OvModel(path, config) if runtime == "openvino" else OrtModel(path, config)


def is_onnx_dir(path: str | Path) -> bool:
    """A model directory whose model is ``model.onnx`` (no safetensors weights of its own beside it)."""
    from ptmlab.models.loader import has_model_safetensors

    p = Path(path).expanduser()
    return p.is_dir() and (p / ONNX_FILE).is_file() and not has_model_safetensors(p)


def load_onnx_dir(path: str | Path, overrides: dict | None = None, task_head: bool | str = True) -> OrtModel:
    """The ONNX model of ``path`` with its config.json (labels, sizes), for evaluation, prediction and serving.
    It runs as exported: a new task head (``overrides``) or the bare encoder cannot be made from it."""
    from transformers import AutoConfig

    if overrides or task_head is not True:
        raise PtmlabError(f"'{path}' holds an ONNX model, which evaluates, predicts and serves but cannot be trained "
                          f"or changed: use the run directory it was made from")
    try:
        config = AutoConfig.from_pretrained(str(path))
    except Exception as e:
        raise PtmlabError(f"cannot read the model config in '{path}': {e}") from None
    try:
        return onnx_runtime_model(Path(path) / ONNX_FILE, config).eval()
    except PtmlabError:
        raise
    except Exception as e:
        raise PtmlabError(f"cannot load '{Path(path) / ONNX_FILE}' with onnxruntime ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:200] if str(e) else ''}): the file may be corrupt") from None
