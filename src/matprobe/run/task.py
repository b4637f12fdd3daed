"""A pair to measure (:class:`Task`), and what of it crosses a process
boundary: plain data (:data:`TaskData`), never family objects — the process
that measures it rebuilds the variants from the run's registry, itself rebuilt
from the factory string and the plugin module names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from matprobe.measure.results import PairResult
from matprobe.measure.variants import Registry, Variant
from matprobe.spec import MatmulSpec


@dataclass(frozen=True)
class Task:
    index: int  # the caller's handle for the pair
    spec: MatmulSpec
    variant: Variant
    #: timed interleaved with the candidate (None: no ratio, e.g. the baseline itself)
    baseline: Variant | None = None


VariantRef = tuple[str, tuple[tuple[str, Any], ...]]  # family name, params
#: A task as plain data (what crosses a process boundary): index, spec, candidate, baseline.
TaskData = tuple[int, dict[str, Any], VariantRef, VariantRef | None]


def _ref(variant: Variant) -> VariantRef:
    return (variant.family.name, variant.params)


def task_data(task: Task) -> TaskData:
    """What a worker process is sent of a task: plain data, no family objects."""
    baseline = None if task.baseline is None else _ref(task.baseline)
    return (task.index, task.spec.to_dict(), _ref(task.variant), baseline)


def task_from_data(data: TaskData, registry: Registry) -> Task:
    """The task again, its variants rebuilt from ``registry`` (the run's, rebuilt here)."""
    index, spec_data, candidate, baseline = data

    def resolve(ref: VariantRef) -> Variant:
        return Variant(registry.family(ref[0]), tuple(tuple(p) for p in ref[1]))

    return Task(
        index,
        MatmulSpec.from_dict(spec_data),
        resolve(candidate),
        None if baseline is None else resolve(baseline),
    )


def result_of(task: Task, message: tuple[Any, ...]) -> PairResult | None:
    """The result a worker's ``("done", index, result)`` message gives for ``task``
    (the pair in flight), or None when it gives none: another pair's, or not a
    result — plugin code writing to its worker's pipe. (A worker that breaks its
    protocol is ended; its pair in flight gets an ERROR.)"""
    if len(message) != 3 or message[1] != task.index:
        return None
    try:
        result = PairResult.from_dict(message[2])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    same = (result.spec_key, result.variant_id) == (task.spec.key(), task.variant.id)
    return result if same else None
