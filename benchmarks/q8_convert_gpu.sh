#!/usr/bin/env bash
# Issue 23, twenty-second session: the Q8_0 decode GEMVs' int8 → fp32 conversion by
# the bits of 1.5·2^23 (an integer add and a float subtract) instead of cvt.rn.f32.s16.
# The Q8_0 (and, unchanged, the fp16) layer+pdl token with the old tree
# (.exp/old_src, carried) and the new one, each a `matprobe token` process of its own,
# turn about, twice; then the per-kernel timeline of the new Q8_0 token. The change
# was not kept (slower in the token): apply
# benchmarks/h200-2026-11-29-s22/q8convert/call5-every-site/every-site.patch.txt to
# measure it again.
set -u
OUT=${OUT:-/tmp/q8c}
mkdir -p "$OUT"
for round in 1 2; do
  for tree in old new; do
    src=src; [[ $tree == old ]] && src=.exp/old_src
    for dtype in q8_0 f16; do
      PYTHONPATH=$src python3 -m matprobe token --model qwen2.5-0.5b --dtype $dtype \
        --modes layer+pdl --rounds 30 --json "$OUT/$tree$round-$dtype.json" \
        > "$OUT/$tree$round-$dtype.txt" 2> "$OUT/$tree$round-$dtype.err"
      echo "$tree $round $dtype rc=$?: $(grep -E '^ *layer\+pdl' "$OUT/$tree$round-$dtype.txt" | head -1)"
    done
  done
done
DTYPE=q8_0 PYTHONPATH=src python3 benchmarks/token_timeline.py > "$OUT/timeline.txt" 2>&1
python3 benchmarks/timeline_sites.py "$OUT"/timeline-qwen2.5-0.5b-q8_0-128.json | tee "$OUT/sites.txt"
cd "$OUT" && tar czf all.tgz *.txt *.err *.json
