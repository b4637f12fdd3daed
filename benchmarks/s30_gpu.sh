#!/usr/bin/env bash
# Thirtieth session, issue 23, one call, STEPS of: recapture (every mode captured
# again once all are built: benchmarks/mode_mix_recapture.py), token (`matprobe
# token` for each dtype=modes entry of TOKENS), peer (the independent step, PEER
# at CTX=127, max-autotune too) — all on one card.
set -u
OUT=${OUT:-/tmp/s30}
PEER=${PEER:-.exp/peer/decode_step_peer.py}
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} > "$OUT/card.txt"
cat "$OUT/card.txt"
for step in ${STEPS:-recapture token peer}; do
  start=$SECONDS
  case $step in
    recapture)
      PYTHONPATH=src timeout "${RECAPTURE_S:-200}" python3 benchmarks/mode_mix_recapture.py \
        "${RECAPTURE_MODES:-eager,eager-none,compile-none,layer+pdl}" "$OUT/recapture.json" \
        > "$OUT/recapture.txt" 2>&1
      grep -E "^(built|again|reversed)" "$OUT/recapture.txt" ;;
    token)  # TOKENS: dtype=modes entries, one `matprobe token` each
      for entry in ${TOKENS:-f16=compile,layer+pdl}; do
        dtype=${entry%%=*} modes=${entry#*=}
        name=token-$dtype-$(echo "$modes" | tr ",+" "__")
        PYTHONPATH=src timeout 240 python3 -m matprobe token --model qwen2.5-0.5b \
          --dtype "$dtype" --context 128 --modes "$modes" \
          --rounds 20 --json "$OUT/$name.json" > "$OUT/$name.txt" 2>&1
        grep -v "Warning\|_warn" "$OUT/$name.txt" | grep -E "^(byte|mode|-|[a-z0-9:+-]+ ) *" | tail -14
      done ;;
    peer)
      (cd "$(dirname "$PEER")" && CTX=127 MAXAUTO=1 OUT=$OUT timeout 240 \
        python3 "$(basename "$PEER")" > "$OUT/peer.txt" 2>&1)
      grep -E "^device|^  [a-z]" "$OUT/peer.txt" ;;
  esac
  echo "$step $((SECONDS - start)) s" | tee -a "$OUT/steps.txt"
done
exit 0
