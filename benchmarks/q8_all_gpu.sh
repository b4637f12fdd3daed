#!/usr/bin/env bash
# Every matmul spec of the quantized seed profile (Q8_0 weights, fp16 attention) with
# every family that takes it, on one GPU; the decode kernel's tests compiled first.
# Results under $OUT.
set -u
OUT=${OUT:-/tmp/q8all}
mkdir -p "$OUT"
export PYTHONPATH=src
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
pip install --no-deps --no-index -q .device_wheels/*.whl 2>&1 | grep -v WARNING | tail -2
python3 -c "import torch, triton, gemlite; print(torch.__version__, triton.__version__, gemlite.__version__)" >> "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
python3 -m pytest -q -p no:cacheprovider tests/test_decode_kernel.py 2>&1 | tail -2
python3 -m matprobe run tests/data/003_87cc75e6f86bb0a1.txt --dtype q8_0 \
  --device cuda --db "$OUT/q8all.sqlite" --out "$OUT/q8all" > /dev/null 2> "$OUT/q8all.err"
echo "run rc=$?"
tail -3 "$OUT/q8all.err"
grep -A 30 "^Summary" "$OUT/q8all/report.txt" | head -45
