#!/usr/bin/env bash
# Issue 23, item 2: the decode layer's fused sites as specs (`matprobe run --model M
# --layer`: RMSNorm folded into QKV, gate/up + SwiGLU and the LM head, the residual
# into o_proj and down) on one GPU, every family that takes them against the
# baseline (F.rms_norm then cuBLAS) and the torch.compile peer (max-autotune, the
# norm fused by Inductor), in one call. RUNS: "model:dtype" items (default the
# three of the issue's targets; VARIANTS: `--variants` globs, default every Triton
# family, the baseline and torch.compile, which is off by default); fresh stores and Triton/Inductor caches each.
# $OUT/<model>_<dtype>.sqlite and .json (`matprobe report --format json`), and
# $OUT/summary.txt (benchmarks/layer_sites_summary.py).
set -u
set -f  # VARIANTS holds globs for matprobe, not for the shell
OUT=${OUT:-/tmp/layer}
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} > "$OUT/gpu.txt"
for item in ${RUNS:-qwen2.5-0.5b:f16 qwen2.5-0.5b:q8_0 llama-3.2-1b:bf16}; do
  model=${item%%:*} dtype=${item##*:} name=$(echo "${item}" | tr -c 'a-zA-Z0-9\n' '_')
  caches=$(mktemp -d)
  export TRITON_CACHE_DIR="$caches/triton" TORCHINDUCTOR_CACHE_DIR="$caches/inductor"
  start=$(date +%s)
  PYTHONPATH=src timeout -s INT "${RUN_LIMIT_S:-170}" python3 -m matprobe run --model "$model" \
    --layer --dtype "$dtype" --variants ${VARIANTS:-triton.* torch.matmul torch.compile} --db "$OUT/$name.sqlite" --out "$OUT/$name" > /dev/null \
    2> "$OUT/$name.err"
  echo "$item: wall $(( $(date +%s) - start )) s" | tee -a "$OUT/wall.txt"
  PYTHONPATH=src python3 -m matprobe report --db "$OUT/$name.sqlite" --format json \
    > "$OUT/$name.json" 2>> "$OUT/$name.err"
  rm -rf "$caches" "$OUT/$name"
done
set +f
PYTHONPATH=src python3 benchmarks/layer_sites_summary.py "$OUT"/*.json > "$OUT/summary.txt" 2>&1
cat "$OUT/gpu.txt" "$OUT/wall.txt" "$OUT/summary.txt"
