"""Where things live inside each architecture family: the one place pruning, gating and distillation ask.

A ``Structure`` names module paths relative to the bare encoder (``model.bert``, ``model.mpnet``, ...) and to
one transformer layer. Add a family by adding one entry to ``STRUCTURES``.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.core.registry import Registry


@dataclass(frozen=True)
class Structure:
    family: str
    base: str  # attribute of a task model holding the bare encoder ("bert")
    embeddings: str  # relative to the encoder
    layers: str  # ModuleList of transformer layers, relative to the encoder
    self_attention: str  # module computing softmax(QK^T)V, relative to a layer
    query: str
    key: str
    value: str
    attn_output: str  # output projection of attention, relative to a layer
    attn_layernorm: str
    ffn_in: str
    ffn_out: str
    ffn_layernorm: str
    word_embeddings: str  # relative to the encoder
    head: tuple[str, ...] = ("classifier",)  # task-head modules, relative to the task model
    pooler: str | None = None  # relative to the encoder
    embedding_extras: tuple[str, ...] = ()  # modules trained with the embeddings (ALBERT's projection to hidden)
    fused_qkv: bool = False  # query, key and value are one projection (ModernBERT's Wqkv): no per-head surgery
    shared_layers: bool = False  # one set of layer weights applied at every depth (ALBERT): no per-layer rates

    # ------------------------------------------------------------------ lookups
    def encoder(self, model: nn.Module) -> nn.Module:
        return getattr(model, self.base) if hasattr(model, self.base) else model

    def layer_list(self, model: nn.Module) -> nn.ModuleList:
        return self.encoder(model).get_submodule(self.layers)

    def num_layers(self, model: nn.Module) -> int:
        return len(self.layer_list(model))

    def layer(self, model: nn.Module, i: int) -> nn.Module:
        layers = self.layer_list(model)
        if not 0 <= i < len(layers):
            raise PtmlabError(f"layer {i} is out of range: the model has layers 0..{len(layers) - 1}")
        return layers[i]

    def part(self, model: nn.Module, i: int, name: str) -> nn.Module:
        """A named part (``query``, ``ffn_in``, ...) of layer i."""
        return self.layer(model, i).get_submodule(getattr(self, name))

    def embedding_module(self, model: nn.Module) -> nn.Module:
        return self.encoder(model).get_submodule(self.embeddings)

    def head_modules(self, model: nn.Module) -> list[nn.Module]:
        mods = [model.get_submodule(h) for h in self.head if _has(model, h)]
        if self.pooler and _has(self.encoder(model), self.pooler):
            pooler = self.encoder(model).get_submodule(self.pooler)
            if pooler is not None:
                mods.append(pooler)
        return mods

    def layer_prefix(self, i: int) -> str:
        return f"{self.base}.{self.layers}.{i}."


def _has(model: nn.Module, path: str) -> bool:
    try:
        return model.get_submodule(path) is not None
    except AttributeError:
        return False


STRUCTURES: Registry[Structure] = Registry("architecture family")

_BERT_LAYER = dict(self_attention="attention.self", query="attention.self.query", key="attention.self.key",
                   value="attention.self.value", attn_output="attention.output.dense",
                   attn_layernorm="attention.output.LayerNorm", ffn_in="intermediate.dense",
                   ffn_out="output.dense", ffn_layernorm="output.LayerNorm")
for fam in ("bert", "roberta", "electra"):
    STRUCTURES.add(fam, Structure(fam, fam, "embeddings", "encoder.layer", word_embeddings="embeddings.word_embeddings",
                                  head=("classifier",), pooler="pooler" if fam == "bert" else None, **_BERT_LAYER))
STRUCTURES.add("mobilebert", Structure(  # bottleneck blocks; layer outputs have the inter-block width
    "mobilebert", "mobilebert", "embeddings", "encoder.layer", word_embeddings="embeddings.word_embeddings",
    head=("classifier",), pooler="pooler", **_BERT_LAYER))
STRUCTURES.add("mpnet", Structure(
    "mpnet", "mpnet", "embeddings", "encoder.layer", self_attention="attention.attn", query="attention.attn.q",
    key="attention.attn.k", value="attention.attn.v", attn_output="attention.attn.o",
    attn_layernorm="attention.LayerNorm", ffn_in="intermediate.dense", ffn_out="output.dense",
    ffn_layernorm="output.LayerNorm", word_embeddings="embeddings.word_embeddings",
    head=("classifier",), pooler="pooler"))
STRUCTURES.add("xlm-roberta", Structure("xlm-roberta", "roberta", "embeddings", "encoder.layer",
                                        word_embeddings="embeddings.word_embeddings", head=("classifier",),
                                        **_BERT_LAYER))
_DEBERTA_LAYER = {**_BERT_LAYER, "query": "attention.self.query_proj", "key": "attention.self.key_proj",
                  "value": "attention.self.value_proj"}
STRUCTURES.add("deberta-v2", Structure(  # DeBERTa-v2 and v3; its pooler sits on the task model, beside the head
    "deberta-v2", "deberta", "embeddings", "encoder.layer", word_embeddings="embeddings.word_embeddings",
    head=("pooler", "classifier"), **_DEBERTA_LAYER))
STRUCTURES.add("modernbert", Structure(
    "modernbert", "model", "embeddings", "layers", self_attention="attn", query="attn.Wqkv", key="attn.Wqkv",
    value="attn.Wqkv", attn_output="attn.Wo", attn_layernorm="attn_norm", ffn_in="mlp.Wi", ffn_out="mlp.Wo",
    ffn_layernorm="mlp_norm", word_embeddings="embeddings.tok_embeddings", head=("head", "classifier"),
    fused_qkv=True))
STRUCTURES.add("albert", Structure(
    "albert", "albert", "embeddings", "encoder.albert_layer_groups.0.albert_layers", self_attention="attention",
    query="attention.query", key="attention.key", value="attention.value", attn_output="attention.dense",
    attn_layernorm="attention.LayerNorm", ffn_in="ffn", ffn_out="ffn_output", ffn_layernorm="full_layer_layer_norm",
    word_embeddings="embeddings.word_embeddings", head=("classifier",), pooler="pooler",
    embedding_extras=("encoder.embedding_hidden_mapping_in",), shared_layers=True))
STRUCTURES.add("distilbert", Structure(
    "distilbert", "distilbert", "embeddings", "transformer.layer", self_attention="attention",
    query="attention.q_lin", key="attention.k_lin", value="attention.v_lin", attn_output="attention.out_lin",
    attn_layernorm="sa_layer_norm", ffn_in="ffn.lin1", ffn_out="ffn.lin2", ffn_layernorm="output_layer_norm",
    word_embeddings="embeddings.word_embeddings", head=("pre_classifier", "classifier")))


def structure_of(model_or_config, feature: str | None = None) -> Structure:
    """The structure map for a model (or its config). ``feature`` names what needs it (``--llrd``, ``--strategy
    lora``, pruning...) for the one-line error on an architecture without a map."""
    config = getattr(model_or_config, "config", model_or_config)
    model_type = getattr(config, "model_type", None)
    if model_type not in STRUCTURES:
        need = f"{feature} needs to know where the layers are, but " if feature else ""
        raise PtmlabError(f"{need}architecture '{model_type}' has no structure map (ptmlab/models/structure.py): "
                          f"supported families are {', '.join(STRUCTURES.names())}")
    return STRUCTURES.get(model_type)


def require_layers(model, feature: str) -> Structure:
    """The structure map of a feature that treats each layer on its own (rates per layer, unfreezing by layer):
    refused on an architecture without a map or with one set of weights shared by every layer (ALBERT)."""
    s = structure_of(model, feature)
    if s.shared_layers:
        raise PtmlabError(f"{feature} needs separate weights per layer, but architecture '{s.family}' shares one "
                          f"layer's weights across its depth: use --strategy full or lora with --llrd 1")
    return s


def require_split_qkv(model, feature: str) -> Structure:
    """The structure map of a feature that cuts query, key and value apart (head pruning, head gates)."""
    s = structure_of(model, feature)
    if s.fused_qkv:
        raise PtmlabError(f"{feature} needs separate query/key/value projections, but architecture '{s.family}' "
                          f"fuses them into one ({s.query}): not supported for this architecture")
    return s


def model_dims(model) -> dict:
    """Layers, hidden size, heads, FFN width and vocabulary of a model."""
    c = model.config
    return {
        "layers": getattr(c, "num_hidden_layers", getattr(c, "n_layers", None)),
        "hidden": getattr(c, "hidden_size", getattr(c, "dim", None)),
        "heads": getattr(c, "num_attention_heads", getattr(c, "n_heads", None)),
        "ffn": getattr(c, "intermediate_size", getattr(c, "hidden_dim", None)),
        "vocab": getattr(c, "vocab_size", None),
    }
