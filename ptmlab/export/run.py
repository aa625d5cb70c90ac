"""``ptmlab export``: one function from a run directory (or zoo model) to a portable model directory.

Every input is checked before anything is written (format x modification, weights present, output free, parity
data readable); the export is then built in a temporary directory beside ``--output`` and renamed into place at
the end, so an error never leaves a half-written export. Each format ends with the parity check
(``parity.json``) and a model card (README.md).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import Validated, at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_write_json, replace_folder
from ptmlab.data.tasks import TASK_KINDS

FORMATS = ("transformers", "onnx", "onnx-int8", "torch-int8")


@dataclass(frozen=True)
class ExportConfig(Validated):
    OPTION_GROUP = "export"
    FIELD_GROUPS = {**dict.fromkeys(("task", "task_kind", "glue_dir", "dev_file", "text_col", "text_pair_col",
                                     "label_col", "parity_examples", "max_length"), "parity check"),
                    **dict.fromkeys(("keep_fp32", "int8_mode"), "onnx-int8")}

    model: str = opt("", "run directory or zoo model to export")
    format: str = opt("transformers", "transformers, onnx, onnx-int8 or torch-int8", choices=list(FORMATS))
    output: str | None = opt(None, "directory to write the export into (must not exist, unless --overwrite)")
    overwrite: bool = opt(False, "replace an existing --output directory")
    task: str | None = opt(None, "task whose dev text the parity check reads (default: the run's task, else tweets)")
    task_kind: str | None = opt(None, "what --dev-file holds: sentence, token-classification or extractive-qa "
                                      "(default: the kind of the model's task head)", choices=list(TASK_KINDS))
    glue_dir: str | None = opt(None, "GLUE data directory for the parity text (default ../shared/data/glue)")
    dev_file: str | None = opt(None, "dev file for the parity text (with --task NAME)")
    text_col: str | None = opt(None, "text column of --dev-file")
    text_pair_col: str | None = opt(None, "second text column of --dev-file")
    label_col: str | None = opt(None, "label column of --dev-file")
    keep_fp32: list[str] = opt([], "onnx-int8: layers left in fp32: ffn, ffn_in, ffn_out, attn_output, query, "
                                   "key, value or module-name patterns")
    int8_mode: str = opt("dynamic", "onnx-int8: dynamic (int8 products, activations quantized at run time: fastest) "
                                    "or weights (int8 weights dequantized to fp32 in the graph: int8's size, fp32's "
                                    "predictions and speed)", choices=["dynamic", "weights"])
    parity_examples: int = opt(1000, "dev examples in the parity check (0: all)")
    max_length: int | None = opt(None, "tokens per text (extractive QA: per window) in the parity check (default: "
                                       "the run's, else 128; 384-token windows for QA)")

    def validate(self) -> None:
        if self.format not in FORMATS:
            raise PtmlabError(f"unknown export format '{self.format}': use {', '.join(FORMATS)}")
        if self.keep_fp32 and self.format != "onnx-int8":
            raise PtmlabError(f"--keep-fp32 applies to --format onnx-int8 only, not {self.format}: drop it")
        if self.int8_mode != "dynamic" and self.format != "onnx-int8":
            raise PtmlabError(f"--int8-mode applies to --format onnx-int8 only, not {self.format}: drop it")
        if self.int8_mode == "weights" and self.keep_fp32:
            raise PtmlabError("--keep-fp32 applies to --int8-mode dynamic only (weights mode runs every product in "
                              "fp32 already): drop one of them")
        at_least(self, 0, "parity_examples")
        at_least(self, 8, "max_length")


def check_source(name: str) -> str:
    """The model directory (or zoo name) to export; PtmlabError for a directory without weights."""
    from ptmlab.models.zoo import ZOO, resolve

    path, entry = resolve(name)
    if entry is not None and entry.random_config is not None:
        return name  # a random zoo model (tiny): built from its config
    p = Path(path)
    if p.is_dir() and not any(f.name not in ("optimizer.safetensors", "rng.safetensors")
                              for f in p.glob("*.safetensors")):
        onnx = " (it holds an ONNX model: export the fp32 run it came from)" if any(p.glob("*.onnx")) else ""
        raise PtmlabError(f"'{name}' holds no model weights (*.safetensors){onnx}: pass a finished run directory "
                          f"or a zoo model ({', '.join(ZOO.names())})")
    return name


def check_output(output: str | None, overwrite: bool, source: str) -> Path:
    if not output:
        raise PtmlabError("no output directory: pass --output DIR")
    out = Path(output).expanduser()
    if out.exists() and not overwrite:
        raise PtmlabError(f"output '{out}' already exists: choose another --output or pass --overwrite")
    if out.exists() and not out.is_dir():
        raise PtmlabError(f"output '{out}' exists and is a file: choose another --output")
    src = Path(source).expanduser()
    if src.exists() and out.exists() and out.resolve() == src.resolve():
        raise PtmlabError(f"--output '{out}' is the run being exported: choose another directory")
    try:  # a missing parent is created, as every command that writes a run does
        out.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise PtmlabError(f"the parent of --output '{out}' is a file, not a directory: choose another --output") \
            from None
    return out


ALL = FORMATS
# modification -> (formats that work, why the others do not); docs/export.md shows this table
SUPPORT: dict[str, tuple[tuple[str, ...], str]] = {
    "structured_prune": (ALL, ""),
    "low_rank": (ALL, ""),
    "layer_sharing": (ALL, ""),
    "ghost": (ALL, ""),
    "adapter": (ALL, ""),
    "rnn_student": (("transformers", "onnx", "onnx-int8"),
                    "its only Linear layer is the task head, which int8 keeps in fp32: nothing to quantize"),
    "static_student": (("onnx", "onnx-int8"), "a token table and a linear head have no transformers modelling code "
                                              "and nothing torch-int8 quantizes"),
    "longify": (("torch-int8",), "its window attention (a custom transformers attention function using unfold) is "
                                 "neither in the exported modelling code nor traceable to ONNX"),
    "torch_int8": ((), "the model is already torch-int8 quantized: export the fp32 run it came from"),
}


def check_format(model, fmt: str) -> None:
    """PtmlabError, before anything is written, for a format the model's modifications cannot take."""
    for m in getattr(model.config, "ptmlab_modifications", None) or []:
        kind = m.get("kind")
        if kind in SUPPORT and fmt not in SUPPORT[kind][0]:
            works, why = SUPPORT[kind]
            use = f"; use --format {' or '.join(works)}" if works else ""
            raise PtmlabError(f"modification '{kind}' cannot be exported with --format {fmt}: {why}{use}")
    if fmt == "transformers":
        from ptmlab.export.hf import check_transformers

        check_transformers(model)
    elif fmt == "torch-int8" and not int8_layers(model):
        raise PtmlabError("the model has no Linear layer to quantize outside its task head, so --format torch-int8 "
                          "would not change it: use --format transformers or onnx-int8")


