#!/usr/bin/env bash
# The fused decode token (triton.gemv_decode: RMSNorm prologue, SwiGLU and residual
# epilogues) beside the cuBLAS tokens, fp16 and Q8_0 (with its fp16 peer), at
# context $1; the kernel's own tests first, compiled on this GPU. Results under $OUT.
set -u
CTX=${1:-128}
OUT=${OUT:-/tmp/token-fused}
mkdir -p "$OUT"
export PYTHONPATH=src
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$OUT/gpu.txt"
if ls .device_wheels/*.whl >/dev/null 2>&1; then
  pip install --no-deps --no-index -q .device_wheels/*.whl 2>&1 | tail -2
fi
python3 -m pytest -q -p no:cacheprovider tests/test_decode_kernel.py 2>&1 | tail -3
for dtype in ${DTYPES:-f16 q8_0}; do
  python3 -m matprobe token --model qwen2.5-0.5b --context "$CTX" --dtype "$dtype" --fused \
    --rounds "${ROUNDS:-30}" --json "$OUT/token-$dtype-$CTX.json" \
    > "$OUT/token-$dtype-$CTX.txt" 2> "$OUT/token-$dtype-$CTX.err"
  echo "$dtype rc=$?"
  cat "$OUT/token-$dtype-$CTX.txt"
  grep -v "USDT\|^\s*$" "$OUT/token-$dtype-$CTX.err" | tail -8
done
