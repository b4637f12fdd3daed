#!/usr/bin/env bash
# Twenty-seventh session: the steps named in STEPS (default "tests peer token"), each
# under its own limit, files under $OUT.
#   tests  every GPU test of the suite (pytest -m gpu tests/)
#   peer   the independent step (../shared/probes/decode_step_peer.py, copied to
#          .exp/peer/), CTX = context - 1, no max-autotune
#   token  `matprobe token` on the four modes the peer is set beside
#   warm   benchmarks/token_warm.py: three untimed-call protocols alternated
set -u
OUT=${OUT:-/tmp/s27}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv,noheader >> "$OUT/card.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$OUT/card.txt"
for step in ${STEPS:-tests peer token}; do
  start=$SECONDS
  case $step in
    tests)
      PYTHONPATH=src timeout "${TESTS_S:-300}" python3 -m pytest -q -m gpu -p no:cacheprovider \
        ${TESTS:-tests/} > "$OUT/tests.txt" 2>&1; echo "rc=$?" >> "$OUT/tests.txt" ;;
    peer)
      (cd .exp/peer && CTX=127 OUT=$OUT timeout 110 python3 decode_step_peer.py > "$OUT/peer.txt" 2>&1)
      echo "rc=$?" >> "$OUT/peer.txt" ;;
    token)
      PYTHONPATH=src timeout 150 python3 -m matprobe token --model qwen2.5-0.5b --context 128 \
        --modes "${MODES:-eager,compile,compile-none,layer+pdl}" --rounds 20 \
        --json "$OUT/token.json" > "$OUT/token.txt" 2>&1; echo "rc=$?" >> "$OUT/token.txt" ;;
    warm)
      PYTHONPATH=src timeout "${WARM_S:-400}" python3 benchmarks/token_warm.py --repeats "${REPEATS:-2}" \
        "$OUT/warm" > "$OUT/warm.txt" 2>&1; echo "rc=$?" >> "$OUT/warm.txt" ;;
  esac
  echo "$step $((SECONDS - start)) s" >> "$OUT/steps.txt"
done
exit 0
