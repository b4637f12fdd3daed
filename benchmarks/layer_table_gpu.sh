#!/usr/bin/env bash
# Issue 23, the way back for the layer token, in one call: `matprobe run --model
# MODEL --layer` over triton.gemv_decode's grid and the cuBLAS baseline (a store
# and a dispatch table per dtype), then `matprobe token` with layer+pdl on the
# token's own tiles, with the table's (--table, its verdicts checked in the
# store), and on its own tiles again (drift). MODEL, DTYPES, ROUNDS.
set -u
OUT=${OUT:-/tmp/layer-table}
MODEL=${MODEL:-qwen2.5-0.5b}
ROUNDS=${ROUNDS:-20}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt"
for dtype in ${DTYPES:-f16}; do
  db=$OUT/$dtype.sqlite
  PYTHONPATH=src timeout 300 python3 -m matprobe run --model "$MODEL" --layer --dtype "$dtype" \
    --gpus 0 --variants 'triton.gemv_decode' 'torch.matmul' --db "$db" \
    --out "/tmp/layer-run-$dtype" --dispatch "$OUT/tables-$dtype" > /dev/null 2> "/tmp/layer-run-$dtype.err"
  tail -2 "/tmp/layer-run-$dtype.err"
  table=$(ls "$OUT/tables-$dtype"/*-"$dtype".json | head -1)  # not the attention specs' f16 one
  for how in own table own-again; do
    extra=()
    [ "$how" = table ] && extra=(--table "$table" --db "$db")
    PYTHONPATH=src timeout 200 python3 -m matprobe token --model "$MODEL" --dtype "$dtype" \
      --modes eager,layer+pdl --rounds "$ROUNDS" "${extra[@]}" > "$OUT/token-$dtype-$how.txt" 2>&1
    echo "== $dtype $how"; grep -E "tiles|^layer\+pdl|^eager " "$OUT/token-$dtype-$how.txt"
  done
  rm -f "$db" "$db-wal" "$db-shm"
done
exit 0
