"""Does a recording's place in a timing round change its time? The attention specs'
candidate/baseline ratios came out bimodal (0.8× or 1.25×, median between), while
their medians agreed with each other. This replays the three recordings of one
attention pair (producer P, P·candidate, P·baseline) for many rounds, in the
harness's rotating order, and prints each recording's µs by its place in the
round — then with an untimed replay of the producer before every timed one, and
with an untimed replay of the same recording before every timed one.

    PYTHONPATH=src python3 benchmarks/round_order_probe.py OUT_FILE
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict

from matprobe.measure.bench import bench_for
from matprobe.measure.device import detect
from matprobe.measure.sampling import recorder_for
from matprobe.measure.timing import TimingPolicy
from matprobe.measure.variants import registry_with_plugins
from matprobe.spec import MatmulSpec

SPECS = {
    "scores": (
        "op=matmul_alpha_beta_cache | batch=14 | m=1 | n=86 | k=64 | tA=0 | tB=1 | accumulate=1 "
        "| alpha=0.1250 | beta=0.0000 | cache=1 | dtype=f16 | strided_batch=true",
        "triton.attn_bmv",
    ),
    "o_proj": (
        "op=matmul | batch=1 | m=1 | n=896 | k=896 | tA=0 | tB=1 | dtype=f16",
        "triton.gemv_decode",
    ),
}
ROUNDS = 90


def main() -> None:
    out = open(sys.argv[1], "w")  # noqa: SIM115
    device = detect("cuda")
    policy = TimingPolicy()
    recorder = recorder_for("cuda")
    registry = registry_with_plugins()
    base_variant = registry.family("torch.matmul").variants()[0]
    for name, (text, family) in SPECS.items():
        spec = MatmulSpec.parse(text)
        bench = bench_for(spec, "cuda:0", device.l2_bytes, policy, recorder, kind="cuda")
        recordings = {"P": bench.producer}
        kept = []
        for label, variant in (("C", registry.family(family).variants()[0]), ("B", base_variant)):
            fn = variant.build(spec, device)
            outs = bench.outputs()
            kept.append(outs)  # the recording writes into them
            recordings[label] = recorder.record(bench.steps(fn, outs), 1)
        for warm in ("none", "producer", "self"):
            by_place: dict[tuple[str, int], list[float]] = defaultdict(list)
            ratios = []
            names = list(recordings)
            for index in range(ROUNDS):
                order = names[index % 3 :] + names[: index % 3]
                times = {}
                for n in order:
                    if warm != "none":
                        recorder.replay(recordings["P" if warm == "producer" else n])
                    times[n] = recorder.time_us(recordings[n])
                for place, n in enumerate(order):
                    by_place[(n, place)].append(times[n])
                ratios.append((times["C"] - times["P"]) / (times["B"] - times["P"]))
            print(
                f"== {name} ({bench.calls} calls a replay), untimed replay before each: {warm}",
                file=out,
            )
            for (n, place), values in sorted(by_place.items()):
                per_call = statistics.median(values) / bench.calls
                print(
                    f"  {n} at place {place}: median {per_call:.3f} µs/call over {len(values)}",
                    file=out,
                )
            deciles = statistics.quantiles(ratios, n=10)
            print(f"  ratio C/B deciles: {' '.join(f'{d:.3f}' for d in deciles)}", file=out)
            out.flush()


if __name__ == "__main__":
    main()
