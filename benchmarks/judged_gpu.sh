#!/usr/bin/env bash
# Issue 20 on one GPU, in one call: TESTS=1 runs the GPU tests (TEST_FILES, default tests/test_gpu.py,
# tests/test_draws.py, tests/test_token.py: a token per mode on the card, each timed
# replay judged at a fresh embedding and RoPE position); JOBS="src .oldmain/src" runs the default job (`matprobe run`,
# the built-in Qwen2.5-0.5B profile, one card) with the code under each folder in
# turn (RUN_ARGS: more arguments, e.g. a smaller plan), fresh stores and fresh
# Triton/Inductor caches each — an older checkout's
# src, carried in an ignored folder, gives the before figure in the same call.
# GPUS="": run without --gpus (the worker picks the card itself; default --gpus 0).
# PROFILE=1: benchmarks/pair_profile.py first. Everything lands in $OUT/all.tgz;
# $OUT/summary.txt holds the wall times and the best ratio of every spec
# (benchmarks/judged_summary.py).
set -u
OUT=${OUT:-/tmp/judged}
mkdir -p "$OUT/runs"
{
  nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} > "$OUT/runs/gpu.txt"
if [ -n "${TESTS:-}" ]; then
  start=$(date +%s)
  PYTHONPATH=src timeout "${TEST_LIMIT_S:-300}" python3 -m pytest -m gpu -q -p no:cacheprovider \
    ${TEST_FILES:-tests/test_gpu.py tests/test_draws.py tests/test_token.py} > "$OUT/runs/gpu_tests.txt" 2>&1
  echo "gpu tests: $(tail -1 "$OUT/runs/gpu_tests.txt") ($(( $(date +%s) - start )) s)" | tee -a "$OUT/runs/wall.txt"
fi
if [ -n "${PROFILE:-}" ]; then  # where one pair's time goes (cProfile; benchmarks/pair_profile.py)
  for shapes in weights attention; do
    PYTHONPATH=src timeout 120 python3 benchmarks/pair_profile.py "$OUT/runs/profile_$shapes.txt" $shapes \
      > /dev/null 2>&1
  done
fi
for src in ${JOBS:-}; do
  name=$(echo "$src" | tr -c 'a-zA-Z0-9\n' '_')
  caches=$(mktemp -d)
  export TRITON_CACHE_DIR="$caches/triton" TORCHINDUCTOR_CACHE_DIR="$caches/inductor"
  start=$(date +%s.%N)
  # shellcheck disable=SC2086  # RUN_ARGS: more `matprobe run` arguments (a smaller plan)
  PYTHONPATH=$src timeout -s INT "${RUN_LIMIT_S:-400}" python3 -m matprobe run ${GPUS---gpus 0} ${RUN_ARGS:-} \
    --db "$OUT/runs/$name.sqlite" --out "$OUT/runs/$name" > /dev/null 2> "$OUT/runs/$name.err"
  end=$(date +%s.%N)
  echo "$src: wall_s=$(python3 -c "print(round($end - $start, 1))")" | tee -a "$OUT/runs/wall.txt"
  rm -rf "$caches"
done
cp "$OUT/runs/wall.txt" "$OUT/summary.txt" 2>/dev/null
reports=$(ls "$OUT"/runs/*/report.json 2>/dev/null)
[ -n "$reports" ] && python3 benchmarks/judged_summary.py $reports >> "$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt"
tar czf /tmp/judged-all.tgz -C "$OUT/runs" . && mv /tmp/judged-all.tgz "$OUT/all.tgz"
rm -rf "$OUT/runs"
exit 0
