"""Portable exports of ptmlab models: plain transformers directories (with self-contained modelling code where the
stock classes cannot express a modification), ONNX fp32 / onnxruntime int8, and reloadable torch dynamic int8.

``ptmlab.export.run.export_model`` is the entry point (``ptmlab export``); every format ends with a parity check of
the exported model against ptmlab's own PyTorch model on real dev text, written to ``parity.json``.
"""
