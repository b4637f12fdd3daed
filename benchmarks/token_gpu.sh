#!/usr/bin/env bash
# One decode token of Qwen2.5-0.5B in every mode (eager cuBLAS, eager with the
# dispatch table, torch.compile default and max-autotune, compile with the table's
# custom ops, and each one's matmul-less twin), at context $1; results under $OUT.
set -u
CTX=${1:-128}
OUT=${OUT:-/tmp/token}
mkdir -p "$OUT"
export PYTHONPATH=src
source benchmarks/table_for_token.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
python3 -m matprobe token --model qwen2.5-0.5b --context "$CTX" --table "$TABLE" --db "$DB" --rounds 30 \
  --json "$OUT/token$CTX.json" ${PROFILE:+--profile "$OUT/token$CTX.jsonl" --profile-mode eager+table} \
  > "$OUT/token$CTX.txt" 2> "$OUT/token$CTX.err"
echo "rc=$?"
cat "$OUT/token$CTX.txt"
grep -v "USDT\|^\s*$" "$OUT/token$CTX.err" | tail -15
