#!/usr/bin/env bash
# The persistent GEMV (triton.gemv_stream), with and without PDL and L2
# prefetch, beside cuBLAS through the harness.
# Usage on the GPU machine: bash benchmarks/stream_sweep.sh OUT_DIR
set -u
out=${1:-.}
export PYTHONPATH=src PYTHONUNBUFFERED=1
sweep() { python3 benchmarks/sweep.py "$@" 2>&1; }
{
  sweep matprobe.kernels.triton.gemv_stream:GEMV_STREAM '{"bn":[2,4,8],"p":[1,2,4],"w":[4,8],"pdl":[0,1],"pf":[0,1]}' gate_up o_proj
  sweep matprobe.kernels.triton.gemv_stream:GEMV_STREAM '{"bn":[1,2,4],"p":[1,2,4],"w":[8,16],"pdl":[0,1],"pf":[0,1]}' down
  sweep matprobe.kernels.triton.gemv_stream:GEMV_STREAM '{"bn":[8],"p":[2,4],"w":[8],"pdl":[0,1],"pf":[1]}' lm_head
} | tee "$out/stream_sweep.txt"
