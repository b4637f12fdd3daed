"""A run's report kept in its store, and rebuilt from it later (``matprobe report RUN``).

The store keeps each measured pair under its key, with the id of the run that
measured it (and, when a later run measures the same key again, the older row
apart: :meth:`~matprobe.run.store.ResultStore.results_as_of`). Which cached
pairs a run reused, the specs' production figures (their provenance), the
unsupported pairs and the token count live only in the run's memory. So at the
end of a run :func:`save_report` keeps a small *record* of its report — the
specs with their provenance, the keys of every result it showed (cached ones
included), the unsupported pairs with their reasons, device, policy, peaks,
notes — and :func:`load_report` joins that record with the stored results into
the same :class:`~matprobe.report.model.Report` the run printed.

A run recorded without a record (before this existed, or by another tool) is
rebuilt from the results it measured itself, with a note saying what is
missing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from matprobe.errors import MatprobeError
from matprobe.measure.device import DeviceInfo
from matprobe.measure.results import PairResult
from matprobe.measure.timing import TimingPolicy
from matprobe.report.build import SpecResults, assemble_report
from matprobe.report.model import NOT_JUDGED_APART_TAG, Report
from matprobe.run.store import ResultKey, ResultStore, RunRecord
from matprobe.spec import MatmulSpec

#: Bumped when the record's layout changes; older layouts are still read.
RECORD_FORMAT = 1


@dataclass(frozen=True)
class RecordedPolicy(TimingPolicy):
    """A stored run's timing policy: its settings as recorded and the fingerprint
    the run had — today's measurement code would hash the same settings to
    another fingerprint."""

    recorded_fingerprint: str = ""

    @property
    def fingerprint(self) -> str:
        return self.recorded_fingerprint or super().fingerprint


def report_record(report: Report) -> dict[str, Any]:
    """What :func:`load_report` needs to rebuild ``report``, as plain JSON."""
    peers = sorted({row.result.family for s in report.sections for row in s.rows if row.peer})
    return {
        "format": RECORD_FORMAT,
        "run_id": report.run_id,
        "device": report.device.to_dict(),
        "policy": {**asdict(report.policy), "fingerprint": report.policy.fingerprint},
        "plan": report.plan_summary,
        "seconds": report.seconds,
        "interrupted": report.interrupted,
        "peaks": dict(report.peaks) if report.peaks else None,
        "tokens": report.tokens,
        "source": report.source,
        "notes": list(report.notes),
        "peers": peers,
        "not_judged_apart": unjudged_of(report),
        "specs": [
            {
                "spec": section.spec.to_dict(),
                "baseline": section.baseline_id,
                "results": [
                    list(ResultKey.of_result(row.result).as_tuple()) for row in section.rows
                ],
                "unsupported": [list(pair) for pair in section.unsupported],
            }
            for section in report.sections
        ],
    }


def unjudged_of(report: Report) -> list[list[str]]:
    """[spec key, variant id] of every row tagged not judged apart: what a rebuilt
    report tags again (the tag is never taken from the row a record names)."""
    return [
        [row.result.spec_key, row.result.variant_id]
        for section in report.sections
        for row in section.rows
        if NOT_JUDGED_APART_TAG in row.tags
    ]


def _pairs(entries: Any) -> set[tuple[str, str]]:
    """(spec key, variant id) pairs from a stored list of two-item lists."""
    if not isinstance(entries, list):
        return set()
    return {(str(e[0]), str(e[1])) for e in entries if isinstance(e, list) and len(e) == 2}


def save_report(db: str | Path, report: Report) -> None:
    """Keep ``report``'s record in the store at ``db`` (the run's own store)."""
    with ResultStore(db) as store:
        store.put_run_report(report.run_id, report_record(report))


def load_report(
    store: ResultStore,
    run_id: int,
    *,
    spec_key: str | None = None,
    known_peers: Collection[str] = (),
) -> Report:
    """Run ``run_id``'s report, rebuilt from its record and the stored results
    (only the section of ``spec_key`` when given). ``known_peers`` names the peer
    families for a run without a record (its results do not say which are peers)."""
    run = store.run(run_id)
    if run is None:
        ids = [r.id for r in store.runs()]
        known = f"runs {ids[0]}–{ids[-1]}" if ids else "no runs"
        raise MatprobeError(f"{store.path} has no run {run_id} ({known})")
    record = store.run_report(run_id)
    if record is not None:
        return _from_record(store, run, record, spec_key)
    return _from_results(store, run, spec_key, known_peers)


def report_from_json(data: Mapping[str, Any]) -> Report:
    """A report from its JSON export (``report.json``, ``run --json``), which holds every
    result with its raw samples, the specs with their provenance and the run's notes."""
    try:
        parts, peers, unjudged = [], set(), set()
        for entry in data["specs"]:
            results = [PairResult.from_dict(r) for r in entry["results"]]
            peers |= {str(r["family"]) for r in entry["results"] if r.get("peer")}
            unjudged |= {
                (r.spec_key, r.variant_id)
                for r, raw in zip(results, entry["results"], strict=True)
                if NOT_JUDGED_APART_TAG in raw.get("tags", ())
            }
            unsupported = [(str(u["variant"]), str(u["reason"])) for u in entry["unsupported"]]
            spec = MatmulSpec.from_dict(entry["spec"])
            parts.append(SpecResults(spec, results, unsupported, entry.get("baseline")))
        report = assemble_report(
            parts, run_id=int(data["run_id"]), **_run_of(data), peers=peers, unjudged=unjudged
        )
        report.notes = [str(note) for note in data.get("notes", ())]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MatprobeError(f"not a matprobe report in JSON ({exc!r})") from None
    return report


