"""Set-up shared by every benchmark script: offline defaults (before anything imports transformers), quiet progress
bars, and the repository root on sys.path (for a Python without ptmlab installed)."""

import os
import sys
from pathlib import Path

for _key, _value in (("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"),
                     ("PTMLAB_PROGRESS", "0")):
    os.environ.setdefault(_key, _value)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
