#!/usr/bin/env bash
# (1) The two pdl=1 variants on the down projection, before/after the shared blocks,
# alternating processes; (2) the eager+table token's profile with the stream-order
# attribution, read back by shapes. Under $OUT.
set -u
OUT=${OUT:-/tmp/pp}
mkdir -p "$OUT"
for round in 1 2; do
  PYTHONPATH=.before/src python3 benchmarks/blocks_before_after.py --only pdl1 --label before --out "$OUT/before$round.json" > /dev/null 2>&1
  PYTHONPATH=src python3 benchmarks/blocks_before_after.py --only pdl1 --label after --out "$OUT/after$round.json" > /dev/null 2>&1
done
python3 benchmarks/blocks_before_after.py --compare "$OUT"/before*.json "$OUT"/after*.json | tee "$OUT/compare-pdl1.txt"
source benchmarks/table_for_token.sh
PYTHONPATH=src python3 -m matprobe token --model qwen2.5-0.5b --context 128 --table "$TABLE" --db "$DB" \
  --modes eager,eager+table --rounds 5 --profile "$OUT/profile.jsonl" --profile-mode eager+table > /dev/null 2> "$OUT/token.err"
tail -1 "$OUT/token.err"
PYTHONPATH=src python3 -m matprobe shapes "$OUT/profile.jsonl" | tee "$OUT/profile-shapes.txt"
gzip -f "$OUT/profile.jsonl"
