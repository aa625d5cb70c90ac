"""``ptmlab optimize``: from a fine-tuned run, the fastest (or smallest) model whose dev score stays within a loss
budget of the run's own, on this machine: structures (students, shrunk models, pruned models recovered by
distillation, vocabulary pruning) crossed with inference runtimes (PyTorch fp32/bf16, onnxruntime plain, fused,
dynamic and static int8), searched with Optuna, timed side by side and checked on a held-out part (docs/optimize.md)."""
