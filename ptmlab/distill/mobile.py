"""MobileBERT-style students (Q18; Sun et al., ACL 2020): ``mobile:LAYERS[xBOTTLENECK]``.

A MobileBERT block is thin inside and wide outside: each layer projects the inter-block width down to a narrow
bottleneck, attends and runs a stack of small feed-forward networks there, and projects back up. The student here
is transformers' own ``MobileBertForSequenceClassification`` sized against the teacher:

- inter-block width = the teacher's hidden size, so every layer's output is compared with the teacher's hidden
  states directly (``hidden_mse`` needs no projection: MobileBERT's layer-by-layer feature-map transfer);
- heads = the teacher's heads, so ``attention_mse`` / ``attention_kl`` transfer the attention maps head by head;
- bottleneck (intra-block width) = ``BOTTLENECK`` (default a quarter of the teacher's width, rounded to the heads),
  with embeddings of that width (trigram input, as MobileBERT) and 4 feed-forward networks of 4 x bottleneck.

Weights start random (MobileBERT's own student is pre-trained by distillation from an inverted-bottleneck teacher;
here the layer-by-layer distillation does that work), except the position and segment embeddings, which have the
teacher's width and are copied. The method assumes a student smaller than its teacher: more layers, a bottleneck as
wide as the teacher, or more parameters than the teacher is refused with a one-line error.
"""

from __future__ import annotations

from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.models.structure import model_dims, structure_of

FEEDFORWARD_NETWORKS = 4  # MobileBERT's stacked FFNs per block


def parse_mobile(rest: str, spec: str) -> tuple[int, int | None]:
    """``4`` -> (4, None); ``4x96`` -> (4, 96)."""
    layers, x, width = rest.strip().partition("x")
    try:
        return int(layers), (int(width) if x else None)
    except ValueError:
        raise PtmlabError(f"student '{spec}': write mobile:LAYERS or mobile:LAYERSxBOTTLENECK (e.g. mobile:4x96)") \
            from None


def mobile_config(teacher: nn.Module, layers: int, bottleneck: int | None, spec: str = "mobile"):
    """A ``MobileBertConfig`` sized against the teacher (see the module docstring); checks it is smaller."""
    from transformers import MobileBertConfig

    dims = model_dims(teacher)
    t_layers, t_hidden, heads = dims["layers"], dims["hidden"], dims["heads"]
    if bottleneck is None:
        bottleneck = max(heads, (t_hidden // 4) // heads * heads)
    if not 1 <= layers <= t_layers:
        raise PtmlabError(f"student '{spec}' asks for {layers} layers, but the teacher has {t_layers}: a MobileBERT "
                          f"student is no deeper than its teacher, use 1..{t_layers}")
    if not 0 < bottleneck < t_hidden:
        raise PtmlabError(f"student '{spec}': bottleneck {bottleneck} must be narrower than the teacher's hidden size "
                          f"{t_hidden} (e.g. mobile:{layers}x{max(heads, t_hidden // 4 // heads * heads)})")
    if bottleneck % heads:
        raise PtmlabError(f"student '{spec}': bottleneck {bottleneck} is not divisible by the teacher's {heads} heads: "
                          f"pick a multiple of {heads}")
    tc = teacher.config
    return MobileBertConfig(
        vocab_size=dims["vocab"], hidden_size=t_hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intra_bottleneck_size=bottleneck, embedding_size=bottleneck, intermediate_size=4 * bottleneck,
        num_feedforward_networks=FEEDFORWARD_NETWORKS, use_bottleneck=True, key_query_shared_bottleneck=True,
        trigram_input=True, max_position_embeddings=getattr(tc, "max_position_embeddings", 512),
        type_vocab_size=getattr(tc, "type_vocab_size", 2), pad_token_id=getattr(tc, "pad_token_id", 0) or 0,
        num_labels=tc.num_labels, id2label=dict(tc.id2label), label2id=dict(tc.label2id),
        problem_type=getattr(tc, "problem_type", None))


def build_mobile(teacher: nn.Module, rest: str, spec: str) -> nn.Module:
    """The ``mobile:`` student for ``teacher``: a MobileBERT classifier, smaller than the teacher."""
    from transformers import MobileBertForSequenceClassification

    layers, bottleneck = parse_mobile(rest, spec)
    config = mobile_config(teacher, layers, bottleneck, spec)
    student = MobileBertForSequenceClassification(config)
    n_s, n_t = (sum(p.numel() for p in m.parameters()) for m in (student, teacher))
    if n_s >= n_t:
        raise PtmlabError(f"student '{spec}' has {n_s:,} parameters, not fewer than the teacher's {n_t:,}: use fewer "
                          f"layers or a narrower bottleneck")
    _copy_embeddings(student, teacher)
    return student


def _copy_embeddings(student: nn.Module, teacher: nn.Module) -> None:
    """Position and segment embeddings have the teacher's width in MobileBERT: start from the teacher's."""
    s_emb = structure_of(student).embedding_module(student)
    t_emb = structure_of(teacher).embedding_module(teacher)
    for name in ("position_embeddings", "token_type_embeddings"):
        s, t = getattr(s_emb, name, None), getattr(t_emb, name, None)
        if s is not None and t is not None and s.weight.shape == t.weight.shape:
            s.weight.data.copy_(t.weight.data)
