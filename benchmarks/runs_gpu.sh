#!/usr/bin/env bash
# The fp16 decode weights of Qwen2.5-0.5B (ctx 128) with a dispatch table, and the
# Q8_0 seed profile's weight matmuls, on one GPU; everything under $OUT.
set -u
OUT=${OUT:-/tmp/runs}
mkdir -p "$OUT"
export PYTHONPATH=src
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$OUT/gpu.txt"
python3 -m matprobe run --model qwen2.5-0.5b --context 128 --op matmul --op matmul_bias_add \
  --device cuda --db "$OUT/f16.sqlite" --dispatch "$OUT/tables" --out "$OUT/f16" > /dev/null 2> "$OUT/f16.err"
tail -3 "$OUT/f16.err"
python3 -m matprobe run tests/data/003_87cc75e6f86bb0a1.txt --dtype q8_0 --op matmul \
  --device cuda --db "$OUT/q8.sqlite" --out "$OUT/q8" > /dev/null 2> "$OUT/q8.err"
tail -3 "$OUT/q8.err"
grep -A 12 "^Summary" "$OUT/f16/report.txt"
grep -A 12 "^Summary" "$OUT/q8/report.txt"
# GPU tests of the new code (kernels through the shared blocks, Q8_0, dispatch, token)
pip install --no-deps --no-index -q .device_wheels/*.whl 2>/dev/null
PYTHONPATH=src:tests timeout 200 python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_token.py -x 2>&1 | tail -15
