"""The ``transformers`` export: a directory stock transformers loads, with modelling code only where needed.

Where the model's modifications are expressible in its family's stock configuration (none at all, or pruning that
leaves every layer with all its heads and the same FFN width, possibly with fewer layers) the directory is a plain
``save_pretrained`` one with adjusted sizes. Otherwise the two template files in ``templates/`` are copied beside
the weights (one line naming the family's stock classes set) and the model class is registered through the
config's ``auto_map`` under its task head's Auto class (sequence classification, token classification or question
answering), so ``from_pretrained(DIR, trust_remote_code=True)`` rebuilds the architecture with torch and
transformers alone. The weights are ptmlab's own state dict: the template reproduces ptmlab's module names.

config.json names a ``model_type`` no transformers release registers, ``ptmlab-FAMILY`` (``ptmlab-bert``), and maps
``AutoConfig`` to the exported configuration class, so nothing loads the directory as the family's stock model:
with the family's own ``model_type`` the stock class would be picked without ``trust_remote_code`` and would refuse
the pruned shapes, or with ``ignore_mismatched_sizes=True`` re-initialise them and predict something else. Without
``trust_remote_code=True`` every Auto class (``AutoConfig``, the model's, ``AutoTokenizer``, a pipeline) asks for it:
transformers' prompt where Python reads a terminal, else its error "Please pass the argument
`trust_remote_code=True` to allow custom code to be run."; with it, the configuration is the family's stock
configuration with ptmlab's extra fields.

Uniform *head* pruning is not stock: transformers derives the head size from ``hidden_size / num_attention_heads``,
so a layer with fewer heads of the original size needs the modelling code.
"""

from __future__ import annotations

import json
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_write_json, atomic_write_text
from ptmlab.models.structure import structure_of

TEMPLATES = Path(__file__).parent / "templates"
REMOTE_KINDS = ("structured_prune", "low_rank", "layer_sharing", "ghost", "adapter", "rnn_student")
# task head (the end of the model class name) -> the Auto class that loads it
AUTO_CLASSES = {"ForSequenceClassification": "AutoModelForSequenceClassification",
                "ForTokenClassification": "AutoModelForTokenClassification",
                "ForQuestionAnswering": "AutoModelForQuestionAnswering"}
TEMPLATE_CLASS = "PtmlabForSequenceClassification"  # the model class in templates/modeling_ptmlab.py


def head_of(architecture: str) -> str:
    """The task head a model class name ends with (sequence classification when none matches)."""
    return next((h for h in AUTO_CLASSES if architecture.endswith(h)), "ForSequenceClassification")


def auto_class(architecture: str):
    """The transformers Auto class that loads a model of this class name."""
    import transformers

    return getattr(transformers, AUTO_CLASSES[head_of(architecture)])


def modifications(model) -> list[dict]:
    return list(getattr(model.config, "ptmlab_modifications", None) or [])


def structure_paths(model) -> dict:
    """Where the layers and projections live (from ptmlab's structure map), for the template to use."""
    s = structure_of(model)
    keys = ("family", "base", "layers", "self_attention", "query", "key", "value", "attn_output", "ffn_in", "ffn_out")
    return {k: getattr(s, k) for k in keys}