def run_seconds(run: RunRecord) -> float:
    """How long the run took by its recorded start and end (0 when unfinished)."""
    if not run.finished_at:
        return 0.0
    try:
        start = datetime.fromisoformat(run.started_at.replace("Z", "+00:00"))
        end = datetime.fromisoformat(run.finished_at.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return max(0.0, (end - start).total_seconds())


def policy_from_dict(data: Mapping[str, Any], fingerprint: str) -> RecordedPolicy:
    known = {f.name for f in fields(TimingPolicy)}
    return RecordedPolicy(
        **{k: v for k, v in data.items() if k in known}, recorded_fingerprint=fingerprint
    )


def _run_of(data: Mapping[str, Any]) -> dict[str, Any]:
    """What a stored report and a JSON export both say of their run (the device, the
    policy, the plan, its time, the ceilings, calls per token), as
    :func:`~matprobe.report.build.assemble_report`'s keywords."""
    policy = data["policy"]
    return {
        "device": DeviceInfo.from_dict(data["device"]),
        "policy": policy_from_dict(policy, str(policy.get("fingerprint", ""))),
        "plan_summary": str(data.get("plan", "")),
        "seconds": float(data.get("seconds") or 0.0),
        "interrupted": bool(data.get("interrupted")),
        "peaks": data.get("peaks"),
        "tokens": data.get("tokens"),
    }


def _from_record(
    store: ResultStore, run: RunRecord, record: Mapping[str, Any], spec_key: str | None
) -> Report:
    try:
        entries = [e for e in record["specs"] if spec_key in (None, e["spec"]["key"])]
        keys_of = [[ResultKey(*map(str, key)) for key in e["results"]] for e in entries]
        stored = store.results_as_of((k for keys in keys_of for k in keys), run.id)
        parts = [
            SpecResults(
                MatmulSpec.from_dict(e["spec"]),
                [stored[k] for k in keys if k in stored],
                [(str(v), str(reason)) for v, reason in e["unsupported"]],
                e.get("baseline"),
            )
            for e, keys in zip(entries, keys_of, strict=True)
        ]
        report = assemble_report(
            parts,
            run_id=run.id,
            **_run_of(record),
            source=str(record.get("source", "")),
            peers=record.get("peers", ()),
            unjudged=_pairs(record.get("not_judged_apart")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise MatprobeError(
            f"{store.path}: the stored report of run {run.id} is unreadable ({exc!r})"
        ) from None
    # The run's own notes (its ceiling note included), not ones recomputed here.
    report.notes = [str(note) for note in record.get("notes", ())]
    missing = sum(len(keys) for keys in keys_of) - len(stored)
    if missing:
        report.notes.append(f"{missing} results of this run are no longer in the store")
    return report


def _from_results(
    store: ResultStore, run: RunRecord, spec_key: str | None, known_peers: Collection[str]
) -> Report:
    """A run with no stored report: its own measurements, grouped by spec."""
    results = store.results_of_run(run.id, spec_key)
    by_spec: dict[str, list[PairResult]] = {}
    for result in results:
        by_spec.setdefault(result.spec_key, []).append(result)
    parts = []
    for key, spec_results in by_spec.items():
        try:
            spec = MatmulSpec.parse(key)
        except MatprobeError:
            continue  # a key this version cannot read: nothing to draw it with
        baseline = next((r.family for r in spec_results if r.baseline), None)
        parts.append(SpecResults(spec, spec_results, (), baseline))
    env = run.environment
    policies = Counter(r.policy for r in results)
    report = assemble_report(
        parts,
        run_id=run.id,
        device=DeviceInfo.from_dict(env.get("device") or {}),
        policy=RecordedPolicy(
            recorded_fingerprint=policies.most_common(1)[0][0] if policies else "?"
        ),
        plan_summary=f"{len(results)} pairs measured by this run",
        seconds=run_seconds(run),
        interrupted=run.status == "interrupted",
        peaks=env.get("peaks"),
        source=str(env.get("source", "")),
        peers=known_peers,
        unjudged=_pairs(env.get("not_judged_apart")),
    )
    report.notes.append(
        "rebuilt from the results this run measured (it kept no report): pairs it took "
        "from the cache, unsupported pairs, the profile's production figures, calls per "
        "token and the timing policy's settings are not shown"
    )
    return report
