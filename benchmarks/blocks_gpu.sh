#!/usr/bin/env bash
# Before/after of the shared Triton building blocks on one GPU, alternating the old
# package (.before/src, the commit before the change) and the new one (src), two
# processes each; ratios and the comparison go to $OUT.
set -u
OUT=${OUT:-/tmp/blocks}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$OUT/gpu.txt"
for round in 1 2; do
  PYTHONPATH=.before/src python3 benchmarks/blocks_before_after.py --label before --out "$OUT/before$round.json" 2>&1 | tail -20
  PYTHONPATH=src python3 benchmarks/blocks_before_after.py --label after --out "$OUT/after$round.json" 2>&1 | tail -20
done
python3 benchmarks/blocks_before_after.py --compare "$OUT"/before*.json "$OUT"/after*.json | tee "$OUT/compare.txt"
