"""Where a :class:`~matprobe.spec.MatmulSpec` came from: the production backends'
timings of its shape and the source it was read from (:class:`Provenance`).

It rides along with a spec and takes no part in its equality, so the same shape
read from two profiles compares equal and their provenances merge. Import these
from :mod:`matprobe.spec`, which re-exports them: they are part of the spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from matprobe.stats import Stats


@dataclass(frozen=True)
class BackendTiming:
    """Timing of one production backend for one shape, as a profile reports it."""

    backend: str
    stats: Stats

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, **self.stats.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BackendTiming:
        rest = {key: value for key, value in data.items() if key != "backend"}
        return cls(backend=str(data["backend"]), stats=Stats.from_dict(rest))


@dataclass(frozen=True)
class Provenance:
    """Where a spec came from: its production backends' timings and the source."""

    backends: tuple[BackendTiming, ...] = ()
    source: str = ""
    #: call count when there are no timings to count (shapes derived from a model
    #: config: calls per token)
    calls: int | None = None

    @property
    def count(self) -> int:
        if not self.backends:
            return self.calls or 0
        return sum(timing.stats.count for timing in self.backends)

    @property
    def total_ms(self) -> float:
        return sum(timing.stats.total_ms for timing in self.backends)

    @property
    def avg_ms(self) -> float:
        count = self.count
        return self.total_ms / count if count else 0.0

    @property
    def main_backend(self) -> str | None:
        """The backend that spent the most time on this shape."""
        if not self.backends:
            return None
        return max(self.backends, key=lambda timing: timing.stats.total_ms).backend

    def merged(self, other: Provenance) -> Provenance:
        sources = [s for s in (self.source, other.source) if s]
        calls = (
            None
            if self.calls is None and other.calls is None
            else ((self.calls or 0) + (other.calls or 0))
        )
        return Provenance(
            backends=self.backends + other.backends,
            source="; ".join(dict.fromkeys(sources)),
            calls=calls,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "calls": self.calls,
            "total_ms": self.total_ms,
            "avg_ms": self.avg_ms,
            "source": self.source,
            "backends": [timing.to_dict() for timing in self.backends],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Provenance:
        return cls(
            backends=tuple(BackendTiming.from_dict(b) for b in data.get("backends", ())),
            source=str(data.get("source", "")),
            calls=data.get("calls"),
        )
