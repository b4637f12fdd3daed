"""Duration statistics in the analyzer's own form.

Percentiles are numpy's default (linear interpolation at rank p/100·(n−1)),
which is also what metallic's ``analyze_jsonl.py`` computes by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

PERCENTILES: tuple[int, ...] = (95, 99)


def _percentile_sorted(values: np.ndarray, pct: float) -> float:
    """numpy's default (``linear``) percentile of already sorted values.

    Done by hand because ``np.percentile`` costs ~50 µs a call in overhead and
    a profile has thousands of groups; the tests hold it to ``np.percentile``.
    """
    rank = pct / 100.0 * (values.size - 1)
    lower = int(rank)
    upper = min(lower + 1, values.size - 1)
    weight = rank - lower
    low, high = float(values[lower]), float(values[upper])
    return low + (high - low) * weight


@dataclass(frozen=True)
class Stats:
    """Summary of a group of durations, in milliseconds."""

    count: int
    total_ms: float
    avg_ms: float
    min_ms: float
    max_ms: float
    p95_ms: float
    p99_ms: float

    @classmethod
    def empty(cls) -> Stats:
        return cls(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)

    @classmethod
    def from_us(cls, samples_us: Sequence[float] | np.ndarray) -> Stats:
        """Summarize durations given in microseconds."""
        values = np.sort(np.asarray(samples_us, dtype=np.float64))
        n = int(values.size)
        if n == 0:
            return cls.empty()
        total_us = float(values.sum())
        p95, p99 = (_percentile_sorted(values, p) for p in PERCENTILES)
        return cls(
            count=n,
            total_ms=total_us / 1000.0,
            avg_ms=total_us / n / 1000.0,
            min_ms=float(values[0]) / 1000.0,
            max_ms=float(values[-1]) / 1000.0,
            p95_ms=p95 / 1000.0,
            p99_ms=p99 / 1000.0,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "total_ms": self.total_ms,
            "avg_ms": self.avg_ms,
            "min_ms": self.min_ms,
            "max_ms": self.max_ms,
            "p95_ms": self.p95_ms,
            "p99_ms": self.p99_ms,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Stats:
        return cls(
            count=int(data["count"]),
            total_ms=float(data["total_ms"]),
            avg_ms=float(data["avg_ms"]),
            min_ms=float(data["min_ms"]),
            max_ms=float(data["max_ms"]),
            p95_ms=float(data["p95_ms"]),
            p99_ms=float(data["p99_ms"]),
        )

    def render(self, title: str, indent: int = 2) -> str:
        """One row exactly as the original analyzer prints it."""
        pad = " " * indent
        if self.count == 0:
            return f"{pad}{title}: no samples"
        return (
            f"{pad}{title}: count={self.count} | total={self.total_ms:.2f}ms | "
            f"avg={self.avg_ms:.3f}ms | min={self.min_ms:.3f}ms | "
            f"max={self.max_ms:.3f}ms | p95_ms={self.p95_ms:.3f}ms, p99_ms={self.p99_ms:.3f}ms"
        )


def median_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(median, lo, hi): the sample median and a distribution-free confidence
    interval for the population median from order statistics (the number of values
    below the median is Binomial(n, ½); timing data is not normal, so no mean ± σ).

    With too few values for the interval (n < 6 at 95 %), lo and hi are the
    smallest and largest value — an honest "we cannot tell" rather than a
    narrow figure."""
    import math

    ordered = np.sort(np.asarray(values, dtype=np.float64))
    n = ordered.size
    if n == 0:
        raise ValueError("no values")
    median = float(np.median(ordered))
    # Normal approximation to the binomial quantiles, with a continuity margin.
    z = {0.9: 1.645, 0.95: 1.96, 0.99: 2.576}.get(round(confidence, 2), 1.96)
    half = z * math.sqrt(n) / 2
    low_rank = math.floor(n / 2 - half)
    high_rank = math.ceil(n / 2 + half) - 1
    if low_rank < 0 or high_rank > n - 1:
        return median, float(ordered[0]), float(ordered[-1])
    return median, float(ordered[low_rank]), float(ordered[high_rank])
