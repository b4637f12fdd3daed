"""Stores with hand-made runs, as ``matprobe run`` leaves them: results under their
keys, the run recorded, and its report kept (what ``report``, ``compare`` and
``history`` read). Timings are drawn from a seeded log-normal, so a test knows
what the truth is: the same distribution, or one 10 % slower.

Names are hostile where a profile, a manifest or a plugin could put them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from matprobe.measure.device import DeviceInfo
from matprobe.measure.results import (
    Clocks,
    ClockStats,
    ErrorKind,
    ErrorMetrics,
    PairResult,
    Ratio,
    Status,
)
from matprobe.measure.timing import TimingPolicy
from matprobe.report.build import SpecResults, assemble_report
from matprobe.report.model import Report
from matprobe.report.stored_report import report_record
from matprobe.run.store import ResultStore
from matprobe.spec import BackendTiming, MatmulSpec, Provenance
from matprobe.stats import Stats

#: What a name from a profile or a plugin could hold: markup, a code span, an ESC.
HOSTILE = "<script>alert(1)</script>`x`\x1b[2J"
#: The same, as it must be shown: ESC spelled out, never acted on.
HOSTILE_SHOWN = "<script>alert(1)</script>`x`\\x1b[2J"

BASELINE = "torch.matmul/default"
NUMPY = "numpy.matmul/default"
OURS = "triton.gemv_nt/bn1_bk1024_w8_pdl0"
PLUGIN = f"plugin.{HOSTILE}/default"
FAILING = "triton.splitk/s4"
CRASHING = "triton.gemm/bm64"
PEERS = ("torch.matmul", "numpy.matmul")

GEMV = "op=matmul | batch=1 | m=1 | n=896 | k=896 | tA=0 | tB=1 | dtype=f16"
BIAS = "op=matmul_bias_add | batch=1 | m=1 | n=1152 | k=896 | tA=0 | tB=0 | dtype=f16"
#: a spec key whose extra field carries markup (keys allow any value without spaces)
ODD = "op=matmul | batch=1 | m=1 | n=4864 | k=896 | tA=0 | tB=1 | dtype=f16 | note=<b>x</b>`"

DEVICE = DeviceInfo(
    kind="cuda",
    name=f"Test GPU {HOSTILE}",
    capability=(9, 0),
    driver="580.1",
    versions={"torch": "2.13.0", "triton": "3.6.0"},
)
PEAKS = {"read_gbps": 3000.0, "copy_gbps": 2900.0}


def profiled(key: str, count: int = 2280, avg_us: float = 230.0) -> MatmulSpec:
    """A spec with a production figure from a backend with a hostile name."""
    ms = avg_us / 1000
    stats = Stats(count, count * ms, ms, ms, ms, ms, ms)
    backend = BackendTiming(f"mps{HOSTILE}", stats)
    return MatmulSpec.parse(key).with_provenance(Provenance((backend,), "test profile"))


def samples(median_us: float, n: int, seed: int, noise: float = 0.02) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(v) for v in median_us * np.exp(rng.normal(0.0, noise, n))]


def passed(
    spec: MatmulSpec,
    variant_id: str,
    times_us: Sequence[float],
    *,
    run_id: int,
    baseline_us: float | None = None,
    fingerprint: str = "fp1",
) -> PairResult:
    family = variant_id.split("/")[0]
    clock = ClockStats.from_samples(times_us)
    ratio = None
    if baseline_us is not None and variant_id != BASELINE:
        median = clock.median_us / baseline_us
        ratio = Ratio(BASELINE, median, median * 0.99, median * 1.01, clock.n, baseline_us)
    return PairResult(
        spec_key=spec.key(),
        variant_id=variant_id,
        family=family,
        params={},
        fingerprint=fingerprint,
        device=DEVICE.fingerprint,
        policy="ptest",
        status=Status.PASS,
        metrics=ErrorMetrics(1e-4, 2e-4, 1e-4, 0, 4.9e-4, 1e-3, 3),
        clocks=Clocks(device=clock, vs_baseline=ratio),
        baseline=variant_id == BASELINE,
        run_id=run_id,
        measured_at="2026-11-26T10:00:00Z",
    )


def failed(spec: MatmulSpec, variant_id: str, *, run_id: int, crash: bool = False) -> PairResult:
    return PairResult(
        spec_key=spec.key(),
        variant_id=variant_id,
        family=variant_id.split("/")[0],
        params={},
        fingerprint="fp1",
        device=DEVICE.fingerprint,
        policy="ptest",
        status=Status.ERROR if crash else Status.FAIL,
        reason=f"trial 2/3: norm-wise error 0.3 > 4.9e-04 {HOSTILE}",
        error_kind=ErrorKind.CRASH if crash else None,
        metrics=None if crash else ErrorMetrics(1.0, 0.5, 0.3, 0, 4.9e-4, 1e-3, 3),
        run_id=run_id,
        measured_at="2026-11-26T10:00:00Z",
    )


@dataclass
class RunPlan:
    """What one hand-made run measures: per spec key, per variant, a median µs (the
    samples are drawn around it with ``noise``), and per variant a slowdown factor."""

    medians: Mapping[str, Mapping[str, float]]
    seed: int = 0
    noise: float = 0.02
    n: int = 20
    scale: Mapping[str, float] = field(default_factory=dict)
    #: FAILING and CRASHING on the GEMV spec
    failures: bool = True
    #: variants that fail validation in this run (on every spec)
    broken: frozenset[str] = frozenset()


STANDARD = RunPlan(
    {
        GEMV: {BASELINE: 4.3, NUMPY: 40.0, OURS: 2.6, PLUGIN: 3.9},
        BIAS: {BASELINE: 4.7, NUMPY: 45.0, OURS: 3.1},
        ODD: {BASELINE: 8.5, OURS: 5.1},
    }
)


def store_run(path: Path, plan: RunPlan = STANDARD) -> Report:
    """Record one run in the store at ``path`` (created if new) and keep its report."""
    with ResultStore(path) as store:
        run_id = store.start_run("matprobe run (test)", {"device": DEVICE.to_dict()})
        parts = []
        for i, (key, medians) in enumerate(plan.medians.items()):
            spec = profiled(key)
            base_us = medians.get(BASELINE)
            results = []
            for j, (variant_id, median) in enumerate(medians.items()):
                seed = plan.seed * 1000 + i * 50 + j
                times = samples(median * plan.scale.get(variant_id, 1.0), plan.n, seed, plan.noise)
                if variant_id in plan.broken:
                    results.append(failed(spec, variant_id, run_id=run_id))
                    continue
                results.append(passed(spec, variant_id, times, run_id=run_id, baseline_us=base_us))
            if plan.failures and key == GEMV:
                results.append(failed(spec, FAILING, run_id=run_id))
                results.append(failed(spec, CRASHING, run_id=run_id, crash=True))
            for result in results:
                store.put(result)
            unsupported = [("triton.attn_bmv/bn16", f"needs a batched op {HOSTILE}")]
            parts.append(SpecResults(spec, results, unsupported, BASELINE))
        report = assemble_report(
            parts,
            run_id=run_id,
            device=DEVICE,
            policy=TimingPolicy(),
            plan_summary=f"{sum(len(p.results) for p in parts)} pairs: all to run",
            seconds=12.5,
            peaks=PEAKS,
            tokens=95,
            source=f"profile {HOSTILE}",
            peers=PEERS,
        )
        store.put_run_report(run_id, report_record(report))
        store.finish_run(run_id, "done")
    return report
