"""Several device slots on one plan (``run --gpus``), tested with CPU slots: every
pair measured exactly once across the slots, every result in the one store, each
row naming its slot, a crash costing only its pair."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest

torch = pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")

import fake_variants  # noqa: E402
from conftest import CPU, FAST  # noqa: E402
from matprobe.cli import main  # noqa: E402
from matprobe.errors import MatprobeError  # noqa: E402
from matprobe.measure.device import DeviceInfo  # noqa: E402
from matprobe.measure.pair import PairContext, measure_pair_safely  # noqa: E402
from matprobe.measure.results import ErrorKind, Status  # noqa: E402
from matprobe.measure.variants import Variant  # noqa: E402
from matprobe.run import runner as runner_mod  # noqa: E402
from matprobe.run import worker as worker_mod  # noqa: E402
from matprobe.run.pool import DeviceSlot, cuda_slots, parse_gpus, run_on_slots  # noqa: E402
from matprobe.run.runner import PairState, execute, make_plan  # noqa: E402
from matprobe.run.store import ResultStore  # noqa: E402
from matprobe.run.task import Task  # noqa: E402
from matprobe.spec import MatmulSpec  # noqa: E402

REGISTRY = fake_variants.registry()
#: CPU "cards": one fingerprint (the plan's keys), different indices, as a host's GPUs.
SLOTS = [DeviceSlot(f"cpu-slot:{i}", replace(CPU, index=i)) for i in range(3)]


def spec(n: int) -> MatmulSpec:
    return MatmulSpec(op="matmul", batch=1, m=1, n=n, k=29, tA=False, tB=True, dtype="f32")


def test_every_pair_runs_once_across_slots_in_parallel_into_one_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner_mod, "CLAIM_CHUNK", 2)
    specs = [spec(n) for n in range(5, 17)]
    variants = [REGISTRY.family("fake.exact").variants()[0]]
    measured: list[tuple[int, str]] = []
    busy: set[int] = set()
    overlap = threading.Event()
    lock = threading.Lock()

    def slot_runner(tasks: list[Task], **kw: Any) -> None:
        index = kw["device"].index
        with lock:
            busy.add(index)
            if len(busy) > 1:
                overlap.set()
        for task in tasks:
            kw["on_start"](task)
            result = measure_pair_safely(task.spec, task.variant, PairContext(CPU, FAST, 1))
            with lock:
                measured.append((index, task.spec.key()))
            time.sleep(0.05)  # long enough for the slots to overlap
            kw["on_result"](task, replace(result, run_id=kw["run_id"]))
        with lock:
            busy.discard(index)

    with ResultStore(tmp_path / "s.db") as store:
        plan = make_plan(specs, variants, CPU, FAST, store)
        run_id = store.start_run("t", {})
        outcome = execute(plan, store, CPU, FAST, run_id=run_id, runner=slot_runner, slots=SLOTS)
        assert sorted(key for _, key in measured) == sorted(s.key() for s in specs)  # once each
        assert overlap.is_set(), "the slots never measured at the same time"
        assert {index for index, _ in measured} == {0, 1, 2}
        stored = store.results(run_id=run_id)
        assert len(stored) == len(specs) == outcome.fresh
        by_spec = dict(measured)
        for result in stored:
            cards = [n for n in result.clocks.notes if n.startswith("card ")]
            (slot_index,) = [i for i, key in measured if key == result.spec_key]
            assert cards == [f"card cpu-slot:{slot_index}"], (cards, by_spec)


def test_real_workers_on_cpu_slots_a_crash_costs_only_its_pair(tmp_path: Path) -> None:
    """Spawned worker processes on two slots: the segfaulting pair is an ERROR row,
    every other pair passes, and all of them are in the one store."""
    flaky = REGISTRY.family("fake.flaky")
    ok = Variant(flaky, (("mode", "ok"),))
    segv = Variant(flaky, (("mode", "segv"),))
    exact = REGISTRY.family("fake.exact").variants()[0]
    specs = [spec(n) for n in (5, 6)]
    with ResultStore(tmp_path / "s.db") as store:
        plan = make_plan(specs, [exact, ok, segv], CPU, FAST, store)
        assert len(plan.of(PairState.RUN)) == 6
        run_id = store.start_run("t", {})
        started = time.monotonic()
        execute(
            plan,
            store,
            CPU,
            FAST,
            run_id=run_id,
            factory="fake_variants:registry",
            timeout_s=30,
            slots=SLOTS[:2],
        )
        took = time.monotonic() - started
        rows = {(r.spec_key, r.variant_id): r for r in store.results(run_id=run_id)}
    assert len(rows) == 6, took
    for (_, variant_id), row in rows.items():
        if variant_id == segv.id:
            assert row.status is Status.ERROR and row.error_kind is ErrorKind.CRASH
        else:
            assert row.status is Status.PASS, row.reason
        assert any(n.startswith("card cpu-slot:") for n in row.clocks.notes)


def test_a_runner_failure_stops_handing_out_work_and_is_raised() -> None:
    handed: list[int] = []
    items = iter(
        [[Task(i, spec(5), REGISTRY.family("fake.exact").variants()[0])] for i in range(9)]
    )

    def next_item(slot: int) -> list[Task] | None:
        item = next(items, None)
        if item is not None:
            handed.append(item[0].index)
        return item

    def broken(tasks: list[Task], **kw: Any) -> None:
        raise RuntimeError("the runner itself broke")

    with pytest.raises(RuntimeError, match="runner itself broke"):
        run_on_slots(
            next_item, SLOTS[:2], on_start=lambda t: None, on_result=lambda *a: None, runner=broken
        )
    assert len(handed) < 9


@pytest.mark.parametrize(
    ("text", "needle"),
    [("0,x", "give 'all' or card indices"), ("1,1", "named twice"), ("", "give 'all'")],
)
def test_gpus_syntax_errors_are_one_line(text: str, needle: str) -> None:
    with pytest.raises(MatprobeError, match=needle):
        parse_gpus(text)


def test_gpus_on_a_machine_without_them_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if torch.cuda.is_available():
        with pytest.raises(MatprobeError, match="no card 999"):
            cuda_slots("0,999")
        return
    with pytest.raises(MatprobeError, match="no CUDA GPU"):
        cuda_slots("all")
    code = main(["run", "--gpus", "0,1", "--db", "/nonexistent/x.sqlite"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--gpus 0,1" in err, err


class CountingWorker(worker_mod.Worker):
    """The pool's Workers (a slot's WorkerSet makes them), remembered: which
    processes each slot started."""

    made: ClassVar[list[CountingWorker]] = []

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        CountingWorker.made.append(self)


@pytest.fixture
def counting_workers(monkeypatch: pytest.MonkeyPatch) -> list[CountingWorker]:
    CountingWorker.made = []
    monkeypatch.setattr(worker_mod, "Worker", CountingWorker)
    return CountingWorker.made


def test_each_slot_keeps_one_worker_process_across_its_items(
    tmp_path: Path, counting_workers: list[CountingWorker]
) -> None:
    """Four families (four work items) on two slots: two worker processes in all,
    so at least one slot measured several items in the process it started first."""
    variants = [
        REGISTRY.family(name).variants()[0]
        for name in ("fake.exact", "cheat.zeros", "fake.slow", "fake.broken")
    ]
    handed: list[int] = []
    with ResultStore(tmp_path / "s.db") as store:
        plan = make_plan([spec(5)], variants, CPU, FAST, store)
        run_id = store.start_run("t", {})
        real_claim = store.claim

        def claim(keys: Any, run: int) -> Any:
            handed.append(len(keys))
            return real_claim(keys, run)

        store.claim = claim  # type: ignore[method-assign]
        execute(
            plan, store, CPU, FAST, run_id=run_id, factory="fake_variants:registry", slots=SLOTS[:2]
        )
        statuses = sorted(r.status.value for r in store.results(run_id=run_id))
    assert statuses == ["error", "fail", "pass", "pass"]
    assert len(handed) == 4, handed  # four items handed out …
    assert len(counting_workers) == 2  # … to two slots, each with its Worker …
    pids = [pid for worker in counting_workers for pid in worker.pids]
    assert len(pids) == len(set(pids)) == 2  # … which started one process each


def test_one_card_keeps_one_worker_process_across_families(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --gpus the run's families share one worker process too (a crash
    still costs its pair only: the broken family's error, then a fresh process)."""
    CountingWorker.made = []
    monkeypatch.setattr(worker_mod, "Worker", CountingWorker)
    variants = [
        REGISTRY.family(name).variants()[0] for name in ("fake.exact", "cheat.zeros", "fake.slow")
    ]
    with ResultStore(tmp_path / "s.db") as store:
        plan = make_plan([spec(5)], variants, CPU, FAST, store)
        run_id = store.start_run("t", {})
        execute(plan, store, CPU, FAST, run_id=run_id, factory="fake_variants:registry")
        statuses = sorted(r.status.value for r in store.results(run_id=run_id))
    assert statuses == ["fail", "pass", "pass"]
    (worker,) = CountingWorker.made
    assert len(worker.pids) == 1  # three families, one process