def model_kind(model) -> str:
    """token-classification or extractive-qa for a model with that task head, else sentence."""
    from ptmlab.models.loader import SAVED_HEADS

    head = type(model).__name__
    return next((kind for suffix, kind in SAVED_HEADS.items() if head.endswith(suffix)), "sentence")


def int8_layers(model) -> list[str]:
    """The Linear layers torch-int8 quantizes: all but the task head and pooler (kept fp32, as ptmlab quantize)."""
    from ptmlab.compress.quantize import linear_names

    return sorted(linear_names(model, int8_keep_fp32()))


def int8_keep_fp32() -> list[str]:
    """Module-name patterns torch-int8 leaves in fp32: ptmlab quantize's (classifier, pooler) and the QA head."""
    from ptmlab.compress.quantize import DEFAULT_KEEP_FP32

    return list(dict.fromkeys([*DEFAULT_KEEP_FP32, "qa_outputs*"]))


def _write(model, tokenizer, fmt: str, tmp: Path, keep_fp32: list[str], int8_mode: str = "dynamic"
           ) -> tuple[object, dict]:
    """Write ``fmt`` into ``tmp``; returns (a model to compare with, info)."""
    from ptmlab.models.loader import save_model

    if fmt == "transformers":
        from ptmlab.export.hf import load_exported, write_transformers

        info = write_transformers(model, tokenizer, tmp)
        return load_exported(tmp), info
    if fmt in ("onnx", "onnx-int8"):
        from ptmlab.compress.quantize import OrtModel, export_onnx, onnx_int8

        fp = export_onnx(model, tmp / ("model.onnx" if fmt == "onnx" else "model_fp32.onnx"))
        info: dict = {"file": "model.onnx"}
        if fmt == "onnx-int8" and int8_mode == "weights":
            from ptmlab.export.onnx_int8 import onnx_int8_weights

            info["int8_mode"] = "weights"
            info["int8_tensors"] = onnx_int8_weights(fp, tmp / "model.onnx")
        elif fmt == "onnx-int8" and keep_fp32:
            from ptmlab.export.onnx_int8 import onnx_int8_keep

            info["fp32_nodes"] = onnx_int8_keep(fp, tmp / "model.onnx", model, keep_fp32)
        elif fmt == "onnx-int8":
            onnx_int8(fp, tmp / "model.onnx")
        if fmt == "onnx-int8":
            fp.unlink()
        model.config.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        return OrtModel(tmp / "model.onnx", model.config), info
    import copy

    from ptmlab.export.int8 import use_int8_linears
    from ptmlab.models.zoo import load_model

    q = copy.deepcopy(model).eval()
    layers = int8_layers(q)
    use_int8_linears(q, layers)
    save_model(q, tokenizer, tmp)
    atomic_write_json(tmp / "quantization.json", {"method": "torch dynamic int8", "weights": "int8, symmetric, "
                      "per tensor (torch default dynamic qconfig)", "activations": "quantized per batch at run time",
                      "kept_fp32": int8_keep_fp32(), "layers": layers})
    return load_model(str(tmp)), {"quantized_layers": len(layers)}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def export_model(cfg: ExportConfig) -> dict:
    """Export ``cfg.model`` as ``cfg.format`` into ``cfg.output``; returns the export's info with its parity."""
    from ptmlab.core.seed import configure_threads
    from ptmlab.export.parity import compare, dev_split, logits, parity_data_args, span_parity
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.report.model_card import write_model_card

    configure_threads()
    source = check_source(cfg.model)
    out = check_output(cfg.output, cfg.overwrite, cfg.model)
    from ptmlab.train.embedding import is_embedding_dir

    if is_embedding_dir(source):  # a sentence embedder: the sentence-transformers layout (export/embedding.py)
        from ptmlab.export.embedding import export_embedding

        return export_embedding(cfg, source, out)
    model = load_model(source).eval()
    tokenizer = load_tokenizer(source)
    check_format(model, cfg.format)
    kind = model_kind(model)
    overrides = {"glue_dir": cfg.glue_dir, "dev_file": cfg.dev_file, "text_col": cfg.text_col,
                 "text_pair_col": cfg.text_pair_col, "label_col": cfg.label_col, "max_length": cfg.max_length,
                 "task_kind": cfg.task_kind or (kind if cfg.dev_file else None)}
    data_args = parity_data_args(source, cfg.task, overrides, cfg.parity_examples, kind)
    task, split = dev_split(data_args, kind)
    length = data_args.max_length
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.export-", dir=out.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it private; the export gets a normal directory's mode
        exported, info = _write(model, tokenizer, cfg.format, tmp, cfg.keep_fp32, cfg.int8_mode)
        if kind == "sentence":
            reference = logits(model, tokenizer, split, length)
            from ptmlab.data.labels import decision_threshold, is_multi_label

            threshold = decision_threshold(model.config) if is_multi_label(model.config) else None  # label sets
            parity = compare(reference, logits(exported, tokenizer, split, length), task, threshold)
        else:
            parity = span_parity(model, exported, tokenizer, split, task, kind, length)
        info = {"format": cfg.format, "source": str(cfg.model), **info, "parity": parity, "output": str(out)}
        atomic_write_json(tmp / "parity.json", parity)
        write_model_card(tmp, source=source, export=info)
        replace_folder(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    info["output"] = str(out)
    return info
