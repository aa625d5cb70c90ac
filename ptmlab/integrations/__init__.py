"""ptmlab inside other libraries' training scripts: ``ptmlab.integrations.trainer`` for transformers' ``Trainer``."""