def test_a_crash_mid_item_costs_its_pair_and_the_item_goes_on_in_a_fresh_process(
    counting_workers: list[CountingWorker],
) -> None:
    """One slot, three items; the second item's second pair kills its process: that
    pair is a CRASH row, the rest of the item and the next item run in one fresh
    process (two processes in all, not one per item)."""
    flaky = REGISTRY.family("fake.flaky")
    ok, segv = Variant(flaky, (("mode", "ok"),)), Variant(flaky, (("mode", "segv"),))
    plan = [[ok, ok], [ok, segv, ok, ok], [ok]]
    numbered = iter(range(100))
    items = iter([[Task(next(numbered), spec(5 + i), v) for i, v in enumerate(vs)] for vs in plan])
    results: dict[int, Any] = {}
    run_on_slots(
        lambda slot: next(items, None),
        SLOTS[:1],
        on_start=lambda task: None,
        on_result=lambda task, result, slot: results.setdefault(task.index, result),
        factory="fake_variants:registry",
        policy=FAST,
        run_id=None,
        timeout_s=60,
    )
    assert sorted(results) == list(range(7))  # every pair, once
    crashed = [i for i, r in results.items() if r.status is Status.ERROR]
    assert crashed == [3] and results[3].error_kind is ErrorKind.CRASH, results[3].reason
    assert all(r.status is Status.PASS for i, r in results.items() if i != 3)
    (worker,) = counting_workers
    assert len(worker.pids) == 2, worker.pids  # the first, and the one after the crash


