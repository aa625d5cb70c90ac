"""Tasks, loaders, tokenization caches and batching."""
