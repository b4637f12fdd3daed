"""A dispatch table: which kernel an engine should call for each matmul shape.

One JSON file per device and dtype, written from a run's winners
(:mod:`matprobe.dispatch.export`) and read by an engine through
:mod:`matprobe.dispatch.kernels`. Entries are keyed by the spec without its
``m`` (the op, batch, n, k, layout, alpha/beta, bias and dtype); a lookup for
another m takes the entry of the nearest m (in ratio), whose parameters are
then built for the asked spec — or refused by the family, where the baseline
serves instead.

The header says where the figures hold: the device (name, compute
capability), the versions (torch, triton, CUDA, driver), the harness's timing
policy and each family's source fingerprint. A table from another card, or
naming a family whose code has changed since, is refused with a message that
says what differs; other versions only warn (the kernels are the same code,
the figures may have moved).

Importing this module imports neither torch nor triton.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from matprobe.errors import MatprobeError, SpecError
from matprobe.measure.fingerprint import changed_sources
from matprobe.spec import MatmulSpec

#: The format tag in every table; a reader refuses another.
FORMAT = "matprobe.dispatch/1"

#: Versions compared between the table and the loading process (a warning each).
VERSION_KEYS = ("torch", "triton", "cuda", "driver")


class DispatchError(MatprobeError):
    """A table that cannot be used here: malformed, another card, stale code."""


def shape_key(spec: MatmulSpec) -> str:
    """The spec's key with ``m`` set to 1 and no provenance: what an entry is filed under."""
    return replace(spec, m=1, provenance=None).key()


@dataclass(frozen=True)
class Entry:
    """The winner of one spec — one of our families, or the baseline itself where
    nothing beat it beyond noise — with its parameters and the measured figures."""

    spec: str  # the spec key the winner was measured on
    family: str
    params: Mapping[str, Any]
    variant_id: str
    us: float  # the winner's device-clock median, µs per call
    baseline_us: float  # the baseline's, in the same run
    ratio: float | None = None  # interleaved ratio to the baseline (median)
    ratio_ci: tuple[float, float] | None = None

    @property
    def m(self) -> int:
        return MatmulSpec.parse(self.spec).m or 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "family": self.family,
            "params": dict(self.params),
            "variant_id": self.variant_id,
            "us": self.us,
            "baseline_us": self.baseline_us,
            "ratio": self.ratio,
            "ratio_ci": list(self.ratio_ci) if self.ratio_ci else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Entry:
        ci = data.get("ratio_ci")
        ratio = data.get("ratio")
        return cls(
            spec=MatmulSpec.parse(str(data["spec"])).key(),
            family=str(data["family"]),
            params=dict(data["params"]),
            variant_id=str(data["variant_id"]),
            us=_finite(data["us"], "us"),
            baseline_us=_finite(data["baseline_us"], "baseline_us"),
            ratio=None if ratio is None else _finite(ratio, "ratio"),
            ratio_ci=(_finite(ci[0], "ratio_ci"), _finite(ci[1], "ratio_ci")) if ci else None,
        )


def _finite(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} is {value!r}, not a finite number")
    if value < 0:
        raise ValueError(f"{name} is negative ({value!r})")
    return float(value)


