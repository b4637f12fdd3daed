#!/usr/bin/env bash
# (1) the quantized seed profile's weight matmuls (Q8_0) against dequantize-then-cuBLAS;
# (2) a profile of the eager+table token read back by analyze / shapes. Under $OUT.
set -u
OUT=${OUT:-/tmp/q8p}
mkdir -p "$OUT"
export PYTHONPATH=src
source benchmarks/table_for_token.sh
python3 -m matprobe run tests/data/003_87cc75e6f86bb0a1.txt --dtype q8_0 --op matmul \
  --device cuda --db "$OUT/q8.sqlite" --out "$OUT/q8" > /dev/null 2> "$OUT/q8.err"
tail -3 "$OUT/q8.err"
grep -A 8 "^Summary" "$OUT/q8/report.txt"
python3 -m matprobe token --model qwen2.5-0.5b --context 128 --table "$TABLE" --db "$DB" --modes eager,eager+table \
  --rounds 5 --profile "$OUT/profile.jsonl" --profile-mode eager+table > /dev/null 2> "$OUT/token.err"
tail -2 "$OUT/token.err"
python3 -m matprobe shapes "$OUT/profile.jsonl" | tee "$OUT/profile-shapes.txt"
gzip -f "$OUT/profile.jsonl"
cd "$OUT" && tar czf q8.tgz q8 && rm -rf q8
