#!/usr/bin/env bash
# gemlite's A16W8 group-32 GEMV (the gemlite.a16w8 peer) beside our Q8_0 families on
# the quantized seed profile's weight matmuls, one GPU. Results under $OUT.
set -u
OUT=${OUT:-/tmp/gemlite}
mkdir -p "$OUT"
export PYTHONPATH=src
python3 -m pip install --no-deps --no-index -q .device_wheels/gemlite*.whl .device_wheels/tqdm*.whl 2>&1 | grep -v WARNING | tail -2
python3 -c "import gemlite, triton; print('gemlite', gemlite.__version__, 'triton', triton.__version__)" 2>&1 | tail -1
CUDA_VISIBLE_DEVICES=0 python3 -m matprobe run tests/data/003_87cc75e6f86bb0a1.txt --dtype q8_0 --op matmul \
  --variants 'gemlite*' 'triton.gemv_q8_int8dot*' 'triton.gemv_decode*' --device cuda \
  --db "$OUT/gemlite.sqlite" --out "$OUT/gemlite" > /dev/null 2> "$OUT/gemlite.err"
echo "run rc=$?"; tail -2 "$OUT/gemlite.err"
grep -A 8 "^Summary" "$OUT/gemlite/report.txt" | cut -c1-250
grep -i "gemlite" "$OUT/gemlite/report.txt" | head -12 | cut -c1-250
