"""What a run takes: the variant a baseline names, ``--variants`` patterns that
must name something, and on the CPU the interpreted families thinned — one grid
point per family, validated on one spec — so that the default CPU run takes
minutes (``--every-point`` keeps them all)."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from pathlib import Path

from matprobe.errors import MatprobeError
from matprobe.measure.variants import Registry, Variant
from matprobe.run.runner import PairState, Plan, PlannedPair
from matprobe.spec import MatmulSpec


def baseline_variant(target: str | None, registry: Registry) -> Variant | None:
    """The variant a baseline names: a variant id, or a family (its first grid point)."""
    if target is None:
        return None
    if "/" in target:
        return registry.variant(target)
    return registry.family(target).variants()[0]


def one_point_per_interpreted_family(variants: Sequence[Variant]) -> tuple[list[Variant], int]:
    """On the CPU a Triton family runs in the interpreter, where a grid point is
    a correctness check, not a speed figure: one point per family keeps the
    default run to minutes. Returns the kept variants and how many were dropped."""
    kept: list[Variant] = []
    seen: set[str] = set()
    for variant in variants:
        family = variant.family
        if family.interpreted_on_cpu:
            if family.name in seen:
                continue
            seen.add(family.name)
        kept.append(variant)
    return kept, len(variants) - len(kept)


def one_spec_per_interpreted_family(plan: Plan) -> tuple[Plan, int]:
    """On the CPU an interpreted family is validated on one spec — its cheapest
    (fewest batch·m·n·k) it supports; one already in the store counts — and the
    others are set aside with a reason the report shows. The interpreter's
    verdict is the same kernel code's on every spec; validating all of them is
    what ``--every-point`` is for. Returns the plan and how many pairs were set aside."""
    chosen: dict[str, PlannedPair] = {}
    for pair in plan.pairs:
        family = pair.variant.family
        if not family.interpreted_on_cpu or pair.state is PairState.UNSUPPORTED:
            continue
        best = chosen.get(family.name)
        rank = (pair.state is not PairState.CACHED, _work(pair.spec))
        if best is None or rank < (best.state is not PairState.CACHED, _work(best.spec)):
            chosen[family.name] = pair
    pairs, aside = [], 0
    for pair in plan.pairs:
        keep = chosen.get(pair.variant.family.name)
        if pair.state is PairState.RUN and keep is not None and pair is not keep:
            where = keep.spec.key()
            pair = PlannedPair(
                pair.spec,
                pair.variant,
                PairState.UNSUPPORTED,
                f"CPU: not validated here — the interpreter checks {pair.variant.family.name} "
                f"on one spec ({where}); --every-point checks every spec",
            )
            aside += 1
        pairs.append(pair)
    return Plan(pairs), aside


def _work(spec: MatmulSpec) -> int:
    return (spec.batch or 1) * (spec.m or 1) * (spec.n_total or 1) * (spec.k or 1)


def _check_pattern(pattern: str, registry: Registry) -> None:
    """A ``--variants`` pattern must name something: one that matches no variant is an
    error, never silently dropped — and a file given after ``--variants`` (which
    takes several patterns) was meant as the profile."""
    ids = [v.id for family in registry.families() for v in family.variants()]
    names = registry.names()
    if any(fnmatch.fnmatchcase(x, pattern) for x in ids + names) or any(
        pattern.startswith(name) for name in names
    ):
        return
    if Path(pattern).is_file():
        raise MatprobeError(
            f"{pattern!r} was read as a --variants pattern but is a file: give the profile "
            f"before --variants (matprobe run {pattern} --variants GLOB …)"
        )
    raise MatprobeError(
        f"--variants {pattern!r} matches no variant; known families: {', '.join(names)}"
    )
