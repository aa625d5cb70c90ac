"""Models to pre-train: transformers' own classes built from scratch by architecture and size, or an existing
encoder continued with its pre-training head.

Which objective fits which architecture is one table (``ARCHS``: the pre-training heads each architecture has
in transformers); a wrong pair is a one-line error naming the architectures that fit. Vocabulary size and
special ids come from the tokenizer (T5 sentinels: see ``ptmlab.pretrain.objectives.t5``). Everything saved by
``save_pretrained`` loads again with ``AutoModelForSequenceClassification`` (a fresh task head on the
pre-trained body), so a pre-training run directory works wherever a model is accepted.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.pretrain.objectives import ARCH_KINDS, OBJECTIVES, Objective, build_objective


@dataclass(frozen=True)
class Arch:
    kind: str  # encoder | decoder | seq2seq | permutation
    heads: dict  # pre-training head -> transformers class
    scratch: bool = True  # can be built with --arch (mpnet is continued only)


ARCHS: dict[str, Arch] = {
    "bert": Arch("encoder", {"mlm": "BertForMaskedLM", "pretraining": "BertForPreTraining"}),
    "roberta": Arch("encoder", {"mlm": "RobertaForMaskedLM"}),
    "electra": Arch("encoder", {"mlm": "ElectraForMaskedLM", "rtd": "ElectraForPreTraining"}),
    "mpnet": Arch("encoder", {"mlm": "MPNetForMaskedLM"}, scratch=False),
    "gpt2": Arch("decoder", {"clm": "GPT2LMHeadModel"}),
    "t5": Arch("seq2seq", {"seq2seq": "T5ForConditionalGeneration"}),
    "bart": Arch("seq2seq", {"seq2seq": "BartForConditionalGeneration"}),
    "xlnet": Arch("permutation", {"plm": "XLNetLMHeadModel"}),
}

SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(layers=2, hidden=128, heads=2, ffn=512),
    "mini": dict(layers=4, hidden=256, heads=4, ffn=1024),
    "small": dict(layers=4, hidden=512, heads=8, ffn=2048),
    "base": dict(layers=12, hidden=768, heads=12, ffn=3072),
}


def scratch_archs() -> list[str]:
    return [a for a, spec in ARCHS.items() if spec.scratch]


def archs_for(objective: Objective) -> list[str]:
    """The --arch values an objective can train."""
    return [a for a in scratch_archs() if objective.head in ARCHS[a].heads]


def _as_objective(objective: Objective | str, tokenizer) -> Objective:
    if isinstance(objective, Objective):
        return objective
    OBJECTIVES.get(objective)  # a clean error for an unknown name
    return build_objective(objective, tokenizer)


def check_pair(arch_or_config, objective: Objective) -> str:
    """The architecture name, or PtmlabError when ``objective`` cannot train it."""
    arch = arch_or_config if isinstance(arch_or_config, str) else getattr(arch_or_config, "model_type", "?")
    ok = archs_for(objective)
    use = " or ".join(ok) if len(ok) < 3 else f"{', '.join(ok[:-1])} or {ok[-1]}"
    if arch not in ARCHS:
        raise PtmlabError(f"cannot pre-train a '{arch}' model: objective {objective.name} trains --arch {use}")
    if objective.head not in ARCHS[arch].heads:
        if ARCHS[arch].kind != objective.arch_kind:
            raise PtmlabError(f"objective {objective.name} needs {ARCH_KINDS[objective.arch_kind]}, and {arch} "
                              f"is {ARCH_KINDS[ARCHS[arch].kind]}: use --arch {use}")
        raise PtmlabError(f"objective {objective.name} has no {arch} model in transformers: use --arch {use}")
    return arch


def max_block_size(config) -> int | None:
    """The longest input a model's position embeddings allow (None: relative positions, no limit)."""
    t = getattr(config, "model_type", "")
    if t in ("t5", "xlnet"):
        return None
    if t == "gpt2":
        return config.n_positions
    if t == "roberta":  # positions are numbered from pad + 1
        return config.max_position_embeddings - config.pad_token_id - 1
    return getattr(config, "max_position_embeddings", None)


def _attn(cls) -> str:
    return "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager"


