"""Long inputs: sliding-window + global attention with linear cost, long-model conversion, long strategies.

``window`` registers the ``ptmlab_window`` attention implementation with transformers; ``convert`` extends a
model's position embeddings and switches its attention (the ``longify`` modification, replayed on load);
``strategies`` holds truncate / chunk-and-pool / window for fine-tuning and evaluation on long documents.
"""

from ptmlab.longseq import window as _window  # noqa: F401  (registers the attention implementation)
