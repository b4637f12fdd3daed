"""Where one pair's time goes on a GPU host: fp16 weight shapes of the
Qwen2.5-0.5B plan (``weights``) or its attention shapes (``attention``: a
batch of 14 heads over a short KV cache, ~1600 rotated input sets a sample)
measured with one Triton variant against cuBLAS, twice (the second time with
the seeded cases cached), under cProfile; the wall time of each and the
functions that took the most. Also how long one nvidia-smi query takes, and
the card's PCI id as torch and nvidia-smi give it.

    PYTHONPATH=src python3 benchmarks/pair_profile.py OUT_FILE [weights|attention]
"""

from __future__ import annotations

import cProfile
import io
import pstats
import subprocess
import sys
import time

from matprobe.measure.device import detect, nvidia_smi_id
from matprobe.measure.pair import PairContext, measure_pair_safely
from matprobe.measure.timing import TimingPolicy, gpu_clock_state
from matprobe.measure.variants import registry_with_plugins
from matprobe.spec import MatmulSpec

#: name → (spec, the candidate's family), per set of shapes
GEMV = "op=matmul | batch=1 | m=1 | tA=0 | tB=1 | dtype=f16"
ATTENTION = (
    "op=matmul_alpha_beta_cache | batch=14 | m=1 | accumulate=1 | beta=0.0000 | cache=1 "
    "| dtype=f16 | strided_batch=true"
)
SHAPES = {
    "weights": {
        "lm_head": (f"{GEMV} | n=151936 | k=896", "triton.gemv_decode"),
        "gate_up": (f"{GEMV} | n=9728 | k=896", "triton.gemv_decode"),
        "down": (f"{GEMV} | n=896 | k=4864", "triton.gemv_decode"),
    },
    "attention": {
        "scores": (f"{ATTENTION} | n=86 | k=64 | tA=0 | tB=1 | alpha=0.1250", "triton.attn_bmv"),
        "values": (f"{ATTENTION} | n=64 | k=65 | tA=0 | tB=0 | alpha=1.0000", "triton.gemv_tn"),
    },
}


def main() -> None:
    out = open(sys.argv[1], "w")  # noqa: SIM115
    device = detect("cuda")
    ctx = PairContext(device, TimingPolicy(), None)
    registry = registry_with_plugins()
    base = registry.family("torch.matmul").variants()[0]
    t = time.perf_counter()
    state = gpu_clock_state(0)
    print(f"nvidia-smi query {time.perf_counter() - t:.3f} s: {state}", file=out)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv"],
                         capture_output=True, text=True, check=False).stdout  # fmt: skip
    print(f"torch id for 0: {nvidia_smi_id(0)}; nvidia-smi: {smi}", file=out)
    shapes = SHAPES[sys.argv[2] if len(sys.argv) > 2 else "weights"]
    for name, (text, family) in shapes.items():
        spec = MatmulSpec.parse(text)
        candidate = registry.family(family).variants()[0]
        for attempt in ("first", "cached"):
            prof = cProfile.Profile()
            start = time.perf_counter()
            prof.enable()
            result = measure_pair_safely(spec, candidate, ctx, base)
            prof.disable()
            wall = time.perf_counter() - start
            print(f"\n== {name} {attempt}: {wall:.2f} s, {result.status.value}", file=out)
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(22)
            print("\n".join(buf.getvalue().splitlines()[6:34]), file=out)
            out.flush()


if __name__ == "__main__":
    main()
