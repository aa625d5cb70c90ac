"""A stock transformers model (sequence classifier, token classifier or span extractor) with ptmlab's recorded
architectural changes re-applied.

This file is copied into a directory exported by ``ptmlab export --format transformers`` and registered through
``auto_map``, so ``AutoModelForSequenceClassification.from_pretrained(DIR, trust_remote_code=True)`` (or
``AutoModelForTokenClassification``, ``AutoModelForQuestionAnswering``: the class is renamed after its head at
export) loads the model with only torch and transformers installed. The class subclasses the family's stock model
(so weight names, the tokenizer and the task head are the usual ones) and, after building it, replays
``config.ptmlab_modifications`` in order, changing shapes and adding modules exactly as ptmlab did; the saved
weights then fill them:

- ``structured_prune``: fewer heads per layer (q/k/v rows and attention-output columns), narrower FFNs, fewer layers;
- ``low_rank``: a Linear replaced by two factors ``up(down(x))``;
- ``layer_sharing``: later layers of a group run the group's first layer (weights stored once);
- ``ghost``: GhostBERT ghost features (depthwise convolution + projection) added to the output projections;
- ``adapter``: Houlsby bottleneck adapters after the attention and FFN outputs;
- ``rnn_student``: the encoder replaced by a BiLSTM or CNN over the word embeddings.
"""

import torch
import torch.nn.functional as F
import transformers
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPooling

from .configuration_ptmlab import BASE_MODEL, PtmlabConfig


# --------------------------------------------------------------------------------------------------- helpers
def _layers(model, s):
    return getattr(model, s["base"]).get_submodule(s["layers"])


def _set(layer, path, new):
    parent, _, attr = path.rpartition(".")
    setattr(layer.get_submodule(parent) if parent else layer, attr, new)


def _linear(old, in_f, out_f):
    return nn.Linear(in_f, out_f, bias=old.bias is not None)


# --------------------------------------------------------------------------------------------------- pruning
def _bias_heads(attn, keep):
    """MPNet: each layer reads its kept heads of the shared relative-position bias."""
    prev = getattr(attn, "_ptmlab_bias_heads", None)  # a list: tensors made while loading would be on "meta"
    attn._ptmlab_bias_heads = list(keep) if prev is None else [prev[k] for k in keep]
    if getattr(attn, "_ptmlab_bias_hook", None) is None:
        def hook(module, args, kwargs):
            heads = module._ptmlab_bias_heads
            if "position_bias" in kwargs and kwargs["position_bias"] is not None:
                bias = kwargs["position_bias"]
                kwargs["position_bias"] = bias[:, torch.tensor(heads, dtype=torch.long, device=bias.device)]
            elif len(args) > 2 and args[2] is not None:
                idx = torch.tensor(heads, dtype=torch.long, device=args[2].device)
                args = (*args[:2], args[2][:, idx], *args[3:])
            return args, kwargs
        attn._ptmlab_bias_hook = attn.register_forward_pre_hook(hook, with_kwargs=True)


def structured_prune(model, s, heads=None, ffn=None, layers=None, **_):
    c = model.config
    d = c.hidden_size // c.num_attention_heads
    layer_list = _layers(model, s)
    for i, keep in (heads or {}).items():
        layer = layer_list[int(i)]
        width = len(keep) * d
        for part in ("query", "key", "value"):
            old = layer.get_submodule(s[part])
            _set(layer, s[part], _linear(old, old.in_features, width))
        old = layer.get_submodule(s["attn_output"])
        _set(layer, s["attn_output"], _linear(old, width, old.out_features))
        attn = layer.get_submodule(s["self_attention"])
        for attr, value in (("num_attention_heads", len(keep)), ("n_heads", len(keep)), ("all_head_size", width)):
            if hasattr(attn, attr):
                setattr(attn, attr, value)
        if s["family"] == "mpnet":
            _bias_heads(attn, sorted(int(h) for h in keep))
    for i, keep in (ffn or {}).items():
        layer = layer_list[int(i)]
        old = layer.get_submodule(s["ffn_in"])
        _set(layer, s["ffn_in"], _linear(old, old.in_features, len(keep)))
        old = layer.get_submodule(s["ffn_out"])
        _set(layer, s["ffn_out"], _linear(old, len(keep), old.out_features))
    gone = {int(i) for i in (layers or [])}
    if gone:
        kept = [m for i, m in enumerate(layer_list) if i not in gone]
        layer_list._modules.clear()
        for j, m in enumerate(kept):
            layer_list.add_module(str(j), m)


# --------------------------------------------------------------------------------------------------- low rank
class LowRankLinear(nn.Module):
    """``up(down(x))``: a rank-r stand-in for a Linear layer."""

    def __init__(self, in_features, out_features, rank, bias=True):
        super().__init__()
        self.in_features, self.out_features, self.rank = in_features, out_features, rank
        self.down = nn.Linear(in_features, rank, bias=False)
        self.up = nn.Linear(rank, out_features, bias=bias)

    def forward(self, x):
        return self.up(self.down(x))


def low_rank(model, s, ranks, **_):
    layer_list = _layers(model, s)
    for key, rank in ranks.items():
        i, part = key.split(".", 1)
        layer = layer_list[int(i)]
        old = layer.get_submodule(s[part])
        _set(layer, s[part], LowRankLinear(old.in_features, old.out_features, int(rank), bias=old.bias is not None))


