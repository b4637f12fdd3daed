"""A run's winners as dispatch tables: one per dtype the run judged.

Per spec, the entry is the report's best own variant (never a peer, never the
baseline) when it beats the baseline beyond noise — its interleaved ratio's
95 % interval lies wholly below 1, or, where no ratio was measured, its median
is below the baseline's — and otherwise the baseline itself: an engine loses
nothing by loading the table. Specs without a timed baseline have no entry.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Collection, Sequence
from pathlib import Path

from matprobe.dispatch.table import DispatchError, DispatchTable, Entry
from matprobe.measure.fingerprint import DIST_PREFIX, changed_sources
from matprobe.measure.variants import Registry
from matprobe.report.model import Report, Row, SpecSection


def _wins(row: Row, baseline_us: float) -> bool:
    ratio = row.ratio
    if ratio is not None:
        return ratio.hi < 1.0
    return row.device_us is not None and row.device_us < baseline_us


def _current(row: Row, registry: Registry) -> None:
    """The winner's code must be the code installed now: a table's fingerprints are
    this process's, so a result measured with other code cannot go in."""
    result = row.result
    family = registry.family(result.family)
    (variant,) = family.variants({name: (value,) for name, value in result.params.items()})
    if variant.fingerprint != result.fingerprint:
        raise DispatchError(
            f"{result.variant_id} on {result.spec_key} was measured with code that has "
            "changed since (its fingerprint differs): re-run it, then export"
        )
    if changed := changed_sources(dict(result.sources)):
        raise DispatchError(
            f"{result.variant_id} on {result.spec_key} was measured while source files "
            f"that have changed since were loaded ({', '.join(changed)}): re-run it, then export"
        )


def _judged_apart(row: Row, registry: Registry, witnessed: Collection[tuple[str, str]]) -> None:
    """A plugin's winner must have stood before the run's witness (the judge apart,
    ``matprobe.run.witness``): its row alone is what its own worker said."""
    result = row.result
    if registry.family(result.family).is_plugin and (
        (result.spec_key, result.variant_id) not in witnessed
    ):
        raise DispatchError(
            f"{result.variant_id} on {result.spec_key} is a plugin's kernel that this run "
            "did not judge apart (its rows come from its own worker; a run on this host's "
            "CPU or CUDA card judges them): re-run it, then export"
        )


def _entry(
    section: SpecSection,
    baseline_name: str,
    registry: Registry,
    witnessed: Collection[tuple[str, str]],
) -> Entry | None:
    base = next((r for r in section.rows if r.is_baseline and r.timed), None)
    if base is None or base.device_us is None:
        return None
    best = section.best_row
    if best is not None and best.device_us is not None and _wins(best, base.device_us):
        _current(best, registry)
        _judged_apart(best, registry, witnessed)
        ratio = best.ratio
        return Entry(
            spec=section.spec.key(),
            family=best.result.family,
            params=dict(best.result.params),
            variant_id=best.result.variant_id,
            us=best.device_us,
            baseline_us=base.device_us,
            ratio=ratio.median if ratio else None,
            ratio_ci=(ratio.lo, ratio.hi) if ratio else None,
        )
    return Entry(
        spec=section.spec.key(),
        family=baseline_name,
        params=dict(base.result.params),
        variant_id=base.result.variant_id,
        us=base.device_us,
        baseline_us=base.device_us,
        ratio=1.0,
    )


def tables_from_report(
    report: Report,
    registry: Registry,
    *,
    plugins: Sequence[str] = (),
    source: str = "",
    witnessed: Collection[tuple[str, str]] = (),
) -> list[DispatchTable]:
    """One table per dtype of the report's specs that have a timed baseline.
    ``witnessed``: the (spec key, variant id) of every plugin row the run's witness
    let stand — a plugin's winner must be one."""
    by_dtype: dict[str, list[Entry]] = {}
    sources: dict[str, dict[str, str]] = {}  # by dtype: the files the winners ran
    baseline_name = "torch.matmul"
    for section in report.sections:
        if section.baseline_id:
            baseline_name = section.baseline_id.split("/", 1)[0]
        entry = _entry(section, baseline_name, registry, witnessed)
        if entry is not None:
            dtype = section.spec.dtype or "f32"
            by_dtype.setdefault(dtype, []).append(entry)
            for row in section.rows:
                if row.result.variant_id == entry.variant_id:
                    files = row.result.sources.items()
                    sources.setdefault(dtype, {}).update(
                        (k, v) for k, v in files if not k.startswith(DIST_PREFIX)
                    )
    device = report.device
    created = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()
    tables = []
    for dtype, entries in by_dtype.items():
        used = sorted({e.family for e in entries})
        tables.append(
            DispatchTable(
                device={
                    "name": device.name,
                    "kind": device.kind,
                    "capability": list(device.capability) if device.capability else None,
                },
                versions={**device.versions, "driver": device.driver},
                dtype=dtype,
                policy=report.policy.fingerprint,
                families={name: registry.family(name).source_fingerprint for name in used},
                entries=tuple(entries),
                baseline=baseline_name,
                plugins=tuple(plugins),
                source={"run": report.run_id, "from": source, "created": created},
                sources=sources.get(dtype, {}),
            )
        )
    return tables


def table_filename(table: DispatchTable) -> str:
    """``<device>-<dtype>.json`` with the device name reduced to safe characters."""
    name = re.sub(r"[^A-Za-z0-9]+", "-", str(table.device.get("name", "device"))).strip("-")
    return f"{(name or 'device')[:60]}-{table.dtype}.json"


def write_tables(tables: Sequence[DispatchTable], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for table in tables:
        path = out_dir / table_filename(table)
        table.write(path)
        paths.append(path)
    return paths
