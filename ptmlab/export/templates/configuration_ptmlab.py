"""Configuration of a model exported by ptmlab whose architecture the stock transformers classes cannot express.

This file is copied into the exported directory beside modeling_ptmlab.py, whose model class names it as its
``config_class``; config.json maps ``AutoConfig`` to it and names its ``model_type`` (``ptmlab-`` and the family, set
at export), one transformers does not register, so the directory loads only with ``trust_remote_code=True`` and
never as the family's stock model. The configuration is the stock configuration of the model's family (the line
naming ``BASE_CONFIG`` is set at export) plus three fields:
``ptmlab_modifications`` (the architectural changes, replayed in order by modeling_ptmlab.py),
``ptmlab_structure`` (where layers, projections and the encoder live in this family) and ``ptmlab_base_model_type``.
"""

import transformers

BASE_CONFIG = "BertConfig"
BASE_MODEL = "BertForSequenceClassification"


class PtmlabConfig(getattr(transformers, BASE_CONFIG)):
    model_type = "ptmlab-bert"

    def __init__(self, ptmlab_modifications=None, ptmlab_structure=None, **kwargs):
        super().__init__(**kwargs)
        self.ptmlab_modifications = list(ptmlab_modifications or [])
        self.ptmlab_structure = dict(ptmlab_structure or {})
