"""Compression: importance scores, structured pruning with real weight removal, quantization, vocabulary pruning,
low rank, and the ``compress`` pipeline that chains them into one table."""
