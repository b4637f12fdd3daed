"""A store's past: its runs, and how one spec's best variant and baseline moved.

:func:`list_runs` gives every run with its device, date, versions, timing
policy, status and pairs (those it measured itself, and those its report
showed, cached ones included, where the run kept its report).
:func:`spec_trend` follows one spec over the runs that measured it: our best
validated variant's device time, the baseline's, and their interleaved ratio
— each run judged as its own report judged it (:mod:`stored_report`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from matprobe.errors import MatprobeError
from matprobe.measure.device import DeviceInfo
from matprobe.measure.results import ClockStats, Ratio
from matprobe.report.cells import ratio_cell
from matprobe.report.stored_report import load_report
from matprobe.report.tables import md_table, plain_table
from matprobe.run.store import ResultStore
from matprobe.safetext import md_safe, term_safe
from matprobe.spec import MatmulSpec


@dataclass(frozen=True)
class RunSummary:
    id: int
    started_at: str
    finished_at: str | None
    status: str
    device: str  # "NVIDIA H100 80GB HBM3 (cuda)"
    versions: dict[str, str]
    policies: tuple[str, ...]
    measured: int  # results this run measured itself
    passed: int
    failed: int
    errors: int
    #: pairs its report showed (measured + cached); None when it kept no report
    reported: int | None
    source: str
    command: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "status": self.status,
            "device": self.device,
            "versions": dict(self.versions),
            "policies": list(self.policies),
            "measured": self.measured,
            "pass": self.passed,
            "fail": self.failed,
            "error": self.errors,
            "reported": self.reported,
            "source": self.source,
            "command": self.command,
        }


def list_runs(store: ResultStore) -> list[RunSummary]:
    """Every run in ``store``, oldest first."""
    counts = store.run_result_counts()
    summaries = []
    for run in store.runs():
        mine = counts.get(run.id, {})
        record = store.run_report(run.id)
        device = DeviceInfo.from_dict(run.environment.get("device") or {})
        if record is not None and isinstance(record.get("policy"), dict):
            policies: tuple[str, ...] = (str(record["policy"].get("fingerprint", "?")),)
        else:
            policies = tuple(
                sorted(k.removeprefix("policy:") for k in mine if k.startswith("policy:"))
            )
        reported = (
            sum(len(entry.get("results", ())) for entry in record.get("specs", ()))
            if record is not None
            else None
        )
        summaries.append(
            RunSummary(
                id=run.id,
                started_at=run.started_at,
                finished_at=run.finished_at,
                status=run.status,
                device=f"{device.name} ({device.kind})",
                versions=dict(device.versions),
                policies=policies,
                measured=sum(mine.get(s, 0) for s in ("pass", "fail", "error")),
                passed=mine.get("pass", 0),
                failed=mine.get("fail", 0),
                errors=mine.get("error", 0),
                reported=reported,
                source=str(run.environment.get("source", "")),
                command=run.command,
            )
        )
    return summaries


@dataclass(frozen=True)
class TrendPoint:
    """One run's figures for a spec."""

    run_id: int
    started_at: str
    device: str
    best_id: str | None
    best: ClockStats | None
    baseline_id: str | None
    baseline: ClockStats | None
    ratio: Ratio | None  # best ÷ baseline, interleaved, where measured

    def to_dict(self) -> dict[str, Any]:
        def clock(stats: ClockStats | None) -> dict[str, Any] | None:
            if stats is None:
                return None
            return {
                "median_us": stats.median_us,
                "p10_us": stats.p10_us,
                "p90_us": stats.p90_us,
                "n": stats.n,
            }

        return {
            "run_id": self.run_id,
            "started_at": self.started_at,
            "device": self.device,
            "best": self.best_id,
            "best_device_us": clock(self.best),
            "baseline": self.baseline_id,
            "baseline_device_us": clock(self.baseline),
            # the ratio's figures without its per-round samples (the store has them)
            "best_vs_baseline": {**self.ratio.to_dict(), "samples": []} if self.ratio else None,
        }


def spec_key_of(text: str) -> str:
    """The canonical key of a spec given as text (spacing and key order are free)."""
    return MatmulSpec.parse(text).key()


def _dtype_free(key: str) -> str | None:
    """``key`` without its dtype (None for a key this version cannot read)."""
    try:
        return replace(MatmulSpec.parse(key), dtype=None).key()
    except MatprobeError:
        return None


def _shared_pairs(a: MatmulSpec, key: str) -> int:
    try:
        b = MatmulSpec.parse(key)
    except MatprobeError:
        return 0
    return len(set(a.items()) & set(b.items())) if a.op == b.op else 0


def _not_measured(store: ResultStore, spec: MatmulSpec, stored: Sequence[str]) -> str:
    """Why ``spec`` has no trend, and what the store holds instead: the same shape
    under other dtypes (a profile's own keys, as ``matprobe analyze`` prints them, may
    name none), else the nearest key, else that the store holds no results."""
    key = spec.key()
    said = f"no run in {store.path} measured {key}"
    bare = replace(spec, dtype=None).key()
    others = [k for k in stored if k != key and _dtype_free(k) == bare]
    if others:
        which = "stored with dtype" if spec.dtype is None else "stored as"
        return f"{said}; {which}: {', '.join(others)} (give one as --spec)"
    if not stored:
        return f"{said}: the store holds no results"
    # The nearest key: most key=value pairs in common beyond the op (none: no hint).
    near = max(stored, key=lambda k: (k != key, _shared_pairs(spec, k), k))
    close = near != key and _shared_pairs(spec, near) > 1
    hint = f"nearest stored key: {near}; " if close else ""
    return (
        f"{said} ({hint}{len(stored)} spec keys are stored: `matprobe report` shows "
        "a run's keys as --spec takes them)"
    )


