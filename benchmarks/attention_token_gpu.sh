#!/usr/bin/env bash
# The decode attention's new tiling in a whole token: `matprobe token --modes
# layer+pdl` at contexts 128 and 4096 (and 1024), the code before the change
# (BEFORE, a src tree) and after it (this tree) alternating in one call on one card.
#     BEFORE=.exp/before_attn/src OUT=dir bash benchmarks/attention_token_gpu.sh
set -u
OUT=${OUT:-/tmp/attention-token}
BEFORE=${BEFORE:-.exp/before_attn/src}
MODEL=${MODEL:-qwen2.5-0.5b}
DTYPE=${DTYPE:-f16}
ROUNDS=${ROUNDS:-12}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt"
cat "$OUT/gpu.txt"
for ctx in ${CONTEXT:-128 4096}; do
  for code in before after; do
    src=src; [ "$code" = before ] && src=$BEFORE
    PYTHONPATH=$src timeout 200 python3 -m matprobe token --model "$MODEL" --dtype "$DTYPE" \
      --context "$ctx" --modes layer+pdl --rounds "$ROUNDS" \
      --json "$OUT/token-$code-$ctx.json" > "$OUT/token-$code-$ctx.txt" 2>&1
    echo "== $code ctx $ctx"; grep -E "layer\+pdl|floor" "$OUT/token-$code-$ctx.txt" | head -4
  done
done
exit 0
