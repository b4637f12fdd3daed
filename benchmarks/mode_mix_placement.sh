#!/usr/bin/env bash
# Is the two-state effect (issue 23) where the allocator puts a graph's buffers?
# benchmarks/mode_mix_recapture.py under each CEILING (measure, alloc, none) with
# the default allocator, then with expandable segments (one address range, mapped
# as it grows). Files $OUT/recapture-<ceiling>-<conf>.json; lines in $OUT/placement.txt.
set -u
OUT=${OUT:-/tmp/placement}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/card.txt"
for conf in default expandable; do
  for ceiling in ${CEILINGS:-measure alloc none}; do
    [ "$conf" = expandable ] && export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    echo "== CEILING=$ceiling allocator $conf" >> "$OUT/placement.txt"
    CEILING=$ceiling PYTHONPATH=src timeout 120 python3 benchmarks/mode_mix_recapture.py \
      "${MODES:-eager,eager-none,compile-none,layer+pdl}" "$OUT/recapture-$ceiling-$conf.json" \
      2>/dev/null | grep -E "^(built|again)" >> "$OUT/placement.txt"
    unset PYTORCH_CUDA_ALLOC_CONF
  done
done
cat "$OUT/placement.txt"
exit 0
