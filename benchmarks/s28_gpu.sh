#!/usr/bin/env bash
# Twenty-eighth session: the steps named in STEPS, files under $OUT.
#   killed  a GPU test whose table process keeps two 6 s kernels queued, its pytest
#           killed with SIGKILL after KILL_AFTER s; then what is left: processes
#           (ps) and contexts on the card (nvidia-smi), at once and 10 s later
#   tests   the GPU tests named in TESTS (pytest -v -m gpu), under TESTS_S
set -u
OUT=${OUT:-/tmp/s28}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv,noheader >> "$OUT/card.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$OUT/card.txt"
left() {
  echo "== $1"
  ps -eo pid,ppid,stat,etimes,args | grep -E "python|multiprocessing" | grep -v grep | cut -c1-160
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
}
for step in ${STEPS:-killed tests}; do
  start=$SECONDS
  case $step in
    killed)
      {
        left "before"
        PYTHONPATH=src python3 -m pytest -v -m gpu -p no:cacheprovider \
          "tests/test_token_apart.py::test_on_a_card_work_a_tables_plugin_left_queued_leaves_the_token_without_a_verdict" \
          > "$OUT/killed_pytest.txt" 2>&1 &
        judge=$!
        sleep "${KILL_AFTER:-60}"
        left "running, ${KILL_AFTER:-60} s in"
        kill -KILL $judge; wait $judge 2>/dev/null
        sleep 1; left "1 s after SIGKILL of pytest ($judge)"
        sleep 10; left "11 s after"
      } > "$OUT/killed.txt" 2>&1 ;;
    tests)
      PYTHONPATH=src timeout "${TESTS_S:-400}" python3 -m pytest -v -m gpu -p no:cacheprovider \
        ${TESTS:-tests/test_witness.py} > "$OUT/tests.txt" 2>&1; echo "rc=$?" >> "$OUT/tests.txt" ;;
  esac
  echo "$step $((SECONDS - start)) s" >> "$OUT/steps.txt"
done
exit 0
