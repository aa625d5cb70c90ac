#!/usr/bin/env bash
# The GPU checks of the pre-training and long-input issues, as one script for a lent GPU machine (the device tool):
#   1. ptmlab's MLM pre-training engine on CUDA: tokens/s and share of the bf16 peak (benchmarks/gpu_pretrain.py)
#   2. long-input attention cost on CUDA incl. FlexAttention (benchmarks/long_attention.py), time permitting
# Data and the minilm tokenizer travel in .gpu/ (copied there beforehand; the shared data does not travel).
# Results go to $OUT (or ./gpu-out).
set -uo pipefail
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PTMLAB_PROGRESS=0 PTMLAB_CACHE=/tmp/ptmlab-cache
PY="${PYTHON:-python3}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
  | tee -a "$OUT/gpu.txt"
timeout "${PRETRAIN_TIMEOUT:-100}" $PY benchmarks/gpu_pretrain.py --files .gpu/data/wikitext-2 --tokenizer .gpu/tok \
  --size base --block-size 128 --batch-size 256 --max-steps "${STEPS:-60}" --json "$OUT/gpu_pretrain.json" 2>&1 | tail -22
timeout "${LONG_TIMEOUT:-50}" $PY benchmarks/long_attention.py --device cuda --dtypes bf16 --reps 2 \
  --impls sdpa,window --lengths 1024,4096,16384 --out "$OUT/long_attention_cuda.json" 2>&1 | tail -12
ls "$OUT"
