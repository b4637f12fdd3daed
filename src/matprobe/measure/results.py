"""What one (spec, variant) measurement produces, independent of how it is stored.

These are plain frozen dataclasses with a JSON form; the worker builds them,
the store keeps them, the reports read them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    PASS = "pass"  # validated, timed
    FAIL = "fail"  # ran, wrong answer: shown loudly, never ranked
    ERROR = "error"  # did not run to the end: compile, launch, crash, timeout, OOM …


class ErrorKind(str, Enum):
    COMPILE = "compile"
    LAUNCH = "launch"  # launch failure or out of resources (registers, shared memory)
    CRASH = "crash"  # the worker process died (illegal address, segfault)
    TIMEOUT = "timeout"
    OOM = "oom"
    EXCEPTION = "exception"  # any other Python exception in the variant
    #: code in the worker replaced a function the judge or the baseline runs
    #: (:mod:`matprobe.measure.tamper`): no verdict is taken there
    TAMPER = "tamper"


@dataclass(frozen=True)
class ErrorMetrics:
    """Worst figures over all validation trials, and the tolerances they met or not."""

    max_abs: float
    max_rel: float  # |out − ref| / max(|ref|, floor); floor documented in validate.py
    norm_rel: float  # ‖out − ref‖₂ / ‖ref‖₂
    nonfinite: int  # NaN or Inf outputs
    tol_norm: float
    tol_rel: float
    trials: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ErrorMetrics:
        def num(key: str) -> float:
            value = data[key]
            return math.nan if value is None else float(value)  # null: NaN lost by a JSON writer

        return cls(
            num("max_abs"),
            num("max_rel"),
            num("norm_rel"),
            int(data["nonfinite"]),
            num("tol_norm"),
            num("tol_rel"),
            int(data["trials"]),
        )


@dataclass(frozen=True)
class ClockStats:
    """One clock's per-call times in microseconds: the summary and the raw samples."""

    median_us: float
    p10_us: float
    p90_us: float
    samples: tuple[float, ...] = ()
    #: calls behind each sample (a graph replay covers many back-to-back calls)
    calls_per_sample: int = 1

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def spread(self) -> float:
        """(p90 − p10) / median: the noise figure the stop rule watches."""
        return (self.p90_us - self.p10_us) / self.median_us if self.median_us > 0 else math.inf

    @classmethod
    def from_samples(cls, samples_us: Sequence[float], calls_per_sample: int = 1) -> ClockStats:
        import numpy as np

        values = np.asarray(samples_us, dtype=np.float64)
        if values.size == 0:
            raise ValueError("no samples")
        p10, median, p90 = np.percentile(values, [10, 50, 90])
        return cls(
            float(median), float(p10), float(p90), tuple(float(v) for v in values), calls_per_sample
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "median_us": self.median_us,
            "p10_us": self.p10_us,
            "p90_us": self.p90_us,
            "n": self.n,
            "calls_per_sample": self.calls_per_sample,
            "samples": list(self.samples),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClockStats:
        return cls(
            float(data["median_us"]),
            float(data["p10_us"]),
            float(data["p90_us"]),
            tuple(float(v) for v in data.get("samples", ())),
            int(data.get("calls_per_sample", 1)),
        )


@dataclass(frozen=True)
class Ratio:
    """Candidate ÷ baseline device time, measured interleaved (A B A B … in one
    process, on the same card, with the same inputs), with a confidence interval.

    ``median`` is the median of the per-round ratios; ``lo``/``hi`` bound it at
    ``confidence`` (a distribution-free interval from order statistics: timing
    data is not normal). ``baseline_us`` is the baseline's median in the same
    rounds — the figure the ratio is relative to.
    """

    baseline_id: str
    median: float
    lo: float
    hi: float
    n: int  # rounds
    baseline_us: float
    confidence: float = 0.95
    samples: tuple[float, ...] = ()  # baseline device µs, one per round

    def below(self, line: float) -> bool:
        """Whether the whole interval is under ``line`` (a target is met)."""
        return self.hi < line

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline_id": self.baseline_id,
            "median": self.median,
            "lo": self.lo,
            "hi": self.hi,
            "n": self.n,
            "baseline_us": self.baseline_us,
            "confidence": self.confidence,
            "samples": list(self.samples),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ratio:
        return cls(
            str(data["baseline_id"]),
            float(data["median"]),
            float(data["lo"]),
            float(data["hi"]),
            int(data["n"]),
            float(data["baseline_us"]),
            float(data.get("confidence", 0.95)),
            tuple(float(v) for v in data.get("samples", ())),
        )


@dataclass(frozen=True)
class Clocks:
    """The three clocks (DESIGN.md §4); any may be missing (CPU, interpreter, flag off)."""

    #: per-call device time after a different producer kernel (see timing.py), rotating
    #: cold inputs
    device: ClockStats | None = None
    hot: ClockStats | None = None  # graph replay, one input set (L2-resident)
    host: ClockStats | None = None  # one eager call + sync, wall clock
    kernel: ClockStats | None = None  # profiler kernel durations (cross-check)
    #: why a clock is missing or untrustworthy, e.g. "interpreted: not a performance figure"
    notes: tuple[str, ...] = ()
    #: device time relative to the spec's baseline, measured interleaved with it
    vs_baseline: Ratio | None = None
    #: GPU state around the timing (SM clock MHz before/after, throttle reasons)
    gpu_state: Mapping[str, str] = field(default_factory=dict)
    #: outputs of timed calls (device, hot and host clocks) judged against float64:
    #: all of them — a PASS with timed clocks needs every one to pass
    judged: int = 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"notes": list(self.notes), "judged": self.judged}
        for name in ("device", "hot", "host", "kernel"):
            value = getattr(self, name)
            out[name] = value.to_dict() if value is not None else None
        out["vs_baseline"] = self.vs_baseline.to_dict() if self.vs_baseline else None
        out["gpu_state"] = dict(self.gpu_state)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Clocks:
        def clock(name: str) -> ClockStats | None:
            value = data.get(name)
            return ClockStats.from_dict(value) if value else None

        return cls(
            clock("device"),
            clock("hot"),
            clock("host"),
            clock("kernel"),
            tuple(data.get("notes", ())),
            Ratio.from_dict(data["vs_baseline"]) if data.get("vs_baseline") else None,
            {str(k): str(v) for k, v in (data.get("gpu_state") or {}).items()},
            int(data.get("judged", 0)),
        )


