#!/usr/bin/env bash
# One plan (Qwen2.5-0.5B decode weights, fp16, every family's default grid) on one
# GPU and on $NGPUS (default 2), fresh stores each; wall time, winners and ratios
# compared. $OUT.
set -u
OUT=${OUT:-/tmp/gpus}
mkdir -p "$OUT"
export PYTHONPATH=src
nvidia-smi --query-gpu=index,name,driver_version --format=csv > "$OUT/gpu.txt"
ARGS="--model qwen2.5-0.5b --context 128 --op matmul --op matmul_bias_add"
N=${NGPUS:-2}
for n in 1 "$N"; do
  GPUS=$(python3 -c "print(','.join(map(str, range($n))))")
  start=$(date +%s.%N)
  python3 -m matprobe run $ARGS --gpus $GPUS --db "$OUT/g$n.sqlite" --out "$OUT/g$n" > /dev/null 2> "$OUT/g$n.err"
  end=$(date +%s.%N)
  echo "gpus=$GPUS wall_s=$(python3 -c "print(round($end-$start,1))")" | tee -a "$OUT/wall.txt"
  grep "^plan\|pairs" "$OUT/g$n/report.txt" | head -2
done
python3 -m matprobe compare "$OUT/g1.sqlite" "$OUT/g$N.sqlite" > "$OUT/compare.txt" 2>&1
head -5 "$OUT/compare.txt" | cut -c1-160
for n in 1 "$N"; do grep -A 7 "^Summary" "$OUT/g$n/report.txt" | cut -c1-130; done
cd "$OUT" && tar czf reports.tgz g1 "g$N" && rm -rf g1 "g$N"
cd - > /dev/null
[ -n "${SWIGLU:-}" ] && PYTHONPATH=src python3 benchmarks/swiglu_gpu.py "$OUT/swiglu.json" 2>&1 | tail -30
exit 0
