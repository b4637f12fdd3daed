"""What a token run found: one :class:`ModeResult` per mode (its validation, its
samples on both clocks, its matmul share) and the :class:`TokenResult` around
them, which the report prints and writes as JSON."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from matprobe.errors import MatprobeError
from matprobe.profile.models import ModelConfig
from matprobe.token.floor import ByteFloor
from matprobe.token.modes import BASELINE, Mode
from matprobe.token.timing import KernelCount
from matprobe.token.validate import LogitError, Tolerance


def _median(samples: list[float]) -> float | None:
    """The median of a mode's samples (of an even count, the mean of the middle two);
    None when it has none."""
    return float(np.median(np.asarray(samples))) if samples else None


@dataclass
class ModeResult:
    """One mode's row: its validation and its samples (µs, one a round)."""

    mode: Mode
    status: str  # PASS, FAIL, ERROR, or UNCHECKED (matmuls left out: nothing to check)
    reason: str = ""
    error: LogitError | None = None
    kernels: KernelCount | None = None
    #: the headline clock's samples: back-to-back windows on CUDA, the host clock
    #: around an eager call on the CPU
    samples_us: list[float] = field(default_factory=list)
    #: on CUDA: one replay after a sync, between two events (the graph's launch in it)
    latency_samples_us: list[float] = field(default_factory=list)
    #: per round: this mode's time minus its matmul-less twin's in the same round
    share_samples_us: list[float] = field(default_factory=list)
    #: timed replays whose logits were judged against float64 (each on a fresh input)
    judged: int = 0

    @property
    def timed(self) -> bool:
        return bool(self.samples_us)

    def percentile(self, pct: float) -> float | None:
        if not self.samples_us:
            return None
        return float(np.percentile(np.asarray(self.samples_us), pct))

    @property
    def latency_us(self) -> float | None:
        """The median of one replay after a sync (CUDA only)."""
        return _median(self.latency_samples_us)

    @property
    def median_us(self) -> float | None:
        return self.percentile(50)

    @property
    def tokens_per_s(self) -> float | None:
        median = self.median_us
        return 1e6 / median if median else None

    @property
    def share_us(self) -> float | None:
        """The matmul share: the median paired difference to the twin."""
        return _median(self.share_samples_us)

    @property
    def share_is_noise(self) -> bool:
        """A share whose 95 % interval holds 0 or lies below it is noise, not a figure
        (a token whose matmuls cost less than its rounds' spread: ``-19657.3 µs`` was
        printed as one)."""
        share = self.share_us
        if share is None:
            return False
        samples = self.share_samples_us
        if len(samples) < 6:  # too few for an interval: the sign of the median decides
            return share <= 0
        from matprobe.stats import median_ci

        return median_ci(samples)[1] <= 0


@dataclass
class TokenResult:
    config: ModelConfig
    context: int
    dtype: str
    device_kind: str
    device_name: str
    versions: dict[str, str]
    rounds: int
    trials: int
    clock: str
    modes: list[ModeResult]
    skipped: list[tuple[str, str]]
    notes: list[str]
    baseline_bound: Tolerance
    tolerance: Tolerance | None
    floor: ByteFloor

    def get(self, name: str) -> ModeResult | None:
        return next((r for r in self.modes if r.mode.name == name), None)

    @property
    def baseline(self) -> ModeResult:
        found = self.get(BASELINE)
        if found is None:
            raise MatprobeError("the baseline did not run")
        return found

    def share_ratio(self, name: str, base_name: str = BASELINE) -> float | None:
        """A mode's matmul share over the eager baseline's (or ``base_name``'s)."""
        mine, base = self.get(name), self.get(base_name)
        if mine is None or base is None or mine.share_us is None or not base.share_us:
            return None
        if mine.share_is_noise or base.share_is_noise:
            return None
        return mine.share_us / base.share_us

    def time_ratio(self, name: str, other: str) -> tuple[float, float, float] | None:
        """(median, p10, p90) of the per-round ratios of ``name``'s token time to
        ``other``'s (both timed in the same rounds), or None."""
        mine, theirs = self.get(name), self.get(other)
        if mine is None or theirs is None or not mine.timed or not theirs.timed:
            return None
        ratios = np.asarray(mine.samples_us) / np.asarray(theirs.samples_us)
        p10, p50, p90 = np.percentile(ratios, [10, 50, 90])
        return float(p50), float(p10), float(p90)