@dataclass(frozen=True)
class PairResult:
    """The outcome of one variant on one spec on one device under one timing policy.

    ``(spec_key, variant_id, fingerprint, device, policy)`` identifies it in the
    store: change any of them and the pair is measured again.
    """

    spec_key: str
    variant_id: str  # "family/param_tag", e.g. "triton.gemv_nt/bn64_bk128_w4"
    family: str
    params: Mapping[str, Any]
    fingerprint: str  # hash of the variant's source and parameters
    device: str  # device fingerprint (name, capability, driver, library versions)
    policy: str  # timing/validation policy fingerprint
    status: Status
    reason: str = ""  # why FAIL or ERROR, one line
    error_kind: ErrorKind | None = None
    metrics: ErrorMetrics | None = None
    clocks: Clocks = field(default_factory=Clocks)
    baseline: bool = False
    run_id: int | None = None
    measured_at: str = ""  # RFC 3339, UTC
    #: the rounding of x its family declared (``VariantFamily.activation_quant``):
    #: judged against a reference that applies it
    activation_quant: str | None = None
    #: by path, the hash of every source file the measuring process had loaded as a
    #: module from outside the standard library, the installed packages and matprobe
    #: (``fingerprint.loaded_sources``): a result whose files changed is stale
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # No empty results: each status carries what explains it (the original
        # harness once cached a pipeline error as an empty result).
        if self.status is Status.PASS and self.metrics is None:
            raise ValueError("a PASS result needs its validation metrics")
        if self.status is Status.FAIL and not self.reason:
            raise ValueError("a FAIL result needs a reason")
        if self.status is Status.ERROR and (self.error_kind is None or not self.reason):
            raise ValueError("an ERROR result needs an error kind and a reason")
        if self.status is not Status.ERROR and self.error_kind is not None:
            raise ValueError("only ERROR results carry an error kind")
        object.__setattr__(self, "params", dict(self.params))
        object.__setattr__(self, "sources", dict(self.sources))

    @property
    def ranked(self) -> bool:
        """Validated results with a device time take part in rankings."""
        return self.status is Status.PASS and self.clocks.device is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec_key": self.spec_key,
            "variant_id": self.variant_id,
            "family": self.family,
            "params": dict(self.params),
            "fingerprint": self.fingerprint,
            "device": self.device,
            "policy": self.policy,
            "status": self.status.value,
            "reason": self.reason,
            "error_kind": self.error_kind.value if self.error_kind else None,
            "metrics": self.metrics.to_dict() if self.metrics else None,
            "clocks": self.clocks.to_dict(),
            "baseline": self.baseline,
            "run_id": self.run_id,
            "measured_at": self.measured_at,
            "activation_quant": self.activation_quant,
            "sources": dict(self.sources),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PairResult:
        return cls(
            spec_key=data["spec_key"],
            variant_id=data["variant_id"],
            family=data["family"],
            params=dict(data.get("params", {})),
            fingerprint=data["fingerprint"],
            device=data["device"],
            policy=data["policy"],
            status=Status(data["status"]),
            reason=data.get("reason", ""),
            error_kind=ErrorKind(data["error_kind"]) if data.get("error_kind") else None,
            metrics=ErrorMetrics.from_dict(data["metrics"]) if data.get("metrics") else None,
            clocks=Clocks.from_dict(data.get("clocks", {})),
            baseline=bool(data.get("baseline", False)),
            run_id=data.get("run_id"),
            measured_at=data.get("measured_at", ""),
            activation_quant=data.get("activation_quant"),
            sources={str(k): str(v) for k, v in (data.get("sources") or {}).items()},
        )
