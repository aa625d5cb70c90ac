"""The one training loop, optimizers and schedules, fine-tuning strategies, checkpoints and evaluation."""
