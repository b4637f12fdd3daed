#!/usr/bin/env bash
# Programmatic dependent launch (pdl=1) beside the plain launches, through the
# harness, on the GEMV shapes. Usage on the GPU machine: bash benchmarks/pdl_sweep.sh OUT_DIR
set -u
out=${1:-.}
export PYTHONPATH=src PYTHONUNBUFFERED=1
sweep() { python3 benchmarks/sweep.py "$@" 2>&1; }
{
  sweep matprobe.kernels.triton.gemv:GEMV_NT '{"bn":[2,4,8,16],"bk":[1024],"w":[4,8,16],"pdl":[0,1]}' gate_up
  sweep matprobe.kernels.triton.gemv:GEMV_NT '{"bn":[1,2,4],"bk":[8192],"w":[4,8,16],"pdl":[1]}' down
  sweep matprobe.kernels.triton.gemv:GEMV_NT '{"bn":[1,2,4,8],"bk":[1024],"w":[4,8],"pdl":[1]}' o_proj
  sweep matprobe.kernels.triton.attention:ATTN_BMV '{"bn":[16,32],"bk":[128,256,512,1024],"w":[4,8],"pdl":[0,1]}' qkv
  sweep matprobe.kernels.triton.gemv:GEMV_NT '{"bn":[4,8],"bk":[1024],"w":[4,8],"pdl":[0]}' lm_head
} | tee "$out/pdl_sweep.txt"
