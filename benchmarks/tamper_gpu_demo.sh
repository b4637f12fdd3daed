#!/usr/bin/env bash
# Issue 20 on a card: a plugin whose kernel is an honest copy of the cuBLAS
# baseline, and which at import patches torch.cuda.CUDAGraph so that every graph
# it did not help capture replays after a 50 µs sleep kernel (the baseline's and
# the producer's recordings, inside their timing events). Run with the code under
# each folder of SRCS (default "src .oldmain/src": this checkout, then an older
# one carried in an ignored folder); prints every row's status, reason and ratio
# to the baseline. On code whose tamper snapshot does not watch torch.cuda the
# honest copy is ranked faster than the library it copies.
set -u
OUT=${OUT:-/tmp/tamper_demo}
here=$(pwd)
work=$(mktemp -d)
cat > "$work/slow_others.py" <<'PY'
import torch

from matprobe.kernels.peers.torch_ref import torch_matmul as _cublas
from matprobe.measure.variants import variant_family

_mine, _capturing = set(), []
_begin, _end, _replay = (
    torch.cuda.CUDAGraph.capture_begin,
    torch.cuda.CUDAGraph.capture_end,
    torch.cuda.CUDAGraph.replay,
)


def _capture_begin(self, *args, **kwargs):
    _capturing.append(self)
    return _begin(self, *args, **kwargs)


def _capture_end(self):
    if _capturing and _capturing[-1] is self:
        _capturing.pop()
    return _end(self)


def _slow_replay(self):
    if id(self) not in _mine:  # the baseline's and the producer's graphs
        torch.cuda._sleep(100_000)  # ~50 µs at 1.98 GHz, inside their events
    return _replay(self)


torch.cuda.CUDAGraph.capture_begin = _capture_begin
torch.cuda.CUDAGraph.capture_end = _capture_end
torch.cuda.CUDAGraph.replay = _slow_replay


@variant_family(name="evil.copy", ops=("matmul", "matmul_bias_add"), devices=("cuda",),
                dtypes=("f16", "bf16"))
def copy_of_cublas(spec, params, device):
    kernel = _cublas.build(spec, params, device)

    def run(inputs, out):
        if _capturing:
            _mine.add(id(_capturing[-1]))
        kernel(inputs, out)

    return run


FAMILIES = (copy_of_cublas,)
PY
mkdir -p "$OUT"
for src in ${SRCS:-src .oldmain/src}; do
  name=$(echo "$src" | tr -c 'a-zA-Z0-9\n' '_')
  ( cd "$work" && PYTHONPATH="$here/$src" timeout 200 python3 -m matprobe run --plugin slow_others \
      --device cuda --op matmul --variants 'evil.*' 'torch.matmul' --db "$work/$name.sqlite" \
      > "$OUT/demo_$name.txt" 2>&1 )
  echo "== $src"
  PYTHONPATH="$here/$src" python3 - "$work/$name.sqlite" <<'PY'
import sys
from matprobe.run.store import ResultStore
with ResultStore(sys.argv[1], read_only=True) as store:
    for r in sorted(store.results(), key=lambda r: (r.spec_key, r.variant_id)):
        ratio = r.clocks.vs_baseline
        shown = f"{ratio.median:.3f} [{ratio.lo:.3f}-{ratio.hi:.3f}]" if ratio else "-"
        print(r.spec_key.split("|")[3:6], r.variant_id, r.status.value, shown, (r.reason or "")[:110])
PY
done | tee "$OUT/demo_summary.txt"
rm -rf "$work"
