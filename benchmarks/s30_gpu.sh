#!/usr/bin/env bash
# Thirtieth session, issue 23, one call, STEPS of: tests (pytest -m gpu TESTS), recapture (every mode captured
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
    token)  # TOKENS: [model/context/]dtype=modes entries, one `matprobe token` each
      for entry in ${TOKENS:-f16=compile,layer+pdl}; do
        where=${entry%%=*} modes=${entry#*=}
        dtype=${where##*/} model=qwen2.5-0.5b context=128
        if [ "$where" != "$dtype" ]; then
          model=${where%%/*} rest=${where#*/} context=${rest%%/*}
        fi
        name=token-$model-$context-$dtype-$(echo "$modes" | tr ",+." "___")
        PYTHONPATH=src timeout 240 python3 -m matprobe token --model "$model" \
          --dtype "$dtype" --context "$context" --modes "$modes" \
          --rounds 20 --json "$OUT/$name.json" > "$OUT/$name.txt" 2>&1
        grep -v "Warning\|_warn" "$OUT/$name.txt" | grep -E "^(byte|mode|-|[a-z0-9:+-]+ ) *" | tail -14
      done ;;
    tests)
      PYTHONPATH=src timeout "${TESTS_S:-240}" python3 -m pytest -q -m gpu -p no:cacheprovider \
        ${TESTS:-tests/test_token.py tests/test_gpu.py} > "$OUT/tests.txt" 2>&1
      tail -3 "$OUT/tests.txt" ;;
    peer)
      (cd "$(dirname "$PEER")" && CTX=127 MAXAUTO=1 OUT=$OUT timeout 240 \
        python3 "$(basename "$PEER")" > "$OUT/peer.txt" 2>&1)
      grep -E "^device|^  [a-z]" "$OUT/peer.txt" ;;
  esac
  echo "$step $((SECONDS - start)) s" | tee -a "$OUT/steps.txt"
done
# The device tool brings back a few files only: TAR=1 packs them into one.
if [ -n "${TAR:-}" ]; then
  (cd "$OUT" && tar czf all.tgz --exclude all.tgz -- * && find . -type f ! -name all.tgz -delete)
fi
exit 0