def _config(arch: str, layers: int, hidden: int, heads: int, ffn: int, max_positions: int, obj: Objective):
    import transformers as tf

    tok = obj.tok
    vocab = obj.vocab_size()
    pad = tok.pad_id
    start = tok.start_id if tok.start_id is not None else pad
    end = tok.doc_sep_id
    if arch == "bert":
        return tf.BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                             num_attention_heads=heads, intermediate_size=ffn,
                             max_position_embeddings=max_positions, pad_token_id=pad)
    if arch == "roberta":  # RoBERTa numbers positions from pad + 1
        return tf.RobertaConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                num_attention_heads=heads, intermediate_size=ffn, type_vocab_size=1,
                                max_position_embeddings=max_positions + pad + 1, pad_token_id=pad,
                                bos_token_id=start, eos_token_id=end)
    if arch == "electra":
        return tf.ElectraConfig(vocab_size=vocab, embedding_size=hidden, hidden_size=hidden,
                                num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=ffn,
                                max_position_embeddings=max_positions, pad_token_id=pad)
    if arch == "gpt2":
        return tf.GPT2Config(vocab_size=vocab, n_positions=max_positions, n_embd=hidden, n_layer=layers,
                             n_head=heads, n_inner=ffn, bos_token_id=end, eos_token_id=end, pad_token_id=pad)
    if arch == "t5":  # relative positions: no position limit
        return tf.T5Config(vocab_size=vocab, d_model=hidden, d_kv=hidden // heads, d_ff=ffn, num_layers=layers,
                           num_decoder_layers=layers, num_heads=heads, pad_token_id=pad, eos_token_id=end,
                           decoder_start_token_id=pad)
    if arch == "bart":
        return tf.BartConfig(vocab_size=vocab, d_model=hidden, encoder_layers=layers, decoder_layers=layers,
                             encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ffn,
                             decoder_ffn_dim=ffn, max_position_embeddings=max_positions, pad_token_id=pad,
                             bos_token_id=start, eos_token_id=end, decoder_start_token_id=end,
                             forced_eos_token_id=None)
    if arch == "xlnet":
        return tf.XLNetConfig(vocab_size=vocab, d_model=hidden, n_layer=layers, n_head=heads, d_inner=ffn,
                              pad_token_id=pad, bos_token_id=start, eos_token_id=end)
    raise PtmlabError(f"unknown architecture '{arch}': choose from {', '.join(scratch_archs())}")


def build_scratch(arch: str, *, layers: int, hidden: int, heads: int, ffn: int, tokenizer, max_positions: int,
                  objective: Objective | str) -> nn.Module:
    """A randomly initialised transformers model of ``arch`` with the head ``objective`` trains (seed first).

    Seq2seq architectures get ``layers`` encoder and ``layers`` decoder layers."""
    import transformers as tf

    if arch not in ARCHS or not ARCHS[arch].scratch:
        raise PtmlabError(f"unknown architecture '{arch}': choose from {', '.join(scratch_archs())}")
    for name, v in (("--layers", layers), ("--hidden", hidden), ("--heads", heads), ("--ffn", ffn),
                    ("--max-positions", max_positions)):
        if not isinstance(v, int) or v < 1:
            raise PtmlabError(f"{name} must be a positive integer, got {v}")
    if hidden % heads:
        raise PtmlabError(f"--hidden {hidden} is not a multiple of --heads {heads}: pick sizes that divide")
    obj = _as_objective(objective, tokenizer)
    check_pair(arch, obj)
    config = _config(arch, layers, hidden, heads, ffn, max_positions, obj)
    cls = getattr(tf, ARCHS[arch].heads[obj.head])
    return cls._from_config(config, attn_implementation=_attn(cls))


def size(name: str) -> dict[str, int]:
    """layers / hidden / heads / ffn of a named size."""
    if name not in SIZES:
        from ptmlab.core.errors import did_you_mean

        raise PtmlabError(f"unknown model size '{name}': {did_you_mean(name, SIZES)}")
    return dict(SIZES[name])


@contextlib.contextmanager
def _quiet_transformers():
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def load_continued(model_name_or_dir: str, objective: Objective | str, tokenizer=None) -> nn.Module:
    """An existing encoder (zoo name, run or model directory) with the pre-training head ``objective`` needs.

    A checkpoint without that head (the packaged sentence encoders, a fine-tuned run) gets a fresh one; a masked
    LM head's decoder is tied to the input embeddings and its bias starts at zero (transformers' own init)."""
    import transformers as tf
    from transformers import AutoConfig

    from ptmlab.models.zoo import load_tokenizer, resolve

    path, entry = resolve(model_name_or_dir)
    obj = _as_objective(objective, tokenizer if tokenizer is not None else load_tokenizer(model_name_or_dir))
    overrides = dict(entry.random_config) if entry is not None and entry.random_config else {}
    try:
        config = AutoConfig.from_pretrained(path, **overrides)
    except Exception as e:
        raise PtmlabError(f"cannot read the model config of '{model_name_or_dir}': {e}") from None
    if getattr(config, "ptmlab_modifications", None):
        raise PtmlabError(f"'{model_name_or_dir}' is a modified model ({config.ptmlab_modifications[0]['kind']}): "
                          f"continue pre-training from the unmodified model it came from")
    arch = check_pair(config, obj)
    vocab = getattr(config, "vocab_size", 0)
    if vocab < obj.vocab_size():
        raise PtmlabError(f"'{model_name_or_dir}' has a vocabulary of {vocab} but objective {obj.name} with this "
                          f"tokenizer needs {obj.vocab_size()}: use the model's own tokenizer")
    cls = getattr(tf, ARCHS[arch].heads[obj.head])
    config.architectures = [cls.__name__]
    with _quiet_transformers():
        if overrides:  # a random debug model (zoo `tiny`)
            return cls._from_config(config, attn_implementation=_attn(cls))
        from ptmlab.models.loader import refuse_pickle, weights_kwargs

        refuse_pickle(path)
        try:
            return cls.from_pretrained(path, config=config, attn_implementation=_attn(cls), **weights_kwargs(path))
        except Exception as e:
            raise PtmlabError(f"cannot load '{model_name_or_dir}' as {cls.__name__} ({type(e).__name__}: {e})") \
                from None