@dataclass(frozen=True)
class DispatchTable:
    """The winners of one run on one device for one dtype."""

    device: Mapping[str, Any]  # name, kind, capability
    versions: Mapping[str, str]
    dtype: str
    policy: str  # the timing policy's fingerprint
    families: Mapping[str, str]  # family name → source fingerprint
    entries: tuple[Entry, ...]
    baseline: str = "torch.matmul"
    plugins: tuple[str, ...] = ()
    source: Mapping[str, Any] = field(default_factory=dict)  # store, run id, created
    #: the source files the winners' processes ran (``PairResult.sources``), by path
    sources: Mapping[str, str] = field(default_factory=dict)

    def lookup(self, spec: MatmulSpec) -> Entry | None:
        """The entry for ``spec``'s shape at the nearest m (ties: the smaller m)."""
        wanted = shape_key(spec)
        m = spec.m or 1
        matches = [e for e in self.entries if shape_key(MatmulSpec.parse(e.spec)) == wanted]
        if not matches:
            return None
        return min(matches, key=lambda e: (abs(math.log(e.m / m)), e.m))

    def predict_matmul_us(self, calls: Mapping[str, float]) -> tuple[float, float]:
        """Σ calls × µs over ``calls`` (spec key → calls per token): (baseline, table).
        Every spec the run judged has an entry (the baseline's own where it won), so
        a spec without one has no figure at all: it raises."""
        baseline = table = 0.0
        for key, count in calls.items():
            entry = self.lookup(MatmulSpec.parse(key))
            if entry is None:
                raise DispatchError(f"no entry for {key}: no figure to predict it from")
            baseline += count * entry.baseline_us
            table += count * entry.us
        return baseline, table

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "device": dict(self.device),
            "versions": dict(self.versions),
            "dtype": self.dtype,
            "policy": self.policy,
            "baseline": self.baseline,
            "plugins": list(self.plugins),
            "families": dict(self.families),
            "source": dict(self.source),
            "sources": dict(self.sources),
            "entries": [e.to_dict() for e in self.entries],
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "table") -> DispatchTable:
        if not isinstance(data, dict):
            raise DispatchError(f"{where}: not a dispatch table (a JSON object expected)")
        if data.get("format") != FORMAT:
            raise DispatchError(
                f"{where}: not a dispatch table of this matprobe (format "
                f"{str(data.get('format'))[:40]!r}, expected {FORMAT!r})"
            )
        try:
            entries = tuple(Entry.from_dict(e) for e in data["entries"])
            return cls(
                device=dict(data["device"]),
                versions={str(k): str(v) for k, v in dict(data["versions"]).items()},
                dtype=str(data["dtype"]),
                policy=str(data["policy"]),
                families={str(k): str(v) for k, v in dict(data["families"]).items()},
                entries=entries,
                baseline=str(data.get("baseline", "torch.matmul")),
                plugins=tuple(str(p) for p in data.get("plugins", ())),
                source=dict(data.get("source", {})),
                sources={str(k): str(v) for k, v in dict(data.get("sources", {})).items()},
            )
        except (KeyError, TypeError, ValueError, SpecError) as exc:
            raise DispatchError(f"{where}: malformed dispatch table ({exc})") from exc

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")


def load_table(path: str | Path) -> DispatchTable:
    """Read a table; a one-line :class:`DispatchError` for anything that is not one."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise DispatchError(f"{where}: cannot read ({exc.strerror or exc})") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DispatchError(f"{where}: not JSON ({exc})") from exc
    return DispatchTable.from_dict(data, where)


def table_problems(
    table: DispatchTable,
    *,
    device_name: str,
    capability: Sequence[int] | None,
    fingerprints: Mapping[str, str | None],
) -> list[str]:
    """Why ``table`` must not be used here (empty: usable). ``fingerprints`` are
    the source fingerprints of the families installed here (None: not installed)."""
    problems = []
    made_on = str(table.device.get("name", "?"))
    if made_on != device_name:
        problems.append(
            f"the table was measured on {made_on}, this device is {device_name}: "
            "its figures do not hold here (run matprobe run here and export again)"
        )
    made_cap = table.device.get("capability")
    if made_on == device_name and made_cap and capability and list(made_cap) != list(capability):
        problems.append(f"compute capability {made_cap} in the table, {list(capability)} here")
    for family in sorted({e.family for e in table.entries} - {table.baseline}):
        installed = fingerprints.get(family)
        if installed is None:
            problems.append(f"family {family} is not installed here (plugins: {table.plugins})")
        elif table.families.get(family) != installed:
            problems.append(
                f"family {family} has changed since the table was measured (fingerprint "
                f"{table.families.get(family)} in the table, {installed} here): re-run it"
            )
    # Files that exist here (a table from another machine names its own paths: the
    # families' fingerprints above are what holds across machines).
    here = {path: digest for path, digest in table.sources.items() if Path(path).is_file()}
    if changed := changed_sources(here):
        problems.append(
            f"source files its kernels ran with have changed since it was measured "
            f"({', '.join(changed)}): re-run them"
        )
    return problems


def version_warnings(table: DispatchTable, versions: Mapping[str, str]) -> list[str]:
    """Versions that differ between the table and here: the same kernels, other figures."""
    return [
        f"{key} {table.versions.get(key)} in the table, {versions.get(key)} here"
        for key in VERSION_KEYS
        if table.versions.get(key) != versions.get(key)
    ]
