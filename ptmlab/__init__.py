"""ptmlab: a workbench for transfer learning with pre-trained language models."""

__version__ = "0.1.0"
