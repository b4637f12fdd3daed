#!/usr/bin/env bash
# Twenty-fifth session's changes on a card, for the next lease's first call (no
# device was lent that session): the GPU tests of the token's table run apart
# and of the witness's orphans, then what running a table's modes apart costs the
# token's figures on Qwen2.5-0.5B (benchmarks/token_apart.py: the same kernels in
# process and apart, alternated), and the witness's plugins on the card again
# (benchmarks/witness_gpu.py), since the stop now covers every orphan. Files under
# $OUT, tarred as all.tgz.
set -u
OUT=${OUT:-/tmp/token-apart}
mkdir -p "$OUT/tests" "$OUT/apart" "$OUT/witness"
export PYTHONPATH=src
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv > "$OUT/card.txt"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$OUT/card.txt"
SECONDS=0
timeout ${TEST_S:-240} python3 -m pytest -q -m gpu tests/test_token_apart.py tests/test_witness.py \
  > "$OUT/tests/gpu.txt" 2>&1
echo "gpu tests rc=$? ${SECONDS}s" >> "$OUT/tests/gpu.txt"
SECONDS=0
timeout ${APART_S:-300} python3 benchmarks/token_apart.py --device cuda --rounds ${ROUNDS:-30} --repeats ${REPEATS:-3} "$OUT/apart" \
  > "$OUT/apart/stdout.txt" 2>&1
echo "token apart rc=$? ${SECONDS}s" >> "$OUT/apart/stdout.txt"
SECONDS=0
[ -n "${SKIP_WITNESS:-}" ] || timeout ${WITNESS_S:-200} python3 benchmarks/witness_gpu.py "$OUT/witness" > "$OUT/witness/stdout.txt" 2>&1
echo "witness rc=$? ${SECONDS}s" >> "$OUT/witness/stdout.txt"
tar czf "$OUT/all.tgz" -C "$OUT" card.txt tests apart witness
