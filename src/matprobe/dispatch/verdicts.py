"""A table's winners held to the verdicts a store holds (``token --table``).

A dispatch table is a JSON file: anyone can write one that names a kernel no
run ever judged, or edit an entry to name another grid point. An engine that
loads a table trusts whoever wrote it; matprobe's own token check does not.
Before a table mode runs, every entry that is not the baseline must match a
stored PASS of the same spec and variant, measured from the code installed
now (the variant's fingerprint: its family's source and its parameters), under
the table's timing policy, with none of the files its process ran changed since.
"""

from __future__ import annotations

from pathlib import Path

from matprobe.dispatch.table import DispatchTable, Entry
from matprobe.measure.fingerprint import changed_sources
from matprobe.measure.results import PairResult, Status
from matprobe.measure.variants import Registry
from matprobe.run.plugin_process import described_registry
from matprobe.run.store import ResultStore


def unjudged_entries(table: DispatchTable, store_path: Path) -> list[str]:
    """Why each non-baseline entry of ``table`` has no verdict in the store at
    ``store_path`` (empty: every winner was judged, from the code that would run now)."""
    if not any(e.family != table.baseline for e in table.entries):
        return []
    if not store_path.is_file():
        return [f"no result store at {store_path} holds its winners' verdicts"]
    registry = described_registry(plugins=table.plugins)  # the plugins imported in a child
    with ResultStore(store_path, read_only=True) as store:
        return _unjudged(table, store, registry)


def _unjudged(table: DispatchTable, store: ResultStore, registry: Registry) -> list[str]:
    names = {f.name for f in registry.families()}
    problems = []
    for entry in table.entries:
        if entry.family == table.baseline:
            continue
        if entry.family not in names:
            problems.append(f"{entry.variant_id} on {entry.spec}: no family {entry.family} here")
            continue
        grid = {name: (value,) for name, value in entry.params.items()}
        variants = registry.family(entry.family).variants(grid)
        if len(variants) != 1 or variants[0].id != entry.variant_id:
            problems.append(
                f"{entry.variant_id} on {entry.spec}: its parameters name another variant"
            )
            continue
        why = _why_unjudged(entry, variants[0].fingerprint, table.policy, store)
        if why:
            problems.append(f"{entry.variant_id} on {entry.spec}: {why}")
    return problems


def _why_unjudged(entry: Entry, fingerprint: str, policy: str, store: ResultStore) -> str | None:
    stored = store.history(entry.spec, entry.variant_id)
    if not stored:
        return "the store holds no result of it"
    current = [r for r in stored if r.fingerprint == fingerprint and r.policy == policy]
    if not current:
        return "the store's results of it were measured from other code or another policy"
    passed = [r for r in current if r.status is Status.PASS]
    if not passed:
        return f"its stored verdict is {current[-1].status.value.upper()}"
    if not any(_sources_unchanged(r) for r in passed):
        return "a file its PASS ran with has changed since"
    return None


def _sources_unchanged(result: PairResult) -> bool:
    return not changed_sources(dict(result.sources))
