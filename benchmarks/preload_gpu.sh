#!/usr/bin/env bash
# Twenty-third session: the fork server now preloads matprobe's worker modules
# (run/processes.py PRELOAD). Call 1: a worker's start with torch-only preload
# and with the new one, then the witness's honest, forger and shaver plugins
# (benchmarks/witness_gpu.py) on the card. Files under $OUT, tarred as all.tgz.
set -u
OUT=${OUT:-/tmp/preload}
mkdir -p "$OUT/start" "$OUT/witness"
export PYTHONPATH=src
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv > "$OUT/card.txt"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$OUT/card.txt"
for round in 1 2; do
  python3 benchmarks/process_start.py --preload torch > "$OUT/start/torch-only$round.txt" 2>&1
  python3 benchmarks/process_start.py > "$OUT/start/matprobe$round.txt" 2>&1
done
SECONDS=0
python3 benchmarks/witness_gpu.py "$OUT/witness" > "$OUT/witness/stdout.txt" 2>&1
echo "witness rc=$? ${SECONDS}s" >> "$OUT/witness/stdout.txt"
tar czf "$OUT/all.tgz" -C "$OUT" card.txt start witness
