"""Scaling sweeps: many small pre-training runs over model sizes and FLOP budgets, and what they say.

``config`` holds the sweep's options; ``plan`` turns sizes x budgets x seeds into ordinary ``run_pretrain`` runs,
costing every size with the engine's own FLOP accounting before anything is written (a budget below one step of a
size is a reported skip); ``sweep`` runs them in one sweep directory, one lock file per run, so a restart skips
finished runs, resumes killed ones, and several workers (``--workers N`` or separate processes) share the sweep;
``fit`` fits power laws with their uncertainty; ``analysis`` reads the runs back and applies the verdict rules
(Q8: does the loss-optimal size grow with the budget; Q19: do larger models reach a loss in fewer tokens and less
wall-clock time); ``plots`` draws the compute frontier, loss vs tokens per size and the iso-FLOP profiles.
"""
