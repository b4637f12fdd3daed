"""Where the pairs of one spec spend their time, by matprobe function: several
variants of one family measured against cuBLAS on a spec of the Qwen2.5-0.5B
plan (the first pair not profiled: compiles, draws), under cProfile; the wall
time a pair and the matprobe functions with the most cumulative time. Runs
with whichever matprobe is on PYTHONPATH (an older checkout's src gives the
before figure in the same call).

    PYTHONPATH=src python3 benchmarks/phase_profile.py OUT_FILE SHAPE [VARIANTS [all]]

``all``: every function, not matprobe's only; then the most time spent in each.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time

from matprobe.measure.device import detect
from matprobe.measure.pair import PairContext, measure_pair_safely
from matprobe.measure.timing import TimingPolicy
from matprobe.measure.variants import registry_with_plugins
from matprobe.spec import MatmulSpec

ATTENTION = (
    "op=matmul_alpha_beta_cache | batch=14 | m=1 | accumulate=1 | beta=0.0000 | cache=1 "
    "| dtype=f16 | strided_batch=true"
)
GEMV = "op=matmul | batch=1 | m=1 | tA=0 | tB=1 | dtype=f16"
SHAPES = {
    "scores": (f"{ATTENTION} | n=86 | k=64 | tA=0 | tB=1 | alpha=0.1250", "triton.attn_bmv"),
    "values": (f"{ATTENTION} | n=64 | k=65 | tA=0 | tB=0 | alpha=1.0000", "triton.gemv_tn"),
    "down": (f"{GEMV} | n=896 | k=4864", "triton.gemv_decode"),
}


def main() -> None:
    out = open(sys.argv[1], "a")  # noqa: SIM115
    name = sys.argv[2]
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    text, family = SHAPES[name]
    ctx = PairContext(detect("cuda"), TimingPolicy(), None)
    registry = registry_with_plugins()
    base = registry.family("torch.matmul").variants()[0]
    spec = MatmulSpec.parse(text)
    variants = registry.family(family).variants()[: count + 1]
    measure_pair_safely(spec, variants[0], ctx, base)  # compiles, draws, records the baseline
    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.enable()
    statuses = [measure_pair_safely(spec, v, ctx, base).status.value for v in variants[1:]]
    prof.disable()
    wall = (time.perf_counter() - start) / max(1, len(variants) - 1)
    print(
        f"\n== {name} ({family}, {len(statuses)} pairs): {wall:.3f} s a pair, {statuses}", file=out
    )
    buf = io.StringIO()
    restrict = () if len(sys.argv) > 4 and sys.argv[4] == "all" else ("matprobe",)
    stats = pstats.Stats(prof, stream=buf).sort_stats("cumulative")
    stats.print_stats(*restrict, 45)
    stats.sort_stats("tottime").print_stats(25)
    print("\n".join(buf.getvalue().splitlines()[6:]), file=out)
    out.flush()


if __name__ == "__main__":
    main()
