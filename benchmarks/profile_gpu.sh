#!/usr/bin/env bash
# The eager+table token's profile read back by shapes, and the token's GPU tests. Under $OUT.
set -u
OUT=${OUT:-/tmp/prof}
mkdir -p "$OUT"
source benchmarks/table_for_token.sh
PYTHONPATH=src python3 -m matprobe token --model qwen2.5-0.5b --context 128 --table "$TABLE" --db "$DB" \
  --modes eager,eager+table --rounds 5 --profile "$OUT/profile.jsonl" --profile-mode eager+table > /dev/null 2> "$OUT/token.err"
tail -1 "$OUT/token.err"
PYTHONPATH=src python3 -m matprobe shapes "$OUT/profile.jsonl" | tee "$OUT/profile-shapes.txt"
gzip -f "$OUT/profile.jsonl"
pip install --no-deps --no-index -q .device_wheels/*.whl 2>/dev/null
PYTHONPATH=src:tests timeout 300 python3 -m pytest -q -m gpu tests/test_token.py tests/test_gpu.py 2>&1 | tail -3
