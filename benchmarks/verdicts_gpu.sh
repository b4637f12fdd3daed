#!/usr/bin/env bash
# Issue 8 on the GPU in one call: a run of the five Qwen2.5 GEMV specs, the token
# check on its winners, then the whole default job (a second measurement of the
# same five GEMV ratios). Everything lands in one tarball under $OUT.
# Usage on the GPU machine: bash benchmarks/verdicts_gpu.sh   (PYTHONPATH set here)
set -u
export PYTHONPATH=src:tests PYTHONUNBUFFERED=1
work=/tmp/verdicts; mkdir -p "$work"
mp() { python3 -m matprobe "$@"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$work/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$work/gpu.txt"
( time timeout 160 python3 -m matprobe run --op matmul --op matmul_bias_add \
    --db "$work/gemv.sqlite" --out "$work/gemv" ) > "$work/gemv.log" 2>&1
tail -40 "$work/gemv/report.txt"
timeout 100 python3 benchmarks/token_check.py "$work/gemv/report.json" --context 128 \
  > "$work/token128.txt" 2>&1; cat "$work/token128.txt"
( time timeout "${FULL_S:-290}" python3 -m matprobe run --db "$work/full.sqlite" \
    --out "$work/full" ) > "$work/full.log" 2>&1
tail -5 "$work/full.log"; tail -30 "$work/full/report.txt" 2>/dev/null
tar czf "$OUT/verdicts.tgz" -C "$work" .
