"""Compute accounting for pre-training: training FLOPs per token, so runs can be compared at equal compute.

Kaplan et al. (2020): a forward pass costs about 2N + 2·n_layer·n_ctx·d_model FLOPs per token, where N counts the
non-embedding parameters (embedding lookups are not matrix products); a training step (forward + backward) costs
three times that: 6N + 6·n_layer·n_ctx·d_model. ELECTRA's generator is counted with the discriminator (both run
every step); encoder-decoders count both stacks over the block.
"""

from __future__ import annotations

from torch import nn


def nonembedding_params(module: nn.Module) -> int:
    """Parameters outside embedding tables (tied output projections count once, as the table they share; their
    vocabulary-sized bias belongs to the unembedding too, so a tiny model's count is not dominated by it)."""
    params = {id(p): p.numel() for p in module.parameters()}
    tables = set()
    for m in module.modules():
        if isinstance(m, nn.Embedding):
            params.pop(id(m.weight), None)
            tables.add(id(m.weight))
    for m in module.modules():
        if isinstance(m, nn.Linear) and id(m.weight) in tables and m.bias is not None:
            params.pop(id(m.bias), None)
    return sum(params.values())


def _layers_and_width(config) -> tuple[int, int]:
    layers = 0
    for enc, dec in (("num_layers", "num_decoder_layers"), ("encoder_layers", "decoder_layers")):
        if hasattr(config, enc) and hasattr(config, dec):
            layers = int(getattr(config, enc)) + int(getattr(config, dec))
            break
    if not layers:
        layers = int(getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", 0) or 0)
    width = int(getattr(config, "hidden_size", None) or getattr(config, "d_model", None)
                or getattr(config, "n_embd", 0) or 0)
    return layers, width


def flops_per_token(module: nn.Module, block_size: int) -> float:
    """Training FLOPs per token of ``module`` (a model, or an objective's wrapper holding several models)."""
    n = nonembedding_params(module)
    attention = 0
    seen = set()
    for m in module.modules():
        config = getattr(m, "config", None)
        if config is None or id(config) in seen or not hasattr(m, "base_model_prefix"):
            continue
        seen.add(id(config))
        layers, width = _layers_and_width(config)
        attention += layers * width
    return float(6 * n + 6 * attention * block_size)
