"""One run of the harness, from chosen specs to a report — without a command line.

:class:`RunSession` does what ``matprobe run`` does between parsing its
options and printing: build the registry (the shipped families and the
user's plugins) and read the manifest, start the worker processes (before
anything else, so that their set-up overlaps this process's), detect the
device, select the variants, thin the interpreted grids on the CPU, open the
store, record the run, plan, execute with the baselines (each card's worker
measures its peaks and reads its clocks as it starts), note the GPU clocks
before and after, and build the report with its notes. It
takes plain values (:class:`RunOptions`), so any command — ``run`` today, a
per-token command tomorrow — gets the same run; printing and writing the
report stay with the caller.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from matprobe.errors import MatprobeError
from matprobe.measure.device import DeviceInfo, detect
from matprobe.measure.seeds import new_run_seed
from matprobe.measure.timing import TimingPolicy, gpu_clock_state
from matprobe.measure.variants import SHIPPED_FACTORY, Variant
from matprobe.report.build import build_report, cards_note, clock_note, early_launch_note
from matprobe.report.model import Report
from matprobe.report.progress import run_progress
from matprobe.report.stored_report import save_report
from matprobe.run.beside import hold_to_reference, with_reference_rows
from matprobe.run.executors import adopt_workers, early_places, start_workers
from matprobe.run.manifest import (
    OFF_FAMILY_RULE,
    Manifest,
    load_manifest_and_registry,
)
from matprobe.run.runner import (
    DEFAULT_TIMEOUT_S,
    PairState,
    Plan,
    RunOutcome,
    execute,
    make_plan,
)
from matprobe.run.selection import (
    _check_pattern,
    baseline_variant,
    one_point_per_interpreted_family,
    one_spec_per_interpreted_family,
)
from matprobe.run.store import ResultStore, default_store_path
from matprobe.run.witness import not_witnessed, witness_outcome
from matprobe.run.worker import Place, WorkerSet
from matprobe.spec import MatmulSpec

if TYPE_CHECKING:
    from matprobe.run.pool import DeviceSlot
    from matprobe.run.ray_pool import RayCluster

CPU_NOTE = (
    "CPU run: times are wall-clock on this CPU; Triton variants run in the interpreter and "
    "are validated, not timed"
)


@dataclass(frozen=True)
class RunOptions:
    """What a run is asked to do; every field has the command line's default."""

    #: glob patterns over variant ids and family names; empty: the manifest's enabled
    #: variants (and, on the CPU, one grid point per interpreted family)
    variants: tuple[str, ...] = ()
    #: on the CPU, validate every grid point of interpreted families (default: one
    #: each, unless a --variants pattern names grid points, "family/…")
    every_point: bool = False
    #: "cuda" or "cpu"; None: cuda where there is one
    device: str | None = None
    #: a manifest file; None: the shipped default
    manifest: str | Path | None = None
    #: the user's family modules (each exposes ``FAMILIES``), besides the manifest's
    plugins: tuple[str, ...] = ()
    #: the registry's factory string, resolved here and in every worker
    factory: str = SHIPPED_FACTORY
    #: the result store; None: $MATPROBE_DB or the user's cache
    db: str | Path | None = None
    force: bool = False
    kernel_clock: bool = False
    trials: int = 3
    #: the run's seed (None: one from the operating system, stored with the run)
    seed: int | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    #: recorded with the run in the store
    command: str = "matprobe run"
    #: CUDA cards to measure on in parallel, one worker each: "all" or "0,1,…";
    #: None: the one device of ``device``
    gpus: str | None = None
    #: a Ray cluster to measure on instead ("auto" or its address; not with ``gpus``)
    ray: str | None = None


@dataclass
class RunResult:
    report: Report
    plan: Plan
    outcome: RunOutcome

    @property
    def interrupted(self) -> bool:
        return self.outcome.interrupted


def measure_peaks(
    device: DeviceInfo, store: ResultStore, measure: Callable[[], dict[str, Any]] | None = None
) -> dict[str, Any] | None:
    """The device's bandwidth ceilings, measured in every CUDA run and never reused
    from an earlier one (clocks, the driver, even the card behind a device name
    change between runs) — by each card's worker as it starts, here only for a Ray
    run (on a cluster card) or a run that started no worker. The latest also goes
    to the store's device info, for history. None on the CPU. ``measure``: where
    they are measured (default: this process's card)."""
    if device.kind != "cuda":
        return None
    if measure is None:
        from matprobe.measure.peaks import measure_peaks_cuda

        measure = measure_peaks_cuda
    return record_peaks(device, store, measure())


