"""The per-kernel floor of the device clock: an (almost) empty Triton kernel,
captured back to back in a CUDA graph exactly as the harness times variants,
with and without programmatic dependent launch (PDL).

    PYTHONPATH=src python3 benchmarks/floor_probe.py
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from matprobe.measure.timing import TimingPolicy, capture, time_graph


@triton.jit
def tiny_kernel(out_ptr, PDL: tl.constexpr):  # noqa: N803
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    pid = tl.program_id(0)
    tl.store(out_ptr + pid, pid.to(tl.float32))


def main() -> None:
    out = torch.zeros(4096, device="cuda")
    policy = TimingPolicy(budget_s=0.2)
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}")
    for programs in (1, 132, 1056, 4864):
        for pdl in (False, True):

            def call(_inputs: object, o: torch.Tensor, p: int = programs, f: bool = pdl) -> None:
                extra = {"launch_pdl": True} if f else {}
                tiny_kernel[(p,)](o, PDL=f, **extra)

            graph = capture(call, [None], out, calls=200, warmup=2)
            stats = time_graph(graph, policy)
            print(
                f"programs {programs:5d} pdl {int(pdl)}: {stats.median_us:6.3f} µs/kernel "
                f"(spread {stats.spread:.3f}, {stats.n} samples)"
            )


if __name__ == "__main__":
    main()
