"""Knowledge distillation: a training run whose loss reads the teacher.

``losses/`` holds one module per loss (registered in ``LOSSES``), ``features`` reads hidden states, attention
maps and relations through forward hooks addressed by the structure map, ``maps`` and ``matches`` say which
student layer learns from which teacher layer, ``students`` builds students, ``teacher`` loads and checks the
teacher, ``cache`` stores teacher outputs on disk once, and ``pipeline`` runs it all through the one Trainer.
"""