def record_peaks(device: DeviceInfo, store: ResultStore, peaks: dict[str, Any]) -> dict[str, Any]:
    """``peaks`` into the store's device info (the latest, for history)."""
    store.put_device_info(
        device.fingerprint, {**peaks, "measured_at": dt.datetime.now(dt.timezone.utc).isoformat()}
    )
    return peaks


class RunSession:
    """The registry, manifest and variants of a run, then :meth:`run` over specs.

    Building one already reports the user's mistakes (a bad manifest, a plugin
    that does not import, patterns that match nothing) as :class:`MatprobeError`.
    ``stream`` gets the plan line and the progress (default: stderr)."""

    def __init__(self, options: RunOptions | None = None, *, stream: TextIO | None = None) -> None:
        self.options = options if options is not None else RunOptions()
        self.stream = stream if stream is not None else sys.stderr
        self._seed: int | None = None
        self.manifest: Manifest
        self.manifest, self.registry = load_manifest_and_registry(
            self.options.manifest, self.options.plugins, self.options.factory
        )
        #: every plugin the registry holds: the options' then the manifest's
        self.plugins = tuple(dict.fromkeys([*self.options.plugins, *self.manifest.plugins]))
        patterns = list(self.options.variants) or None
        for pattern in patterns or ():
            _check_pattern(pattern, self.registry)
        self.variants = self.manifest.variants(self.registry, patterns)
        if not self.variants:
            raise MatprobeError(
                f"no variant matches {' '.join(self.options.variants)!r} ({OFF_FAMILY_RULE}); "
                f"known families: {', '.join(self.registry.names())}"
            )

    def _quick_cpu(self, device: DeviceInfo) -> bool:
        """The CPU's quick default: no grid point named, no --every-point."""
        names_points = any("/" in pattern for pattern in self.options.variants)
        return device.kind == "cpu" and not names_points and not self.options.every_point

    def _variants_for(self, device: DeviceInfo) -> tuple[list[Variant], list[str]]:
        """The selected variants on ``device`` (one grid point per interpreted family on
        the CPU unless the user named variants) and the notes that say so."""
        variants, notes = list(self.variants), []
        # Naming a family is not asking for all its points: only a pattern that names
        # grid points ("family/…") or --every-point lifts the one-point rule.
        if self._quick_cpu(device):
            variants, dropped = one_point_per_interpreted_family(variants)
            if dropped:
                notes.append(
                    f"CPU: Triton families are validated in the interpreter at one "
                    f"grid point each ({dropped} other points skipped; name them "
                    f"with --variants 'FAMILY/*' or use --every-point)"
                )
        return variants, notes

    def _policy(self) -> TimingPolicy:
        """The run's policy; its seed is the options' or, once per session, one from the OS."""
        if self._seed is None:
            self._seed = new_run_seed() if self.options.seed is None else self.options.seed
        return TimingPolicy(
            kernel_clock=self.options.kernel_clock, trials=self.options.trials, seed=self._seed
        )

    def plan(self, specs: Sequence[MatmulSpec]) -> tuple[Plan, DeviceInfo]:
        """What :meth:`run` would do, without doing it: every pair's state (run, cached,
        unsupported) and reason. Nothing is measured, stored or created."""
        if not specs:
            raise MatprobeError("no specs to run")
        if self.options.ray is not None:
            from matprobe.run.ray_pool import connect

            device = connect(self.options.ray, self.options.device).device
        else:
            device = detect(self.options.device)
        variants, _ = self._variants_for(device)
        with _dry_run_store(self.options.db) as store:
            plan = make_plan(
                specs, variants, device, self._policy(), store, force=self.options.force
            )
        if self._quick_cpu(device):
            plan, _ = one_spec_per_interpreted_family(plan)
        return plan, device

    def _target(self) -> _Target:
        """Where the run measures: a Ray cluster, every card of ``--gpus``, or one device
        (a one-line error, before anything runs, when it cannot)."""
        options = self.options
        if options.ray is not None:
            if options.gpus is not None:
                raise MatprobeError("--ray and --gpus: choose one")
            from matprobe.run.ray_pool import connect

            cluster = connect(options.ray, options.device)
            return _Target(cluster.device, cluster=cluster)
        if options.gpus is not None:
            if options.device not in (None, "cuda"):
                raise MatprobeError(
                    f"--gpus measures on CUDA cards; not with --device {options.device}"
                )
            from matprobe.run.pool import cuda_slots

            slots = cuda_slots(options.gpus)
            return _Target(slots[0].device, slots=slots)
        return _Target(detect(options.device))

    def run(
        self, specs: Sequence[MatmulSpec], *, source: str = "", tokens: int | None = None
    ) -> RunResult:
        """Validate and time every selected variant on ``specs`` (reusing the store's
        results), store what is new and build the report. ``source`` names where the
        specs come from; ``tokens`` is the profiled run's token count, if known."""
        if not specs:
            raise MatprobeError("no specs to run")
        policy = self._policy()
        # The workers first: each imports torch and sets up its card (~6 s on a GPU
        # host) while this process does the same to detect the device (~5 s) and plans.
        options = self.options
        places = early_places(device=options.device, gpus=options.gpus, ray=options.ray)
        workers = self._spawn_workers(places, policy)
        try:
            target = self._target()
            device = target.device
            workers = self._adopt(workers, target, policy)
            variants, notes = self._variants_for(device)
            baselines = {
                op: self.manifest.baseline_for(op, self.registry) for op in {s.kind for s in specs}
            }
            db = self.options.db or default_store_path()
            with ResultStore(db) as store:
                plan, outcome, peaks = self._measure(
                    store, target, specs, variants, notes, policy, baselines, source, workers
                )
        finally:  # execute closed them; not if a bad option stopped the run first
            for worker in workers:
                worker.kill()
        peers = {family.name for family in self.registry.families() if family.peer}
        report = build_report(
            plan,
            outcome,
            baselines=baselines,
            device=device,
            policy=policy,
            peaks=peaks,
            tokens=tokens,
            source=source,
            peers=peers,
        )
        self._add_notes(report, target, plan, outcome, notes)
        # The report as it was (cached pairs, production figures, unsupported reasons)
        # for `matprobe report/compare/history/dispatch` later.
        save_report(db, report)
        return RunResult(report, plan, outcome)

    def _spawn_workers(self, places: Sequence[Place], policy: TimingPolicy) -> list[WorkerSet]:
        return start_workers(places, **self._worker_options(policy))

    def _worker_options(self, policy: TimingPolicy) -> dict[str, Any]:
        return {
            "factory": self.options.factory,
            "plugins": self.plugins,
            "policy": policy,
            "timeout_s": self.options.timeout_s,
        }

    def _adopt(
        self, workers: list[WorkerSet], target: _Target, policy: TimingPolicy
    ) -> list[WorkerSet]:
        devices = [slot.device for slot in target.slots] if target.slots else [target.device]
        measured_here = None if target.cluster is not None else devices
        return adopt_workers(workers, measured_here, **self._worker_options(policy))

    def _measure(
        self,
        store: ResultStore,
        target: _Target,
        specs: Sequence[MatmulSpec],
        variants: list[Variant],
        notes: list[str],
        policy: TimingPolicy,
        baselines: dict[str, str | None],
        source: str,
        workers: Sequence[WorkerSet],
    ) -> tuple[Plan, RunOutcome, dict[str, Any] | None]:
        """Records the run in ``store``, plans it and runs the plan: (plan, outcome,
        the card's peaks). Appends to ``notes`` what the CPU's quick plan left out."""
        options, device, cluster = self.options, target.device, target.cluster
        environment: dict[str, Any] = {
            "device": device.to_dict(),
            "source": source,
            "seed": policy.seed,  # `run --seed` with it replays this run's values
        }
        if self.plugins:
            environment["plugins"] = list(self.plugins)
        # On this host's cards each worker measures its card's peaks as it starts
        # (all cards at once, while the others start), not this process first.
        peaks = None
        if cluster is not None:
            environment["ray"] = cluster.address
            peaks = measure_peaks(device, store, cluster.measure_peaks)
            environment["peaks"] = peaks  # stored with the run they are the ceilings of
        run_id = store.start_run(options.command, environment)
        plan = make_plan(specs, variants, device, policy, store, force=options.force)
        if self._quick_cpu(device):
            plan, aside = one_spec_per_interpreted_family(plan)
            if aside:
                notes.append(
                    f"CPU: each Triton family validated in the interpreter on one spec "
                    f"(its cheapest); {aside} pairs on other specs not validated "
                    "(--every-point validates every spec and grid point)"
                )
        interleaved = {op: baseline_variant(b, self.registry) for op, b in baselines.items()}
        plan = with_reference_rows(plan, interleaved, device)
        print(
            f"matprobe: {source}: {len(specs)} specs × {len(variants)} variants on "
            f"{device.name} ({device.kind}); {plan.summary()}",
            file=self.stream,
        )
        progress = run_progress(len(plan.of(PairState.RUN)), self.stream)
        outcome = execute(
            plan,
            store,
            device,
            policy,
            run_id=run_id,
            factory=options.factory,
            plugins=self.plugins,
            timeout_s=options.timeout_s,
            progress=progress,
            baselines=interleaved,
            slots=target.slots,
            ray=cluster,
            workers=workers,
        )
        hold_to_reference(outcome, interleaved, store, device)
        if self.plugins:
            notes += self._judge_apart(outcome, store, device, policy, interleaved, cluster)
        if target.local_cuda:
            # Each card's clock before its worker loaded it, as the worker read it.
            found = {f"cuda:{w.place.index}": w.clocks_before for w in workers}
            target.clocks_before = {label: found.get(label) or {} for label in target.cards}
            store.add_to_run(run_id, {"gpu_clocks_before": target.clocks_before})
            peaks = outcome.card_peaks.get(next(iter(target.cards)))
            if peaks is None and not outcome.interrupted:
                peaks = measure_peaks(device, store)  # no worker started: all cached
            elif peaks is not None:
                record_peaks(device, store, peaks)
            if peaks is not None:
                store.add_to_run(run_id, {"peaks": peaks})
        store.finish_run(run_id, "interrupted" if outcome.interrupted else "done")
        return plan, outcome, peaks

    def _judge_apart(
        self,
        outcome: RunOutcome,
        store: ResultStore,
        device: DeviceInfo,
        policy: TimingPolicy,
        baselines: Mapping[str, Variant | None],
        cluster: RayCluster | None,
    ) -> list[str]:
        """The plugin rows that passed, witnessed (:mod:`~matprobe.run.witness`) where a
        process apart can be — this host's CPU or CUDA card — else said not to be;
        the report's note on it, said here too."""
        if cluster is not None or device.kind not in ("cpu", "cuda"):
            where = "a Ray cluster" if cluster is not None else f"{device.kind} ({device.name})"
            said = not_witnessed(outcome, store, where)
        else:
            said = witness_outcome(
                outcome,
                store,
                factory=self.options.factory,
                device=device,
                policy=policy,
                baselines=baselines,
            )
        if said is None:
            return []
        print(f"matprobe: {said}", file=self.stream)
        return [said]

    def _add_notes(
        self, report: Report, target: _Target, plan: Plan, outcome: RunOutcome, notes: list[str]
    ) -> None:
        """The run's notes: each card's clocks, early launch, the cards' share and peaks,
        the cluster's, and on the CPU what the quick plan left out."""
        cards, slots = target.cards, target.slots
        if target.local_cuda:
            for label, before in target.clocks_before.items():
                after = gpu_clock_state(cards[label])
                if note := clock_note(before, after):
                    report.notes.append(f"{label}: {note}" if len(cards) > 1 else note)
        if note := early_launch_note(plan):
            report.notes.append(note)
        if slots is not None and len(slots) > 1:
            report.notes.append(cards_note(outcome, [slot.label for slot in slots]))
            if outcome.card_peaks:
                from matprobe.run.pool import card_peaks_note

                report.notes.append(card_peaks_note(outcome.card_peaks, slots[0].label))
        if target.cluster is not None:
            report.notes.extend(target.cluster.notes(outcome.elsewhere))
        if target.device.kind == "cpu":
            report.notes.append(CPU_NOTE)
            report.notes.extend(notes)


