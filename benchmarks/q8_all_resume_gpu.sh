#!/usr/bin/env bash
# Finish the quantized seed profile's full run (benchmarks/q8_all_gpu.sh) from the
# store of a run cut off by the device's time limit: its 356 measured pairs are
# reused (same code, card and policy), the rest measured. Results under $OUT.
set -u
OUT=${OUT:-/tmp/q8all}
mkdir -p "$OUT"
export PYTHONPATH=src
cp benchmarks/h100-2026-11-26-q8all/q8all.sqlite "$OUT/q8all.sqlite"
python3 -m matprobe run tests/data/003_87cc75e6f86bb0a1.txt --dtype q8_0 \
  --device cuda --db "$OUT/q8all.sqlite" --out "$OUT/q8all" > /dev/null 2> "$OUT/q8all.err"
echo "run rc=$?"
tail -3 "$OUT/q8all.err"
grep -A 30 "^Summary" "$OUT/q8all/report.txt" | head -45