def test_every_card_measures_its_own_peaks_in_its_worker_with_its_share_of_the_cores(
    counting_workers: list[CountingWorker],
) -> None:
    """Each slot's worker calls the peaks function once, as it starts (all cards at
    once, no card waiting for another's sweep), with its share of the host's cores;
    the run gets them back by slot label, in slot order."""
    from matprobe.run.pool import card_peaks_note, cores_per_slot

    items = iter([[Task(i, spec(5 + i), REGISTRY.family("fake.exact").variants()[0])]
                  for i in range(4)])  # fmt: skip
    peaks = run_on_slots(
        lambda slot: next(items, None),
        SLOTS[:2],
        on_start=lambda task: None,
        on_result=lambda task, result, slot: None,
        card_peaks="fake_variants:card_peaks",
        factory="fake_variants:registry",
        policy=FAST,
        run_id=None,
        timeout_s=60,
    )
    assert list(peaks) == ["cpu-slot:0", "cpu-slot:1"]
    pids = {int(p["pid"]) for p in peaks.values()}
    assert pids == {pid for worker in counting_workers for pid in worker.pids}
    assert len(pids) == 2  # measured in each slot's own worker process, once
    share = cores_per_slot(2)
    assert share is not None and all(p["threads"] == share for p in peaks.values())
    note = card_peaks_note(peaks, "cpu-slot:0")
    assert "cpu-slot:0 read 3000 GB/s, copy 2800 GB/s; cpu-slot:1 read 3000" in note
    assert note.endswith("the report's % read uses cpu-slot:0's")


@pytest.mark.parametrize(
    ("slots", "cores", "share"), [(1, 64, None), (2, 64, 32), (4, 64, 16), (3, 2, 1), (8, 4, 1)]
)
def test_workers_sharing_a_host_share_its_cores(slots: int, cores: int, share: int | None) -> None:
    from matprobe.run.pool import cores_per_slot

    assert cores_per_slot(slots, cores) == share


