#!/usr/bin/env bash
# One plan on one GPU and on $NGPUS (default 2), fresh stores and fresh
# Triton/Inductor caches each (neither run finds the other's compiled kernels);
# wall time, each card's timeline, winners and ratios compared. JOB=default: the
# default job (`matprobe run`, the built-in Qwen2.5-0.5B profile); else the fp16
# decode-weight plan. $OUT (everything packed into $OUT/all.tgz). PROFILE=1 first
# profiles single pairs (benchmarks/pair_profile.py).
set -u
OUT=${OUT:-/tmp/gpus}
mkdir -p "$OUT"
export PYTHONPATH=src
nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id --format=csv > "$OUT/gpu.txt"
nproc >> "$OUT/gpu.txt"
[ -n "${PROFILE:-}" ] && python3 benchmarks/pair_profile.py "$OUT/pair_profile.txt" 2> "$OUT/pair_profile.err"
ARGS="--model qwen2.5-0.5b --context 128 --op matmul --op matmul_bias_add"
[ "${JOB:-}" = default ] && ARGS=""
N=${NGPUS:-2}
CACHES=$(mktemp -d)
# CARDS="1" or CARDS="2": one of the two runs only (a job too long for one call runs
# as two calls on the same warm host; compare the stores afterwards).
for n in ${CARDS:-1 $N}; do
  GPUS=$(python3 -c "print(','.join(map(str, range($n))))")
  export TRITON_CACHE_DIR="$CACHES/triton-$n" TORCHINDUCTOR_CACHE_DIR="$CACHES/inductor-$n"
  start=$(date +%s.%N)
  # stderr lines stamped with the seconds since the start: when set-up ended (the plan
  # line), the progress lines, the end.
  timeout -s INT "${RUN_LIMIT_S:-3600}" python3 -m matprobe run $ARGS --gpus $GPUS --db "$OUT/g$n.sqlite" --out "$OUT/g$n" 2>&1 > /dev/null \
    | python3 -u -c "import sys, time
t = time.time()
for line in sys.stdin: print(f'{time.time() - t:7.2f} {line}', end='')
print(f'{time.time() - t:7.2f} exit')" > "$OUT/g$n.err"
  end=$(date +%s.%N)
  echo "gpus=$GPUS wall_s=$(python3 -c "print(round($end-$start,1))")" | tee -a "$OUT/wall.txt"
  grep "^plan\|pairs" "$OUT/g$n/report.txt" | head -2
  python3 benchmarks/gpus_timeline.py "$OUT/g$n.sqlite" > "$OUT/timeline-g$n.txt"
  grep "pairs, first" "$OUT/timeline-g$n.txt"
  grep -m1 "specs ×" "$OUT/g$n.err" | cut -c1-60; tail -1 "$OUT/g$n.err"
done
rm -rf "$CACHES"
if [ -z "${CARDS:-}" ]; then
  python3 -m matprobe compare "$OUT/g1.sqlite" "$OUT/g$N.sqlite" > "$OUT/compare.txt" 2>&1
  head -5 "$OUT/compare.txt" | cut -c1-160
fi
for n in ${CARDS:-1 $N}; do grep -A 7 "^Summary" "$OUT/g$n/report.txt" | cut -c1-130; done
tar czf /tmp/gpus-all.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/gpus-all.tgz "$OUT/all.tgz"
exit 0
