#!/usr/bin/env bash
# Does a mode's figure depend on which other modes share its process? (Issue 23,
# twenty-eighth session: on one H200, eager 1940 / layer+pdl 442 µs beside the
# compile modes, 2311 / 425 µs with eager alone beside it.) Each mix runs twice,
# alternating, `matprobe token --model qwen2.5-0.5b --context 128 --rounds 20`;
# the table lines go to $OUT/mix.txt, each run's JSON beside it.
# (JSON names: "," and "+" made "_", which the device tool brings back.)
#   OUT=/tmp/x bash benchmarks/token_mode_mix.sh
set -u
OUT=${OUT:-/tmp/mode_mix}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv,noheader >> "$OUT/card.txt"
MIXES=${MIXES:-"layer+pdl eager,layer+pdl compile,layer+pdl eager,compile,compile-none,layer+pdl"}
for pass in 1 2; do
  for mix in $MIXES; do
    echo "== pass $pass, modes $mix" >> "$OUT/mix.txt"
    PYTHONPATH=src timeout 150 python3 -m matprobe token --model qwen2.5-0.5b --context 128 \
      --modes "$mix" --rounds 20 --json "$OUT/token-$pass-$(echo "$mix" | tr ",+" "__").json" 2>/dev/null \
      | grep -E "^(eager|compile|layer)" >> "$OUT/mix.txt"
  done
done
exit 0
