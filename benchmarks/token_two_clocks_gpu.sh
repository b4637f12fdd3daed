#!/usr/bin/env bash
# Issue 23 item 1 in one call: the GPU tests (TESTS=1), `matprobe token --fused`
# on the two clocks, the token beside the independent step in one process
# (benchmarks/token_peer_probe.py) and the independent step at CTX=context-1 (its
# cache then holds as many keys as the token's: see BENCHMARKS). PEER: the probe's
# path (carry a copy in an ignored folder: ../shared does not travel).
set -u
OUT=${OUT:-/tmp/two-clocks}
CONTEXT=${CONTEXT:-128}
PEER=${PEER:-.exp/peer/decode_step_peer.py}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt"
if [ -n "${TESTS:-}" ]; then
  PYTHONPATH=src timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider \
    tests/test_gpu.py tests/test_draws.py tests/test_token.py > "$OUT/gpu_tests.txt" 2>&1
  echo "gpu tests: $(tail -1 "$OUT/gpu_tests.txt")"
fi
PYTHONPATH=src timeout 300 python3 -m matprobe token --fused --context "$CONTEXT" --rounds 20 \
  --json "$OUT/token.json" > "$OUT/token.txt" 2> "$OUT/token.err"
tail -22 "$OUT/token.txt"
PYTHONPATH=src OUT=$OUT timeout 150 python3 benchmarks/token_peer_probe.py "$PEER" \
  > "$OUT/token_peer.txt" 2>&1
grep -v "^ \|Warning\|_warn" "$OUT/token_peer.txt"
(cd "$(dirname "$PEER")" && CTX=$((CONTEXT - 1)) OUT=$OUT timeout 150 python3 "$(basename "$PEER")" \
  > "$OUT/peer.txt" 2>&1)
grep -E "^device|^  [a-z]" "$OUT/peer.txt"
exit 0
