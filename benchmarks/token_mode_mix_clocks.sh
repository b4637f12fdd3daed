#!/usr/bin/env bash
# Which mode's presence moves the others' figures (issue 23, twenty-ninth
# session)? The twenty-ninth session's first call found eager 2314 / compile 1043
# / layer+pdl 429 µs whenever compile-none was absent and 1958 / 919 / 444 with
# it. These mixes tell "compile-none present" from "four modes in the rotation";
# the card's SM/memory clocks and power are sampled every 100 ms meanwhile
# (clocks.csv), each run's start and end stamped in runs.txt.
#   OUT=/tmp/x bash benchmarks/token_mode_mix_clocks.sh
set -u
OUT=${OUT:-/tmp/mode_mix_clocks}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv,noheader >> "$OUT/card.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv,noheader -lms 100 > "$OUT/clocks.csv" &
SMI=$!
MIXES=${MIXES:-"eager,compile-none,layer+pdl eager,eager-none,compile,layer+pdl eager,layer+pdl eager,compile,compile-none,layer+pdl"}
for mix in $MIXES; do
  echo "== modes $mix" >> "$OUT/mix.txt"
  echo "start $(date +%H:%M:%S.%N) $mix" >> "$OUT/runs.txt"
  PYTHONPATH=src timeout 150 python3 -m matprobe token --model qwen2.5-0.5b --context 128 \
    --modes "$mix" --rounds 20 --json "$OUT/token-$(echo "$mix" | tr ',+' '__').json" 2>/dev/null \
    | grep -E "^(eager|compile|layer)" >> "$OUT/mix.txt"
  echo "end $(date +%H:%M:%S.%N) $mix" >> "$OUT/runs.txt"
done
kill "$SMI"
exit 0
