"""A Hugging Face model card (README.md with YAML metadata) for a run directory or an export.

Everything in the card is read from what the run already recorded: config.yaml (the command and its options, so
the card can show the command that produced the metrics), summary.json (metrics, parameter counts, latencies that a
command measured), config.json (architecture, labels and ``ptmlab_modifications``) and the weight files (size on
disk, parameter count from the safetensors headers). Nothing is timed or evaluated here: a number that was not
recorded is written as "not measured".
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ptmlab.core.io import atomic_write_text

ZOO_HUB_IDS = {"minilm": "sentence-transformers/all-MiniLM-L6-v2", "mpnet": "sentence-transformers/all-mpnet-base-v2"}
GLUE = {"cola", "sst2", "mrpc", "stsb", "rte", "wnli", "qnli", "qqp", "mnli"}
# task head (end of the architecture name) -> (hub pipeline tag, what the model is, the Auto class that loads it)
HEAD_KINDS = {"ForTokenClassification": ("token-classification", "A token classifier (a tag per word)",
                                         "AutoModelForTokenClassification"),
              "ForQuestionAnswering": ("question-answering", "An extractive question-answering model (an answer "
                                       "span of the context)", "AutoModelForQuestionAnswering")}
TEXT_CLASSIFIER = ("text-classification", "A text classifier", "AutoModelForSequenceClassification")
USES = {"token-classification": "Tagging the words of English sentences",
        "question-answering": "Finding answers to questions in English passages"}
ONNX_OUTPUTS = {"token-classification": "logits [batch, tokens, tags]",
                "question-answering": "start_logits, end_logits [batch, tokens]"}
AGREEMENT = {"token-classification": "tag agreement per word", "extractive-qa": "same answer span"}
WEIGHT_SUFFIXES = (".safetensors", ".onnx")
SKIP_OPTIONS = {"command", "overwrite", "output"}
POSITIONAL_MODEL = {"prune", "quantize", "compress", "lowrank", "share", "magnitude", "ghost", "longify", "export",
                    "optimize"}


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


# training state beside the model while a run finishes (the card is written before best.safetensors is removed)
TRAINING_FILES = ("optimizer.safetensors", "rng.safetensors", "best.safetensors")


def weight_files(path: Path) -> list[Path]:
    """The model's weight files: training state (``TRAINING_FILES``) is neither counted nor sized."""
    return sorted(f for f in path.iterdir() if f.is_file() and f.suffix in WEIGHT_SUFFIXES
                  and f.name not in TRAINING_FILES)


def count_parameters(path: Path) -> int | None:
    """Tensor elements in the directory's safetensors files (from their headers; no weights are read)."""
    from safetensors import safe_open

    files = [f for f in weight_files(path) if f.suffix == ".safetensors"]
    if not files:
        return None
    total = 0
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as st:
                for key in st.keys():
                    n = 1
                    for d in st.get_slice(key).get_shape():
                        n *= int(d)
                    total += n
        except Exception:  # a damaged file: the card says the count is unknown rather than failing the run
            return None
    return total


def _command_line(cfg: dict) -> str:
    """The ``ptmlab`` command line that reproduces the run, from config.yaml."""
    if not cfg:
        return "not recorded"
    command = str(cfg.get("command", "?"))
    parts = ["ptmlab", command]
    if cfg.get("model"):
        parts += [str(cfg["model"])] if command in POSITIONAL_MODEL else ["--model", str(cfg["model"])]
    for k, v in cfg.items():
        if k in SKIP_OPTIONS or k == "model" or v is None or v == [] or v == {}:
            continue
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            parts.append(flag if v else f"--no-{k.replace('_', '-')}")
        elif isinstance(v, list):  # every list flag takes one comma-separated value
            parts += [flag, ",".join(map(str, v))]
        else:
            parts += [flag, str(v)]
    if cfg.get("output"):
        parts += ["--output", str(cfg["output"])]
    return " ".join(parts)


def _flat_metrics(summary: dict) -> dict[str, float]:
    out = {}
    for split, key in (("dev", "metrics"), ("test", "test_metrics")):
        for k, v in (summary.get(key) or {}).items():
            if isinstance(v, int | float) and not isinstance(v, bool) and k != "threshold":  # a setting
                out[f"{split} {k}"] = float(v)
    return out


def _latency(summary: dict) -> tuple[str, ...]:
    b1 = summary.get("latency_b1_ms")
    b32 = summary.get("latency_b32_ms")
    for row in summary.get("rows") or []:  # compression/quantization tables: the last (final) variant's row
        b1, b32 = row.get("latency_b1_ms", b1), row.get("latency_b32_ms", b32)
    return tuple(f"{v} ms" if v is not None else "not measured" for v in (b1, b32))


