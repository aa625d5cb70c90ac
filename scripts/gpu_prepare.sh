#!/usr/bin/env bash
# Build .gpu/ (git-ignored), everything scripts/gpu_checks.sh reads on a GPU machine that has neither network access
# nor the shared data folder; it is kept small (under 64 MiB) so that it copies along with the checkout:
#   .gpu/minilm16/      minilm in fp16 (about 45 MB; the fp32 file is 87 MB), config and tokenizer; gpu_checks.sh
#                       turns it back into fp32 there before anything trains
#   .gpu/glue/SST-2/    train.tsv and dev.tsv (fine-tuning benchmark)
#   .gpu/data/wikitext-2, .gpu/tok   raw text and the minilm tokenizer (pre-training benchmark)
# Usage: bash scripts/gpu_prepare.sh [SHARED_DATA_DIR]   (default ../shared/data)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${1:-../shared/data}"
PY="${PYTHON:-.venv/bin/python}"
[ -f "$DATA/glue/SST-2/train.tsv" ] || { echo "error: $DATA/glue/SST-2/train.tsv not found: pass the shared data directory" >&2; exit 2; }
rm -rf .gpu && mkdir -p .gpu/glue/SST-2 .gpu/data
cp "$DATA/glue/SST-2/train.tsv" "$DATA/glue/SST-2/dev.tsv" .gpu/glue/SST-2/
[ -d "$DATA/text/wikitext-2" ] && cp -r "$DATA/text/wikitext-2" .gpu/data/
HF_HUB_OFFLINE=1 "$PY" - <<'PYEOF'
import shutil
from pathlib import Path

from safetensors.torch import load_file, save_file

from ptmlab.models.zoo import resolve

src, dst = Path(resolve("minilm")[0]), Path(".gpu/minilm16")
dst.mkdir(parents=True)
weights = load_file(str(src / "model.safetensors"))
save_file({k: v.half().contiguous() for k, v in weights.items()}, str(dst / "model.safetensors"),
          metadata={"format": "pt"})
for f in src.iterdir():
    if f.is_file() and f.suffix in (".json", ".txt"):
        shutil.copy(f, dst / f.name)
shutil.copytree(dst, ".gpu/tok", ignore=shutil.ignore_patterns("*.safetensors"))
PYEOF
du -sh .gpu
