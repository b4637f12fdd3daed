#!/usr/bin/env bash
# Twenty-sixth session, one call: (1) `matprobe token` with every timed call right
# after an untimed one of the same mode (was: only where a table's modes run apart)
# beside the independent step (PEER, CTX = context - 1, no max-autotune); (2) the
# GEMV plan of the default job (RUN_ARGS) with f5ced8b's src (.oldmain/src) and
# this one's, fresh stores and caches each (benchmarks/judged_gpu.sh); (3) last,
# since what it queues holds the card, the GPU test of work a table's plugin left
# queued. Each step under its own limit; files under $OUT.
set -u
OUT=${OUT:-/tmp/warm}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/card.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$OUT/card.txt"
PYTHONPATH=src timeout 150 python3 -m matprobe token --model qwen2.5-0.5b --context 128 \
  --modes "${MODES:-eager,compile,compile-none,layer+pdl}" --rounds 20 \
  --json "$OUT/token.json" > "$OUT/token.txt" 2>&1
echo "token rc=$?" >> "$OUT/token.txt"
(cd .exp/peer && CTX=127 OUT=$OUT timeout 110 python3 decode_step_peer.py > "$OUT/peer.txt" 2>&1)
echo "peer rc=$?" >> "$OUT/peer.txt"
OUT=$OUT/gemv JOBS=".oldmain/src src" RUN_LIMIT_S=140 RUN_ARGS="--op matmul --op matmul_bias_add" \
  bash benchmarks/judged_gpu.sh > /dev/null 2>&1
cp "$OUT/gemv/summary.txt" "$OUT/gemv_summary.txt" 2>/dev/null
PYTHONPATH=src timeout 110 python3 -m pytest -q -m gpu -p no:cacheprovider \
  "tests/test_token_apart.py::test_on_a_card_work_a_tables_plugin_left_queued_leaves_the_token_without_a_verdict" \
  > "$OUT/test.txt" 2>&1
echo "test rc=$?" >> "$OUT/test.txt"
exit 0