def _describe_modification(m: dict) -> str:
    kind = m.get("kind", "?")
    if kind == "structured_prune":
        heads = {k: len(v) for k, v in (m.get("heads") or {}).items()}
        ffn = {k: len(v) for k, v in (m.get("ffn") or {}).items()}
        return (f"structured pruning: heads kept per changed layer {heads or 'none changed'}, FFN neurons kept "
                f"{ffn or 'none changed'}, layers removed {m.get('layers') or 'none'}")
    params = {k: v for k, v in m.items() if k not in ("kind", "module")}
    text = json.dumps(params)
    return f"{kind}: {text if len(text) < 300 else text[:300] + '...'}"


def _root_model(name: str) -> str:
    """The model a chain of runs started from (a prune of a fine-tuned run of minilm -> minilm)."""
    for _ in range(8):
        cfg = _read_yaml(Path(name) / "config.yaml") if Path(name).is_dir() else {}
        if not cfg.get("model") or str(cfg["model"]) == name:
            return name
        name = str(cfg["model"])
    return name


def model_card(path: str | Path, source: str | Path | None = None, export: dict | None = None) -> str:
    """The card's text for the model directory ``path`` (``source``: the run it was exported from)."""
    path = Path(path)
    origin = Path(source) if source is not None and Path(source).is_dir() else path
    cfg = _read_yaml(origin / "config.yaml")
    summary = _read_json(origin / "summary.json")
    hf = _read_json(path / "config.json") or _read_json(origin / "config.json")
    mods = hf.get("ptmlab_modifications") or []
    base_name = str(cfg.get("model") or summary.get("model") or (source if source is not None else "") or "unknown")
    root = _root_model(base_name)
    base_model = ZOO_HUB_IDS.get(root, root)
    task = str(summary.get("task") or cfg.get("task") or ((export or {}).get("parity") or {}).get("task")
               or "unknown")
    metrics = _flat_metrics(summary)
    params = count_parameters(path)
    size_mb = sum(f.stat().st_size for f in weight_files(path)) / 2**20 if path.is_dir() else 0.0
    b1, b32 = _latency(summary)
    custom = bool(hf.get("auto_map"))
    name = Path(export["output"]).name if export and export.get("output") else path.name  # written before renaming
    arch = str((hf.get("architectures") or [""])[0])
    pipeline, what, auto = next((v for h, v in HEAD_KINDS.items() if arch.endswith(h)), TEXT_CLASSIFIER)
    tags = ["ptmlab", pipeline, *(f"ptmlab-{m['kind']}" for m in mods if "kind" in m)]
    if cfg.get("command"):
        tags.append(f"ptmlab-{cfg['command']}")
    if export:
        tags.append(f"export-{export['format']}")
    meta: dict = {"library_name": "transformers", "base_model": base_model, "pipeline_tag": pipeline,
                  "tags": list(dict.fromkeys(tags))}
    if task != "unknown":
        meta["datasets"] = ["nyu-mll/glue" if task in GLUE else task]
    if metrics:
        meta["metrics"] = sorted({k.split(" ", 1)[1] for k in metrics})
        results = []
        for split, hub_split in (("dev", "validation"), ("test", "test")):
            rows = [{"type": k.split(" ", 1)[1], "name": k, "value": round(v, 4)} for k, v in metrics.items()
                    if k.startswith(split + " ")]
            if rows:
                results.append({"task": {"type": pipeline},
                                "dataset": {"name": task, "type": "nyu-mll/glue" if task in GLUE else task,
                                            **({"config": task} if task in GLUE else {}), "split": hub_split},
                                "metrics": rows})
        meta["model-index"] = [{"name": name, "results": results}]
    labels = hf.get("id2label") or {}
    lines = ["---", yaml.safe_dump(meta, sort_keys=False).rstrip(), "---", "",
             f"# {name}", "",
             f"{what} made with ptmlab from `{base_name}`"
             + (f", exported as `{export['format']}`" if export else "") + ".", "",
             "## Base model", "", f"`{base_model}`" + (f" (ptmlab zoo name `{root}`)" if root in ZOO_HUB_IDS else "")
             + (f", through `{base_name}`" if base_name != root else "") + ".", "",
             "## Task and data", "",
             f"Task `{task}`" + (f" (GLUE {task.upper()}, validation split for dev metrics)" if task in GLUE else "")
             + (f"; labels: {', '.join(str(v) for v in labels.values())}" if labels else "") + ".",
             *([f"Multi-label: a sigmoid per label; a text gets every label whose probability reaches "
                f"{hf.get('multi_label_threshold', 0.5)} (`multi_label_threshold` in config.json, chosen on dev)."]
               if hf.get("problem_type") == "multi_label_classification" else []),
             f"Training examples: {summary.get('train_examples', 'not recorded')}.", "",
             "## Training and compression recipe", "",
             f"Made by `ptmlab {cfg.get('command', '?')}`"
             + (f" (strategy `{summary['strategy']}`)" if summary.get("strategy") else "") + ".", ""]
    if mods:
        lines += ["Architecture changes, in order:", ""] + [f"- {_describe_modification(m)}" for m in mods] + [""]
    else:
        lines += ["The architecture is the base model's (no structural change).", ""]
    keys = ("epochs", "lr", "batch_size", "max_length", "seed", "strategy", "max_train", "heads", "ffn", "layers",
            "recover_epochs", "iterations", "student", "losses")
    opts = {k: cfg[k] for k in keys if k in cfg}
    if opts:
        lines += ["Main options: " + ", ".join(f"`{k}={v}`" for k, v in opts.items()) + ".", ""]
    lines += ["## Metrics", ""]
    if metrics:
        lines += ["| metric | value |", "|---|---|"] + [f"| {k} | {v:.4f} |" for k, v in metrics.items()] + [""]
    else:
        lines += ["No task metrics were recorded for this model.", ""]
    lines += ["Produced by:", "", "```", _command_line(cfg), "```", ""]
    if export and export.get("parity"):
        p = export["parity"]
        agree = "n/a (regression)" if p.get("label_agreement") is None else f"{p['label_agreement']:.4f}"
        diff = p.get("max_abs_logit_diff")  # None: a pruned vocabulary splits words into other pieces
        lines += [f"Parity of this `{export['format']}` export with ptmlab's PyTorch model on {p['examples']} dev "
                  f"texts of `{p['task']}`: max |logit difference| "
                  f"{'n/a (tokenized differently)' if diff is None else f'{diff:.3g}'}, "
                  f"{AGREEMENT.get(p.get('kind'), 'label agreement')} {agree}.", ""]
    lines += ["## Size and speed", "",
              f"- parameters: {f'{params:,}' if params is not None else 'not counted (no safetensors weights)'}",
              f"- size on disk: {size_mb:.2f} MB",
              f"- latency, batch 1: {b1}", f"- latency, batch 32: {b32}", "",
              "## How to load", ""]
    if export and export["format"] in ("onnx", "onnx-int8"):
        lines += ["```python", "import onnxruntime as ort",
                  f"session = ort.InferenceSession('{name}/model.onnx')  # inputs: tokenizer outputs as int64",
                  f"# outputs: {ONNX_OUTPUTS.get(pipeline, 'logits [batch, labels]')}", "```", ""]
    else:
        remote = ", trust_remote_code=True" if custom else ""
        lines += ["```python", f"from transformers import {auto}, AutoTokenizer",
                  f"model = {auto}.from_pretrained('{name}'{remote})",
                  f"tokenizer = AutoTokenizer.from_pretrained('{name}'{remote})", "```", ""]
        if custom:
            lines += ["The architecture is not expressible in the stock classes, so the directory carries its "
                      "modelling code (`modeling_ptmlab.py`, torch and transformers only): read it before trusting "
                      "it.", ""]
        if any(m.get("kind") == "torch_int8" for m in mods):
            lines += ["This is a torch dynamic-int8 model: load it with `ptmlab.models.zoo.load_model(DIR)`.", ""]
    lines += ["## Intended use and limits", "",
              f"{USES.get(pipeline, 'Classifying short English texts')} like those of `{task}`. The metrics above "
              "come from one dev split and say little about other domains, languages or much longer inputs (texts "
              "were truncated to "
              f"{cfg.get('max_length', 'the configured')} tokens). Compressed and quantized variants can disagree "
              "with the full model on some inputs; check the parity numbers and evaluate on your own data before "
              "relying on it. Biases of the base model and of the training data carry over.", ""]
    return "\n".join(lines)


def write_model_card(run_dir_path: str | Path, source: str | Path | None = None,
                     export: dict | None = None) -> Path:
    """Write README.md (the model card) into ``run_dir_path``; returns its path."""
    out = Path(run_dir_path) / "README.md"
    atomic_write_text(out, model_card(run_dir_path, source, export))
    return out
