"""Tokenizers: train BPE / WordPiece / Unigram side by side, measure fertility and continued words, swap a
model's tokenizer.

Modules: ``corpora`` (text sources), ``train`` (training and saving), ``load`` (any tokenizer by name or
path), ``metrics`` (counts on one text), ``compare`` (many tokenizers on many texts), ``plots``, ``swap``.
"""