@dataclass
class _Target:
    """Where a run measures, and each local card's clock state before it."""

    device: DeviceInfo
    slots: list[DeviceSlot] | None = None
    cluster: RayCluster | None = None
    clocks_before: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def local_cuda(self) -> bool:
        return self.device.kind == "cuda" and self.cluster is None

    @property
    def cards(self) -> dict[str, int]:
        """Every card's index by label (one card: the one measured on)."""
        if self.slots:
            return {slot.label: slot.device.index for slot in self.slots}
        return {f"cuda:{self.device.index}": self.device.index}


def _dry_run_store(db: str | Path | None) -> ResultStore:
    """The store a dry run reads: the real one when it exists (read for its cache),
    else an empty one in a temporary folder — a dry run creates nothing."""
    import tempfile

    path = Path(db) if db else default_store_path()
    if path.exists():
        return ResultStore(path)
    return ResultStore(Path(tempfile.mkdtemp(prefix="matprobe-dry-")) / "empty.sqlite")


def run_specs(
    specs: Sequence[MatmulSpec],
    options: RunOptions | None = None,
    *,
    source: str = "",
    tokens: int | None = None,
    stream: TextIO | None = None,
) -> RunResult:
    """One :class:`RunSession` over ``specs``: see :meth:`RunSession.run`."""
    return RunSession(options, stream=stream).run(specs, source=source, tokens=tokens)
