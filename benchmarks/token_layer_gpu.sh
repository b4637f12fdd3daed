#!/usr/bin/env bash
# Issue 23 in one call: triton.decode_attention against the step's torch attention
# (benchmarks/decode_attention_probe.py), then `matprobe token` with the `layer`
# mode (five Triton kernels a layer) beside the cuBLAS and fused modes, then the
# independent step (PEER, at CTX=context-1: as many keys as the token's cache,
# max-autotune too) in the same call, at PEER_CTX. MODEL, DTYPE, CONTEXT (one or
# more), MODES, ROUNDS; SKIP_PROBE=1.
set -u
OUT=${OUT:-/tmp/token-layer}
CONTEXT=${CONTEXT:-128}
MODEL=${MODEL:-qwen2.5-0.5b}
DTYPE=${DTYPE:-f16}
MODES=${MODES:-eager,compile,compile-none,fused,compile+fused,layer}
ROUNDS=${ROUNDS:-20}
PEER=${PEER:-.exp/peer/decode_step_peer.py}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt"
cat "$OUT/gpu.txt"
if [ -z "${SKIP_PROBE:-}" ]; then
  PYTHONPATH=src OUT=$OUT timeout 150 python3 benchmarks/decode_attention_probe.py \
    > "$OUT/attention.txt" 2>&1
  grep -v "Warning\|_warn" "$OUT/attention.txt" | tail -14
fi
for ctx in $CONTEXT; do
  PYTHONPATH=src timeout 240 python3 -m matprobe token --model "$MODEL" --dtype "$DTYPE" \
    --context "$ctx" --modes "$MODES" --rounds "$ROUNDS" \
    --json "$OUT/token-$MODEL-$DTYPE-$ctx.json" > "$OUT/token-$MODEL-$DTYPE-$ctx.txt" 2>&1
  grep -v "Warning\|_warn" "$OUT/token-$MODEL-$DTYPE-$ctx.txt" | tail -24
  if [ "$ctx" = "${PEER_CTX:-128}" ] && [ "$MODEL" = qwen2.5-0.5b ]; then
    (cd "$(dirname "$PEER")" && CTX=$((ctx - 1)) MAXAUTO=1 OUT=$OUT timeout 240 \
      python3 "$(basename "$PEER")" > "$OUT/peer-$ctx.txt" 2>&1)
    grep -E "^device|^  [a-z]" "$OUT/peer-$ctx.txt"
  fi
done
exit 0