def test_each_card_is_handed_more_of_its_spec_and_keeps_off_another_cards(
    tmp_path: Path,
) -> None:
    """Three specs' chunks, most work first, two cards asking in turn: each card stays
    on a spec of its own while that spec has chunks (it builds the spec's timing bench
    once), and only the last spec is shared."""
    from matprobe.run.work import WorkQueue

    exact = REGISTRY.family("fake.exact").variants()[0]
    specs = {s.key(): s for s in (spec(40), spec(30), spec(20))}
    chunks = [[(4 * n + c, None, key)] for n, key in enumerate(specs) for c in range(4)]
    by_index = {i: specs[key] for chunk in chunks for i, _, key in chunk}

    def tasks_of(indices: list[int]) -> list[list[Task]]:
        return [[Task(i, by_index[i], exact) for i in indices]] if indices else []

    with ResultStore(tmp_path / "s.db") as store:
        queue = WorkQueue(chunks, store, store.start_run("t", {}), tasks_of, print, {})
        handed: dict[int, list[str]] = {0: [], 1: []}
        card = 0
        while (tasks := queue.take(card)) is not None:
            handed[card].append(tasks[0].spec.key())
            card = 1 - card
    first, second, third = specs
    assert handed[0][:4] == [first] * 4 and handed[1][:4] == [second] * 4
    assert handed[0][4:] == [third] * 2 and handed[1][4:] == [third] * 2


def test_the_worker_starts_before_the_device_is_detected_and_its_rows_are_the_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counting_workers: list[CountingWorker]
) -> None:
    """A run's worker process is started before this process detects the device
    (on a GPU host each side imports torch and sets up the card, ~5–6 s, so they
    do it at once), not after the plan: the process that measures the rows is
    already alive when ``detect`` is called, and the rows it measured — sent the
    device and the run's number with its work — are the run's, on that device."""
    import multiprocessing

    from matprobe.run import session as session_mod
    from matprobe.run.session import RunOptions, RunSession

    alive_at_detection: list[set[int | None]] = []
    real_detect = session_mod.detect

    def detect_watched(*args: Any, **kwargs: Any) -> Any:
        alive_at_detection.append({child.pid for child in multiprocessing.active_children()})
        return real_detect(*args, **kwargs)

    monkeypatch.setattr(session_mod, "detect", detect_watched)
    options = RunOptions(variants=("torch.matmul",), device="cpu", db=tmp_path / "s.db", trials=1)
    result = RunSession(options).run([spec(5), spec(7)], source="t")
    (worker,) = counting_workers
    (first_pid,) = worker.pids  # one process measured the whole run …
    assert first_pid in alive_at_detection[0]  # … and was already started at detection
    with ResultStore(tmp_path / "s.db") as store:
        rows = store.results(run_id=result.outcome.run_id)
    assert len(rows) == 2 and all(row.run_id == result.outcome.run_id for row in rows)
    assert {row.device for row in rows} == {real_detect("cpu").fingerprint}
    assert not multiprocessing.active_children()  # closed at the end of the run


@pytest.mark.parametrize(
    ("place", "device", "holds"),
    [
        (worker_mod.Place(None), DeviceInfo(kind="cuda", name="H100"), True),
        (worker_mod.Place(None), CPU, True),
        (worker_mod.Place(None), DeviceInfo(kind="mps", name="M2"), False),
        (worker_mod.Place("cuda", 1), DeviceInfo(kind="cuda", name="H100", index=1), True),
        (worker_mod.Place("cuda", 1), DeviceInfo(kind="cuda", name="H100", index=0), False),
        (worker_mod.Place("cuda", 0), CPU, False),
    ],
)
def test_a_place_holds_only_the_devices_its_process_sets_up_for(
    place: worker_mod.Place, device: DeviceInfo, holds: bool
) -> None:
    """A process started before the device was detected sets up for its place (None:
    CUDA if the host has it, else the CPU, never MPS unasked); only a device found
    there may be given to it, else the run starts a fresh one."""
    assert place.holds(device) is holds


def test_a_worker_sent_pairs_for_another_device_measures_none_of_them() -> None:
    """The process checks the device each item is sent for against where it set
    up: pairs meant for another card are errors, never measured on this one."""
    worker = worker_mod.Worker(
        factory="fake_variants:registry", device=replace(CPU, index=1),
        place=worker_mod.Place("cpu", 0), policy=FAST, run_id=None, timeout_s=60,
    )  # fmt: skip
    results: list[Any] = []
    exact = REGISTRY.family("fake.exact").variants()[0]
    with worker:
        worker.run(
            [Task(0, spec(5), exact)],
            on_start=lambda task: None,
            on_result=lambda task, result: results.append(result),
        )
    (result,) = results
    assert result.status is Status.ERROR
    assert "set up on cpu:0, sent pairs for cpu:1" in result.reason


