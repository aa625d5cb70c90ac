"""Pre-training: self-supervised objectives on memory-mapped token blocks, from scratch or continued.

``corpus`` turns text files into one cached token file and packs it into fixed-length blocks; ``objectives/``
holds one module per objective (collator + head + loss, registered in ``OBJECTIVES``); ``models`` builds
transformers' own architectures from scratch or loads an encoder with its pre-training head; ``data`` is the
adapter the training loop calls for every micro-batch. The run itself goes through the one training loop.
"""
