#!/usr/bin/env bash
# Issue 22, twenty-second session: triton.gemv_q8_int8dot's kernel merged into
# gemv_q8_kernel (an INT8DOT constexpr). Its PTX is the same instructions in another
# order (benchmarks/ptx_identity.py); this times the Q8_0 weight matmuls of Qwen2.5-0.5B
# with the old tree (.exp/old_src, carried) and the new one, turn about, each run in
# a process of its own on an empty store: two int8dot points and gemv_q8's best point.
set -u
OUT=${OUT:-/tmp/q8m}
mkdir -p "$OUT"
VARIANTS=("triton.gemv_q8_int8dot/bn1_bk1024_w4" "triton.gemv_q8_int8dot/bn4_bk1024_w8"
          "triton.gemv_q8/bn4_bk1024_w4_blk1")
for round in 1 2; do
  for tree in old new; do
    src=src; [[ $tree == old ]] && src=.exp/old_src
    PYTHONPATH=$src python3 -m matprobe run --model qwen2.5-0.5b --dtype q8_0 --device cuda \
      --variants "${VARIANTS[@]}" --db "$OUT/$tree$round.sqlite" \
      > "$OUT/$tree$round.txt" 2> "$OUT/$tree$round.err"
    echo "$tree round $round: rc=$? $(tail -1 "$OUT/$tree$round.err")"
  done
done
PYTHONPATH=src python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import sys, pathlib
from matprobe.run.store import ResultStore
out = pathlib.Path(sys.argv[1])
rows = {}
for f in sorted(out.glob("*.sqlite")):
    with ResultStore(f, read_only=True) as store:
        for r in store.results():
            d = r.clocks.device
            q = r.clocks.vs_baseline
            rows.setdefault((r.variant_id, r.spec_key), {})[f.stem] = (
                r.status.value, d and round(d.median_us, 2), q and round(q.median, 3))
for (vid, key), seen in sorted(rows.items()):
    print(vid, "|".join(key.split("|")[3:5]), dict(sorted(seen.items())))
PY
cd "$OUT" && tar czf all.tgz *.txt *.err *.sqlite
