"""Run a sequence classifier's last feed-forward block on the one position its head reads.

The classification heads of BERT, RoBERTa, ELECTRA, MPNet and DistilBERT read the first position of the last layer
([CLS] / <s>) and nothing else. The last layer's attention still needs every position as keys and values, but
everything after its attention block (the feed-forward block: about two thirds of the layer's multiply-adds) works
token by token, so only the first position's is needed. A forward hook on the last layer's post-attention LayerNorm
(``Structure.attn_layernorm``, the input of that block) keeps position 0 alone; the logits, the loss and every
gradient are the same as the full model's (``tests/test_first_token.py`` checks each family to 1e-5). For a
6-layer encoder that is about 11% of the multiply-adds of a training step at short lengths (less at long ones,
where attention's share grows); `benchmarks/first_token.py` measures it per step.

``first_token_only(model)`` installs the hook and returns its handle, or None where it does not apply: another
family (MobileBERT's bottleneck layers reuse the layer input after the feed-forward block), a model that is not a
stock ``*ForSequenceClassification``, a mean-pooled one (``models.mean_pooling``: its head reads every position),
or a last layer whose modules other layers share (cross-layer sharing). While it is installed the model's last
hidden state has one position, so a caller that reads hidden states (distillation objectives, analysis) must not
install it; ``fine_tune`` installs it only for its own task loss or a loss that declares ``logits_only`` and
removes it when training ends.
"""

from __future__ import annotations

from torch import nn
from torch.utils.hooks import RemovableHandle

FAMILIES = ("bert", "roberta", "electra", "mpnet", "distilbert")


def _keep_first(module: nn.Module, inputs, output):
    return output[:, :1]


def first_token_only(model: nn.Module) -> RemovableHandle | None:
    """Hook the last layer so its feed-forward block runs on position 0 only; None where that is not exact."""
    from ptmlab.core.errors import PtmlabError
    from ptmlab.models.mean_pooling import is_mean_pooled
    from ptmlab.models.structure import structure_of

    if not type(model).__name__.endswith("ForSequenceClassification") or is_mean_pooled(model):
        return None  # a mean-pooled head reads every position
    try:
        st = structure_of(model)
    except PtmlabError:
        return None
    if st.family not in FAMILIES:
        return None
    try:
        layers = st.layer_list(model)
        last = layers[len(layers) - 1]
        norm = last.get_submodule(st.attn_layernorm)
    except (AttributeError, IndexError):  # a layer rebuilt by a compression (ghost layers, ...): leave it whole
        return None
    others = {id(m) for layer in layers[:-1] for m in layer.modules()}
    if id(last) in others or id(norm) in others:
        return None
    return norm.register_forward_hook(_keep_first)