def resolve_spec_key(store: ResultStore, text: str) -> tuple[str, str | None]:
    """The stored spec key ``text`` names, and a note when it is not ``text``'s own.

    A key without a dtype (as a profile, or ``matprobe analyze``, writes it) whose
    shape is stored under one dtype is that key; under several, or none,
    it is a :class:`MatprobeError` that names the keys stored. Every key in a message
    is the store's text, shown through :func:`term_safe`.
    """
    spec = MatmulSpec.parse(text)
    key = spec.key()
    stored = store.spec_keys()
    if key in stored:
        return key, None
    if spec.dtype is None:
        bare = spec.key()
        others = [k for k in stored if _dtype_free(k) == bare]
        if len(others) == 1:
            (only,) = others
            return only, term_safe(f"{key} names no dtype: showing {only}, its one dtype stored")
    raise MatprobeError(term_safe(_not_measured(store, spec, stored)))


def spec_trend(
    store: ResultStore, spec_key: str, *, known_peers: Collection[str] = ()
) -> list[TrendPoint]:
    """Per run that has ``spec_key`` (oldest first): its best own variant and baseline."""
    spec = MatmulSpec.parse(spec_key)
    key = spec.key()
    points = []
    for run in store.runs():
        report = load_report(store, run.id, spec_key=key, known_peers=known_peers)
        section = next((s for s in report.sections if s.spec.key() == key), None)
        if section is None or not section.rows:
            continue
        best, base = section.best_row, None
        for row in section.rows:
            if row.is_baseline and row.timed:
                base = row
        points.append(
            TrendPoint(
                run_id=run.id,
                started_at=run.started_at,
                device=f"{report.device.name} ({report.device.kind})",
                best_id=section.best_id,
                best=best.result.clocks.device if best is not None else None,
                baseline_id=base.result.variant_id if base is not None else section.baseline_id,
                baseline=base.result.clocks.device if base is not None else None,
                ratio=section.best_ratio,
            )
        )
    if not points:
        raise MatprobeError(term_safe(_not_measured(store, spec, store.spec_keys())))
    return points


# ---- rendering ------------------------------------------------------------------------

RUN_HEADERS = [
    "run",
    "started (UTC)",
    "status",
    "device",
    "policy",
    "pairs",
    "pass",
    "fail",
    "error",
    "versions",
]
TREND_HEADERS = [
    "run",
    "started (UTC)",
    "device",
    "best variant",
    "best µs",
    "baseline µs",
    "best ÷ baseline",
]


def _when(stamp: str) -> str:
    return stamp.replace("T", " ")[:19]


def _run_cells(run: RunSummary) -> list[str]:
    pairs = str(run.measured) + ("" if run.reported is None else f"/{run.reported}")
    return [
        str(run.id),
        _when(run.started_at),
        run.status,
        run.device,
        ", ".join(run.policies) or "-",
        pairs,
        str(run.passed),
        str(run.failed),
        str(run.errors),
        ", ".join(f"{k} {v}" for k, v in sorted(run.versions.items())),
    ]


def _clock_cell(stats: ClockStats | None) -> str:
    if stats is None:
        return "-"
    return f"{stats.median_us:.2f} ({stats.p10_us:.2f}–{stats.p90_us:.2f})"


def _trend_cells(p: TrendPoint) -> list[str]:
    if p.ratio is not None:
        versus = ratio_cell(p.ratio)
    elif p.best is not None and p.baseline is not None:
        versus = f"{p.best.median_us / p.baseline.median_us:.2f}× (not interleaved)"
    else:
        versus = "-"
    return [
        str(p.run_id),
        _when(p.started_at),
        p.device,
        p.best_id or "-",
        _clock_cell(p.best),
        (p.baseline_id or "-") + " " + _clock_cell(p.baseline),
        versus,
    ]


RUNS_TITLE = "pairs = measured by the run / shown in its report (cached ones included)"
TREND_TITLE = (
    "device µs per call, median (p10–p90); best = our fastest validated variant, never a "
    "peer nor the baseline"
)


@dataclass(frozen=True)
class History:
    """What ``matprobe history`` shows: the runs, and a spec's trend when asked for."""

    store: str
    runs: Sequence[RunSummary]
    spec_key: str | None = None
    trend: Sequence[TrendPoint] = ()


def render_history_text(h: History) -> str:
    out = [term_safe(f"{len(h.runs)} runs in {h.store} ({RUNS_TITLE}):")]
    out.append(plain_table(RUN_HEADERS, [_run_cells(r) for r in h.runs]))
    if h.spec_key is not None:
        out += ["", term_safe(f"trend of {h.spec_key} ({TREND_TITLE}):")]
        out.append(plain_table(TREND_HEADERS, [_trend_cells(p) for p in h.trend]))
    return "\n".join(out) + "\n"


def render_history_markdown(h: History) -> str:
    out = [
        "# matprobe history",
        "",
        md_safe(f"{len(h.runs)} runs in {h.store} ({RUNS_TITLE})."),
        "",
    ]
    out.append(md_table(RUN_HEADERS, [_run_cells(r) for r in h.runs]))
    if h.spec_key is not None:
        out += ["", f"## Trend of {md_safe(h.spec_key)}", "", md_safe(TREND_TITLE) + ".", ""]
        out.append(md_table(TREND_HEADERS, [_trend_cells(p) for p in h.trend]))
    return "\n".join(out) + "\n"


def history_json(h: History) -> dict[str, Any]:
    data: dict[str, Any] = {"store": h.store, "runs": [r.to_dict() for r in h.runs]}
    if h.spec_key is not None:
        data["spec_key"] = h.spec_key
        data["trend"] = [p.to_dict() for p in h.trend]
    return data