def _widths(model) -> tuple[list[int], list[int]]:
    s = structure_of(model)
    c = model.config
    d = c.hidden_size // c.num_attention_heads
    n = s.num_layers(model)
    heads = [s.part(model, i, "attn_output").in_features // d for i in range(n)]
    ffn = [s.part(model, i, "ffn_in").out_features for i in range(n)]
    return heads, ffn


def stock_config(model):
    """A stock config of the same family describing the modified model, or None when it needs custom code."""
    mods = modifications(model)
    config = model.config.__class__.from_dict(model.config.to_dict())
    if not mods:
        return config
    if any(m["kind"] != "structured_prune" for m in mods):
        return None
    heads, ffn = _widths(model)
    ffn_key = "intermediate_size" if hasattr(config, "intermediate_size") else "hidden_dim"
    layers_key = "num_hidden_layers" if hasattr(config, "num_hidden_layers") else "n_layers"
    if any(h != config.num_attention_heads for h in heads) or len(set(ffn)) != 1:
        return None
    setattr(config, ffn_key, ffn[0])
    setattr(config, layers_key, len(heads))
    del config.ptmlab_modifications
    return config


def remote_model_type(family: str) -> str:
    """The ``model_type`` of an export with modelling code: one transformers does not register, so the stock class
    of ``family`` never loads it."""
    return f"ptmlab-{family}"


def check_transformers(model) -> None:
    """PtmlabError, before anything is written, for a modification the modelling code cannot rebuild."""
    for m in modifications(model):
        if m["kind"] not in REMOTE_KINDS:
            raise PtmlabError(f"modification '{m['kind']}' cannot be exported with --format transformers (the "
                              f"exported modelling code rebuilds {', '.join(REMOTE_KINDS)}): use --format onnx, "
                              f"onnx-int8 or torch-int8")
    structure_of(model)  # PtmlabError for a family without a structure map


def write_transformers(model, tokenizer, out: Path) -> dict:
    """Write the model into ``out`` (an empty temp directory); returns {"custom_code": bool, ...}."""
    from ptmlab.models.loader import save_model

    check_transformers(model)
    stock = stock_config(model)
    head = head_of(type(model).__name__)
    if stock is not None:
        plain = auto_class(head).from_config(stock)
        missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
        missing = [k for k in missing if not k.endswith(("position_ids", "token_type_ids"))]
        if missing or unexpected:
            raise PtmlabError(f"the model does not fit its stock configuration (missing {missing[:3]}, unexpected "
                              f"{unexpected[:3]}): export it with custom code by reporting this as a bug")
        save_model(plain.eval(), tokenizer, out)
        return {"custom_code": False, "architecture": type(plain).__name__}
    import transformers

    base_config, base_model = type(model.config).__name__, type(model).__name__
    if not hasattr(transformers, base_config) or not hasattr(transformers, base_model):
        raise PtmlabError(f"model class '{base_model}' is not a stock transformers class: only sequence "
                          f"classification, token classification and QA models of a supported family can be "
                          f"exported")
    name = f"Ptmlab{head}"
    model_type = remote_model_type(model.config.model_type)
    save_model(model, tokenizer, out)
    cfg = json.loads((out / "config.json").read_text())
    cfg.update(model_type=model_type, architectures=[name],
               auto_map={"AutoConfig": "configuration_ptmlab.PtmlabConfig",
                         AUTO_CLASSES[head]: f"modeling_ptmlab.{name}"},
               ptmlab_structure=structure_paths(model), ptmlab_base_model_type=model.config.model_type)
    atomic_write_json(out / "config.json", cfg)
    conf = (TEMPLATES / "configuration_ptmlab.py").read_text()
    conf = conf.replace('model_type = "ptmlab-bert"', f'model_type = "{model_type}"')
    conf = conf.replace('BASE_CONFIG = "BertConfig"', f'BASE_CONFIG = "{base_config}"')
    conf = conf.replace('BASE_MODEL = "BertForSequenceClassification"', f'BASE_MODEL = "{base_model}"')
    atomic_write_text(out / "configuration_ptmlab.py", conf)
    modeling = (TEMPLATES / "modeling_ptmlab.py").read_text()
    atomic_write_text(out / "modeling_ptmlab.py", modeling.replace(f"class {TEMPLATE_CLASS}(", f"class {name}("))
    return {"custom_code": True, "architecture": name, "base_architecture": base_model,
            "modifications": [m["kind"] for m in modifications(model)]}


def load_exported(path: str | Path):
    """Load an exported directory the way a user would: the Auto class of its task head (trust_remote_code where it
    carries modelling code)."""
    cfg = json.loads((Path(path) / "config.json").read_text())
    arch = (cfg.get("architectures") or [""])[0]
    return auto_class(arch).from_pretrained(str(path), trust_remote_code=True).eval()
