#!/usr/bin/env bash
# The GPU benchmarks, as one script for a machine with one GPU, in this order:
#   1. the fine-tuning loop vs transformers' Trainer and a bare loop on SST-2, bf16 (benchmarks/gpu_finetune.py;
#      targets: >= 2x the Trainer at batch 32, >= 30% of the bf16 peak at the largest batch)
#   2. long-input attention on CUDA: first ptmlab's two window kernels against each other (outputs and gradients,
#      with padding), then the cost of its window attention (its CUDA kernel, FlexAttention, and its blockwise
#      kernel) against sdpa and a plain FlexAttention baseline (benchmarks/long_attention.py)
#   3. only with PRETRAIN=1 (already measured, BENCHMARKS.md): ptmlab's MLM pre-training engine on CUDA, tokens/s and
#      share of the bf16 peak (benchmarks/gpu_pretrain.py)
#   4. only with STUDY_STEPS=1: the step time the studies' `--budget gpu` estimates rest on (docs/studies.md): the
#      same benchmark on the 4 x 256 masked LM they pre-train, 32 blocks of 128 tokens a step (about 20 s)
# Everything they read is in .gpu/ (`bash scripts/gpu_prepare.sh` builds it from the shared data folder; copy .gpu/
# with the checkout to a GPU machine without network access or the shared data). Example, from the project root:
#   OUT=runs/gpu-checks/out bash scripts/gpu_checks.sh
# Results go to $OUT (or ./gpu-out), named BENCHMARK.MACHINE.json like benchmarks/results/; the token cache
# (PTMLAB_CACHE, default runs/gpu-checks/cache) and the fp32 copy of minilm (runs/gpu-checks/minilm32) go under runs/.
# DEVICE=cpu runs the same steps on a CPU at a toy size (the test suite's check that the script still runs end to
# end): MODEL (default there: tiny) and GLUE_DIR (default: .gpu/glue) name what it reads, nothing is timed for real.
set -uo pipefail
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PTMLAB_PROGRESS=0 PTMLAB_CACHE="${PTMLAB_CACHE:-$PWD/runs/gpu-checks/cache}"
PY="${PYTHON:-python3}"
DEVICE="${DEVICE:-cuda}"
GLUE_DIR="${GLUE_DIR:-.gpu/glue}"
if [ "$DEVICE" = cpu ]; then
  MODEL="${MODEL:-tiny}"
  FINETUNE_ARGS=(--max-train 64 --no-compile --mfu-batch 64)
  LONG_ARGS=(--device cpu --dtypes fp32 --reps 1 --impls sdpa,window --lengths 64,128 --window 32)
  echo "cpu: no GPU, toy sizes" | tee "$OUT/gpu.txt"
else
  FINETUNE_ARGS=()
  LONG_ARGS=(--device cuda --dtypes bf16 --reps 2 --impls sdpa,window --lengths 1024,4096,16384)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
fi
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
  | tee -a "$OUT/gpu.txt"
TAG=$($PY -c "import sys; sys.path.insert(0, 'benchmarks'); import _env; print(_env.machine_tag('$DEVICE'))")
# .gpu/ holds minilm in fp16 (half the size to copy); it trains from an fp32 copy
[ -n "${MODEL:-}" ] || { MODEL=runs/gpu-checks/minilm32; $PY - <<'PYEOF'
import shutil
from pathlib import Path

from safetensors.torch import load_file, save_file

src, dst = Path(".gpu/minilm16"), Path("runs/gpu-checks/minilm32")
shutil.copytree(src, dst, dirs_exist_ok=True)
save_file({k: v.float() for k, v in load_file(str(src / "model.safetensors")).items()},
          str(dst / "model.safetensors"), metadata={"format": "pt"})
PYEOF
}
timeout "${FINETUNE_TIMEOUT:-330}" $PY benchmarks/gpu_finetune.py --model "$MODEL" --glue-dir "$GLUE_DIR" \
  --repeats 1 --peak-tflops "${PEAK_TFLOPS:-989}" ${FINETUNE_ARGS[@]+"${FINETUNE_ARGS[@]}"} --output "$OUT/gpu_finetune.$TAG.json" 2>&1 | tail -25
# compiles FlexAttention once per length for the baseline and once or twice for ptmlab's kernel; the JSON is
# rewritten after every length, so a cut-short run keeps what it measured
timeout "${LONG_TIMEOUT:-170}" $PY benchmarks/long_attention.py "${LONG_ARGS[@]}" \
  --out "$OUT/long_attention.$TAG.json" 2>&1 | tail -16
[ "${PRETRAIN:-0}" = 1 ] && timeout "${PRETRAIN_TIMEOUT:-100}" $PY benchmarks/gpu_pretrain.py --files .gpu/data/wikitext-2 --tokenizer .gpu/tok \
  --size base --block-size 128 --batch-size 256 --max-steps "${STEPS:-60}" --json "$OUT/gpu_pretrain.$TAG.json" 2>&1 | tail -22
[ "${STUDY_STEPS:-0}" = 1 ] && timeout 90 $PY benchmarks/gpu_pretrain.py --files .gpu/data/wikitext-2 --tokenizer .gpu/tok \
  --size mini --block-size 128 --batch-size 32 --max-steps 300 --json "$OUT/gpu_pretrain_mini.$TAG.json" 2>&1 | tail -8
ls "$OUT"
