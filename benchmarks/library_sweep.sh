#!/usr/bin/env bash
# Sweep each kernel family's default grid on the Qwen2.5 decode shapes, beside
# cuBLAS, through the harness (validated, graph-replay device clock).
# Usage on the GPU machine: bash benchmarks/library_sweep.sh OUT_DIR
set -u
out=${1:-.}
export PYTHONPATH=src PYTHONUNBUFFERED=1
sweep() { python3 benchmarks/sweep.py "$@" 2>&1; }
{
  sweep matprobe.kernels.triton.gemv:GEMV_NT '{}' gate_up down o_proj lm_head
  sweep matprobe.kernels.triton.splitk:FAMILIES '{}' down
  sweep matprobe.kernels.triton.gemv_tn:FAMILIES '{}' qkv pv16 pv130 pv1024
  sweep matprobe.kernels.triton.attention:FAMILIES '{}' qk16 qk130 qk1024 pv16 pv130 pv1024
} | tee "$out/library_sweep.txt"