def test_a_run_stopped_before_it_measures_leaves_no_worker_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counting_workers: list[CountingWorker]
) -> None:
    """The worker started early is killed at once when the run stops before its
    first item (here the store cannot be opened): no process left starting up, and
    none waited for (a starting process would read the stop only once set up)."""
    import multiprocessing

    from matprobe.run.session import RunOptions, RunSession

    blocker = tmp_path / "file"
    blocker.write_text("")
    options = RunOptions(variants=("torch.matmul",), device="cpu", db=blocker / "s.db")
    with pytest.raises(MatprobeError):
        RunSession(options).run([spec(5)], source="t")
    (worker,) = counting_workers
    assert worker.pids == []  # it never got to say it was ready …
    assert not multiprocessing.active_children()  # … and is gone


def test_a_worker_still_starting_is_killed_not_waited_for() -> None:
    """``close`` asks a set-up worker to exit, but one still importing torch would
    read the request only once set up (several seconds): it is killed."""
    worker = worker_mod.Worker(
        factory="fake_variants:registry", device=CPU, policy=FAST, run_id=None, timeout_s=60
    )
    worker.spawn()
    proc = worker._proc
    assert proc is not None and proc.is_alive()
    worker.close()
    assert proc.exitcode is not None and proc.exitcode < 0  # ended by a signal


@pytest.mark.parametrize(
    ("environ", "listing", "count"),
    [
        ({}, "GPU 0: NVIDIA H100 (UUID: GPU-a)\nGPU 1: NVIDIA H100 (UUID: GPU-b)\n", 2),
        ({}, "", None),  # nvidia-smi said nothing
        ({"CUDA_VISIBLE_DEVICES": "1"}, "GPU 0: A\nGPU 1: B\n", None),  # torch counts otherwise
        ({}, None, None),  # no nvidia-smi
    ],
)
def test_cards_are_counted_without_torch_only_where_torch_would_agree(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], listing: str | None, count: int | None
) -> None:
    """``--gpus all`` starts a worker per card before torch is imported, so the cards
    are counted from nvidia-smi's list — but not under CUDA_VISIBLE_DEVICES, where
    torch sees another set (a wrong guess costs a restart, never a wrong card:
    the workers are checked against the detected cards)."""
    import subprocess

    from matprobe.run import pool

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)

    def fake_run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if listing is None:
            raise FileNotFoundError(args[0])
        return subprocess.CompletedProcess(args, 0, stdout=listing, stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert pool.visible_cuda_count() == count


@pytest.mark.parametrize(
    ("options", "places"),
    [
        ({}, [worker_mod.Place(None)]),
        ({"device": "cpu"}, [worker_mod.Place("cpu")]),
        ({"gpus": "0,2"}, [worker_mod.Place("cuda", 0), worker_mod.Place("cuda", 2)]),
        ({"gpus": "all"}, [worker_mod.Place("cuda", 0), worker_mod.Place("cuda", 1)]),
        ({"gpus": "0,x"}, []),  # refused by the detection that follows, with its message
        ({"ray": "auto"}, []),  # a cluster starts its own
    ],
)
def test_a_run_knows_where_to_start_its_workers_before_torch_is_imported(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, Any], places: list[worker_mod.Place]
) -> None:
    from matprobe.run import pool
    from matprobe.run.executors import early_places

    monkeypatch.setattr(pool, "visible_cuda_count", lambda: 2)
    asked = {"device": None, "gpus": None, "ray": None, **options}
    assert early_places(**asked) == places


def test_workers_started_for_other_places_than_detected_are_replaced(
    counting_workers: list[CountingWorker],
) -> None:
    """Started early for the places guessed before torch was imported, the workers
    are kept only where the detected devices are theirs: otherwise killed and
    started afresh for the detected ones (a wrong guess costs a start, never a
    pair on the wrong card); a Ray cluster keeps none."""
    from matprobe.run.executors import adopt_workers, start_workers

    options: dict[str, Any] = {
        "factory": "fake_variants:registry", "plugins": (), "policy": FAST, "timeout_s": 60,
    }  # fmt: skip
    guessed = start_workers([worker_mod.Place("cpu", 0)], **options)
    kept = adopt_workers(guessed, [CPU], **options)
    assert kept is guessed and kept[0].place == worker_mod.Place("cpu", 0)
    elsewhere = replace(CPU, index=1)
    fresh = adopt_workers(kept, [elsewhere, CPU], **options)
    assert [w.place for w in fresh] == [worker_mod.Place("cpu", 1), worker_mod.Place("cpu", 0)]
    assert counting_workers[0]._proc is None  # the guessed one was killed
    assert adopt_workers(fresh, None, **options) == []
    assert all(worker._proc is None for worker in counting_workers)
