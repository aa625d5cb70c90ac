"""Long inputs: sliding-window + global attention with linear cost, long-model conversion, long strategies.

``window`` registers the ``ptmlab_window`` attention implementation with transformers when imported (``convert``,
``recurrence`` and ``cost`` import it; the package itself imports nothing, so ``ptmlab longify --help`` loads no
torch); ``convert`` extends a model's position embeddings and switches its attention (the ``longify`` modification,
replayed on load); ``strategies`` holds truncate / chunk-and-pool / window for fine-tuning and evaluation on long
documents.
"""
