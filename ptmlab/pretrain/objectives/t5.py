"""T5 span corruption (Raffel et al. 2020, "Exploring the Limits of Transfer Learning", §3.1.4 and §3.3.4).

Of a block of n tokens, ``round(n * noise_density)`` are noise, in ``round(noise / mean_span)`` spans; the noise
count is split into that many non-empty spans uniformly at random, and so is the rest, and the two kinds
alternate starting with a non-noise span. The input keeps the non-noise tokens and puts one sentinel in place of
each noise span; the target is each sentinel followed by the tokens it replaced; both end with EOS. With the
paper's 15% and mean span 3 a 512-token input has a target of about 114 tokens.

Sentinels: the tokenizer's ``<extra_id_k>`` tokens when it has them (T5's own tokenizers); otherwise the model's
vocabulary is enlarged by ``n_sentinels`` ids above the tokenizer's and sentinel k is ``vocab_size - 1 - k``
(T5's own order: ``<extra_id_0>`` is the highest id).
"""

from __future__ import annotations

import numpy as np
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.pretrain.objectives.base import OBJECTIVES, Objective, PretrainModel, stack, token_ce

DEFAULT_SENTINELS = 100


def random_segmentation(rng: np.random.Generator, n_items: int, n_segments: int) -> np.ndarray:
    """Lengths of ``n_segments`` non-empty segments summing to ``n_items``, every such split equally likely."""
    cuts = np.sort(rng.choice(np.arange(1, n_items), size=n_segments - 1, replace=False))
    return np.diff(np.concatenate([[0], cuts, [n_items]]))


def span_counts(length: int, noise_density: float, mean_span: float) -> tuple[int, int]:
    """(noise tokens, noise spans) of a sequence of ``length`` tokens."""
    n_noise = min(max(int(round(length * noise_density)), 1), length - 1)
    n_spans = min(max(int(round(n_noise / mean_span)), 1), n_noise, length - n_noise)
    return n_noise, n_spans


def random_spans_noise_mask(rng: np.random.Generator, length: int, noise_density: float,
                            mean_span: float) -> np.ndarray:
    """Bool [length]: alternating non-noise / noise spans, starting with non-noise."""
    n_noise, n_spans = span_counts(length, noise_density, mean_span)
    noise = random_segmentation(rng, n_noise, n_spans)
    keep = random_segmentation(rng, length - n_noise, n_spans)
    lengths = np.stack([keep, noise], axis=1).reshape(-1)
    is_noise = np.tile([False, True], n_spans)
    return np.repeat(is_noise, lengths)


class SpanCorruption(Objective):
    name = "t5"
    arch_kind = "seq2seq"
    head = "seq2seq"
    default_arch = "t5"

    def __init__(self, tokenizer, noise_density: float = 0.15, mean_span: float = 3.0, masking: str = "dynamic",
                 n_sentinels: int = DEFAULT_SENTINELS):
        super().__init__(tokenizer, masking)
        if not 0 < noise_density < 1:
            raise PtmlabError(f"--noise-density must be in (0, 1), got {noise_density}")
        if mean_span < 1:
            raise PtmlabError(f"--mean-span must be at least 1, got {mean_span}")
        self.noise_density = noise_density
        self.mean_span = mean_span
        if self.tok.extra_ids:
            self.sentinels = np.asarray(self.tok.extra_ids, np.int64)
            self._vocab = self.tok.vocab_size
        else:
            self._vocab = self.tok.vocab_size + n_sentinels
            self.sentinels = self._vocab - 1 - np.arange(n_sentinels, dtype=np.int64)

    def vocab_size(self) -> int:
        return self._vocab

    @property
    def eos_id(self) -> int:
        return self.tok.doc_sep_id

    def lengths(self, length: int) -> tuple[int, int]:
        """(encoder input length, target length) for a block of ``length`` corpus tokens (EOS included)."""
        n_noise, n_spans = span_counts(length, self.noise_density, self.mean_span)
        return length - n_noise + n_spans + 1, n_noise + n_spans + 1

    def content_length(self, block_size: int) -> int:
        """The longest block whose corrupted input (with sentinels and EOS) fits ``block_size``."""
        n = block_size
        while self.lengths(n + 1)[0] <= block_size:
            n += 1
        while n > 2 and self.lengths(n)[0] > block_size:
            n -= 1
        return n

    def corrupt(self, block: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        noise = random_spans_noise_mask(rng, len(block), self.noise_density, self.mean_span)
        n_spans = int((noise[1:] & ~noise[:-1]).sum())
        if n_spans > len(self.sentinels):
            raise PtmlabError(f"a block needs {n_spans} sentinels but only {len(self.sentinels)} exist: use a "
                              f"smaller --block-size or a larger --mean-span")
        start = noise & ~np.concatenate([[False], noise[:-1]])  # first token of each noise span
        span_idx = np.cumsum(start) - 1
        sent = self.sentinels[np.clip(span_idx, 0, None)]
        inputs = np.concatenate([np.where(start, sent, block)[~noise | start], [self.eos_id]])
        # the target: sentinel k, then the tokens of noise span k, for every k; then EOS
        target = np.stack([np.where(start, sent, -1), block], axis=1).reshape(-1)
        keep = np.stack([start, noise], axis=1).reshape(-1)
        return inputs, np.concatenate([target[keep], [self.eos_id]])

    def make_batch(self, blocks, rngs, *, source=None, indices=None) -> dict[str, torch.Tensor]:
        pairs = [self.corrupt(b, r) for b, r in zip(blocks, rngs, strict=True)]
        return {"input_ids": stack([p[0] for p in pairs]), "labels": stack([p[1] for p in pairs])}

    def forward(self, pm: PretrainModel, batch: dict) -> torch.Tensor:
        return seq2seq_loss(pm.model, batch)


def decoder_inputs(model, labels: torch.Tensor) -> torch.Tensor:
    """Labels shifted right behind the decoder start token (-100 read as pad)."""
    cfg = model.config
    start = cfg.decoder_start_token_id if cfg.decoder_start_token_id is not None else cfg.pad_token_id
    dec = torch.empty_like(labels)
    dec[:, 0] = start
    dec[:, 1:] = labels[:, :-1]
    return dec.masked_fill(dec == -100, cfg.pad_token_id)


def seq2seq_loss(model, batch: dict) -> torch.Tensor:
    labels = batch["labels"]
    kw = {"attention_mask": batch["attention_mask"]} if "attention_mask" in batch else {}
    out = model(input_ids=batch["input_ids"], decoder_input_ids=decoder_inputs(model, labels), use_cache=False, **kw)
    return token_ce(out.logits, labels)


OBJECTIVES.add("t5", SpanCorruption, "T5 span corruption with sentinels (noise density 0.15, mean span 3)")
