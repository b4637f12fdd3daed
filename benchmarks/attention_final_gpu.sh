#!/usr/bin/env bash
# The decode attention's changes on one card, in one call: the GPU tests, the
# split's cost step by step (benchmarks/attention_split_cost.py), then
# `matprobe token --modes layer+pdl` before (BEFORE, a src tree) and after (this
# tree) alternating, for Qwen2.5-0.5B f16 at contexts 128, 1024 and 4096 and
# Llama-3.2-1B bf16 at 128 and 4096. Everything lands in $OUT/all.tgz.
#     BEFORE=.exp/before_attn/src OUT=dir bash benchmarks/attention_final_gpu.sh
set -u
OUT=${OUT:-/tmp/attention-final}
BEFORE=${BEFORE:-.exp/before_attn/src}
ROUNDS=${ROUNDS:-12}
work=$(mktemp -d)
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv,noheader | tee "$work/gpu.txt"
if [ -n "${TESTS:-}" ]; then
  start=$(date +%s)
  # the files one at a time where one of them would set TRITON_INTERPRET for the rest
  # (the whole folder at once ran the card's tests in the interpreter)
  PYTHONPATH=src timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py \
    tests/test_draws.py tests/test_token.py tests/test_decode_attention.py \
    > "$work/gpu_tests.txt" 2>&1
  echo "gpu tests: $(tail -1 "$work/gpu_tests.txt") ($(( $(date +%s) - start )) s)"
  PYTHONPATH=src timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_tamper.py \
    > "$work/gpu_tamper_tests.txt" 2>&1
  echo "gpu tamper tests: $(tail -1 "$work/gpu_tamper_tests.txt") ($(( $(date +%s) - start )) s)"
fi
PYTHONPATH=src OUT=$work STAGES=0,1,2 timeout 120 python3 benchmarks/attention_split_cost.py \
  2>&1 | grep -v Warn | tee "$work/split.txt"
for case in "qwen2.5-0.5b f16 128" "qwen2.5-0.5b f16 4096" "qwen2.5-0.5b f16 1024" \
            "llama-3.2-1b bf16 128" "llama-3.2-1b bf16 4096"; do
  set -- $case
  for code in before after; do
    src=src; [ "$code" = before ] && src=$BEFORE
    name="$1-$2-$3-$code"
    PYTHONPATH=$src timeout 150 python3 -m matprobe token --model "$1" --dtype "$2" \
      --context "$3" --modes layer+pdl --rounds "$ROUNDS" --json "$work/token-$name.json" \
      > "$work/token-$name.txt" 2>&1
    echo "$name: $(grep -E '^layer\+pdl' "$work/token-$name.txt")"
  done
done
tar -czf "$OUT/all.tgz" -C "$work" .
exit 0