# --------------------------------------------------------------------------------------------------- sharing
class SharedLayer(nn.Module):
    """Runs another layer's module (not registered here, so its weights are stored once)."""

    def __init__(self, source, source_index):
        super().__init__()
        self.__dict__["_source"] = source
        self.source_index = source_index

    def forward(self, *args, **kwargs):
        return self.__dict__["_source"](*args, **kwargs)


def layer_sharing(model, s, groups, **_):
    layer_list = _layers(model, s)
    for group in groups:
        lead = layer_list[group[0]]
        for i in group[1:]:
            layer_list._modules[str(i)] = SharedLayer(lead, group[0])


# --------------------------------------------------------------------------------------------------- ghost
class _MaskHolder:
    def __init__(self):
        self.mask = None

    def capture(self, module, args, kwargs):
        mask = kwargs.get("attention_mask")
        if mask is None and len(args) > 1 and isinstance(args[1], torch.Tensor):
            mask = args[1]
        self.mask = mask if mask is not None and mask.dim() == 2 else None


class GhostModule(nn.Module):
    """``proj(gelu(depthwise_conv(x * mask)))``, added to an output projection's output."""

    def __init__(self, channels, hidden, kernel, holder):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, kernel, padding=kernel // 2, groups=channels)
        self.proj = nn.Linear(channels, hidden, bias=False)
        self.holder = holder

    def forward(self, x):
        mask = self.holder.mask
        if mask is not None and mask.shape == x.shape[:2]:
            x = x * mask.to(x.dtype).unsqueeze(-1)
        g = self.conv(x.transpose(1, 2)).transpose(1, 2)
        return self.proj(F.gelu(g))

    def hook(self, module, args, output):
        return output + self.forward(args[0]).to(output.dtype)


def ghost(model, s, kernel=3, parts=("attn", "ffn"), **_):
    where = {"attn": "attn_output", "ffn": "ffn_out"}
    encoder = getattr(model, s["base"])
    holder = getattr(encoder, "_ptmlab_ghost_holder", None)
    if holder is None:
        holder = _MaskHolder()
        encoder._ptmlab_ghost_holder = holder
        encoder.register_forward_pre_hook(holder.capture, with_kwargs=True)
    for layer in _layers(model, s):
        for part in parts:
            proj = layer.get_submodule(s[where[part]])
            g = GhostModule(proj.in_features, model.config.hidden_size, int(kernel), holder)
            layer.add_module(f"ghost_{part}", g)
            proj.register_forward_hook(g.hook)


# --------------------------------------------------------------------------------------------------- adapters
class Adapter(nn.Module):
    def __init__(self, hidden, size):
        super().__init__()
        self.down = nn.Linear(hidden, size)
        self.up = nn.Linear(size, hidden)

    def forward(self, h):
        return h + self.up(F.gelu(self.down(h)))


def _adapter_hook(module, inputs, output):
    return module._ptmlab_adapter(output)


def adapter(model, s, size=64, **_):
    for layer in _layers(model, s):
        for part, name in (("attn_output", "attn_adapter"), ("ffn_out", "ffn_adapter")):
            proj = layer.get_submodule(s[part])
            a = Adapter(model.config.hidden_size, int(size))
            layer.add_module(name, a)
            object.__setattr__(proj, "_ptmlab_adapter", a)
            proj.register_forward_hook(_adapter_hook)


# --------------------------------------------------------------------------------------------------- RNN students
class RNNEncoder(nn.Module):
    """Word embeddings + BiLSTM or CNN, max-pooled over real tokens (module names follow BERT's)."""

    def __init__(self, kind, vocab, pad_id, embed, hidden=256, filters=128):
        super().__init__()
        self.kind = kind
        self.embeddings = nn.Module()
        self.embeddings.word_embeddings = nn.Embedding(vocab, embed, padding_idx=pad_id)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList()
        if kind == "bilstm":
            self.rnn = nn.LSTM(embed, hidden, batch_first=True, bidirectional=True)
        else:
            self.convs = nn.ModuleList(nn.Conv1d(embed, filters, k, padding=k // 2) for k in (3, 4, 5))

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
        x = self.embeddings.word_embeddings(input_ids)
        if self.kind == "bilstm":
            lengths = mask.sum(-1).clamp_min(1).cpu()
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            out, _ = self.rnn(packed)
            seq, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        else:
            h = x.transpose(1, 2)
            seq = torch.cat([torch.relu(c(h))[..., : x.shape[1]] for c in self.convs], 1).transpose(1, 2)
        pooled = seq.masked_fill(mask[..., None] == 0, torch.finfo(seq.dtype).min).max(1).values
        return BaseModelOutputWithPooling(last_hidden_state=seq, pooler_output=pooled)


def rnn_student(model, s, arch, embed, hidden=256, filters=128, **_):
    c = model.config
    setattr(model, s["base"], RNNEncoder(arch, c.vocab_size, c.pad_token_id or 0, int(embed), int(hidden),
                                         int(filters)))


CHANGES = {"structured_prune": structured_prune, "low_rank": low_rank, "layer_sharing": layer_sharing,
           "ghost": ghost, "adapter": adapter, "rnn_student": rnn_student}


class PtmlabForSequenceClassification(getattr(transformers, BASE_MODEL)):
    config_class = PtmlabConfig

    def __init__(self, config):
        super().__init__(config)
        for mod in config.ptmlab_modifications:
            if mod["kind"] not in CHANGES:
                raise ValueError(f"this modelling code cannot rebuild modification '{mod['kind']}'")
            params = {k: v for k, v in mod.items() if k not in ("kind", "module")}
            CHANGES[mod["kind"]](self, config.ptmlab_structure, **params)
