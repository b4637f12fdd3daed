"""The judge apart (``matprobe.run.witness``): a plugin written against the tamper
snapshot turns its check off and rewrites its rows on their way out of its worker
— a kernel writing zeros reported as a PASS with the fastest clock, an honest
kernel reported fifty times faster than it runs. Both stood until a process
that never imports a plugin posed, timed and judged problems of its own, and
timed the baseline on them in a process of its own (on a card the time a call
takes is held too; the CPU's shared wall clock holds only gross lies)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")

from conftest import CPU, on_a_card  # noqa: E402
from matprobe.measure.results import ErrorKind, Status  # noqa: E402
from matprobe.measure.variants import SHIPPED_FACTORY  # noqa: E402
from matprobe.run import session, witness, witness_rounds  # noqa: E402
from matprobe.run.process_tree import stat_fields  # noqa: E402
from matprobe.run.shared_arena import Arena, attach  # noqa: E402
from matprobe.run.store import ResultStore  # noqa: E402
from matprobe.run.witness_process import WitnessProcess  # noqa: E402
from test_tamper import ON_THE_CARD, ONE_SPEC, run_plugins, write  # noqa: E402

#: Turns off its worker's tamper check, then rewrites every row of its own on the
#: way out: a FAIL becomes a PASS at 1 µs a call, a PASS claims 1/50 of its time.
FORGES_ITS_ROWS = """
        from matprobe.measure import tamper as _tamper
        from matprobe.run import worker_process as _wp
        _tamper.Snapshot.changed = lambda self: []
        _say = _wp._say
        def _forged(conn, message):
            if message[0] == "done" and message[2]["variant_id"].startswith("{prefix}."):
                row = message[2]
                clocks = row["clocks"]
                if row["status"] != "pass":
                    row.update(status="pass", reason="", error_kind=None)
                    clocks["device"] = {"median_us": 1.0, "p10_us": 0.9, "p90_us": 1.1,
                                        "samples": [1.0] * 10, "calls_per_sample": 1}
                else:
                    for name in ("median_us", "p10_us", "p90_us"):
                        clocks["device"][name] /= 50
            _say(conn, message)
        _wp._say = _forged
        """


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path


@pytest.mark.parametrize("apart", [False, True], ids=["in-its-worker-only", "judged-apart"])
def test_a_plugin_that_forges_its_rows_stands_only_until_judged_apart(
    here: Path, apart: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if not apart:  # the harness as it was: what the worker says is the row
        monkeypatch.setattr(session, "witness_outcome", lambda *a, **k: None)
    name = write(here, "forging_rows", FORGES_ITS_ROWS)
    rows = run_plugins(here, [name], ONE_SPEC, "evil.*")
    err = capsys.readouterr().err
    zeros, exact = rows["evil.zeros/default"], rows["evil.exact/default"]
    if not apart:
        assert zeros.status is Status.PASS and zeros.clocks.device.median_us == 1.0
        assert exact.status is Status.PASS
        return
    assert zeros.status is Status.ERROR and zeros.error_kind is ErrorKind.TAMPER
    assert "judged apart" in zeros.reason and "call 1/" in zeros.reason
    # Its outputs are right; its forged clock fails against the baseline's, both
    # timed by the witness (on the CPU only a claim ten times too good does).
    assert exact.status is Status.ERROR and exact.error_kind is ErrorKind.TAMPER
    assert "baseline's" in exact.reason and "in a process of its own" in exact.reason
    assert "2 passing plugin row(s)" in err and "0 stand, 2 made ERROR" in err


def test_an_honest_plugin_stands_judged_apart(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = write(here, "honest_rows", "")
    rows = run_plugins(here, [name], ONE_SPEC, "evil.*")
    err = capsys.readouterr().err
    assert rows["evil.exact/default"].status is Status.PASS
    assert rows["evil.zeros/default"].status is Status.FAIL
    assert "1 passing plugin row(s)" in err and "1 stand, 0 made ERROR" in err


def test_the_baselines_rounds_write_no_memory_the_plugins_process_maps(
    here: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Until the twenty-fourth session the baseline was recorded over the plugin's
    block: work the plugin had queued could watch the judge write the baseline's
    problems (its ``x``, its NaN-filled outputs) and start beside its round."""
    blocks: dict[str, list[str]] = {"plugin": [], "baseline": []}
    record = witness._record

    def spy(process: WitnessProcess, variant: Any, *recorded: Any) -> None:
        who = "plugin" if variant.family.is_plugin else "baseline"
        blocks[who].append(recorded[2]["name"])  # the CPU block's shared-memory name
        record(process, variant, *recorded)

    monkeypatch.setattr(witness, "_record", spy)
    rows = run_plugins(here, [write(here, "own_block", "")], ONE_SPEC, "evil.exact", "torch.*")
    capsys.readouterr()
    assert rows["evil.exact/default"].status is Status.PASS
    assert blocks["plugin"] and blocks["baseline"]
    assert not set(blocks["plugin"]) & set(blocks["baseline"])


def test_a_shared_block_is_the_same_memory_on_both_sides() -> None:
    wanted = [("w", (3, 5), torch.float16), ("x", (7,), torch.bfloat16), ("n", (2,), torch.int8)]
    arena = Arena(wanted, "cpu")
    try:
        tensors, keep = attach(arena.handle())
        for name, shape, dtype in wanted:
            assert tensors[name].shape == shape and tensors[name].dtype == dtype
            assert tensors[name].data_ptr() % 256 == 0 or name == "w"
        tensors["w"].fill_(1.5)
        tensors["x"].copy_(torch.arange(7))
        assert bool((arena.tensors["w"] == 1.5).all())
        assert arena.tensors["x"].tolist() == list(range(7))
        del tensors, keep
    finally:
        arena.close()


#: The program of a helper that keeps the host busy: a loop.
LOOP = "import time\nwhile 1: time.sleep(0.01)"
#: Leaves its group and then its parent: a session of its own, a fork whose parent
#: ends (the fork, an orphan, writes its pid).
ORPHAN = (
    "import os, time\nos.setsid()\nif os.fork(): os._exit(0)\n"
    "open('helper.pid', 'w').write(str(os.getpid()))\n" + LOOP
)
#: Starts a process of its own when imported (a compile server, a pool of helpers,
#: or one that keeps the host busy while the baseline is timed), three ways.
STARTS_A_HELPER = """
        import subprocess as _subprocess
        import sys as _sys
        _helper = _subprocess.Popen([_sys.executable, "-c", PROGRAM], start_new_session=SETSID)
        if PROGRAM != ORPHAN:
            open("helper.pid", "w").write(str(_helper.pid))
        """
HELPERS = {
    "in its group": (LOOP, False),
    "in a session of its own": (LOOP, True),
    "an orphan": (ORPHAN, False),
}


def _state(pid: int) -> str:
    """A process's state letter (T: stopped, Z: ended, not yet reaped; "" gone)."""
    try:
        return stat_fields(pid)[0]
    except (FileNotFoundError, ProcessLookupError):  # gone; the second while being reaped
        return ""


def _helper_pid(here: Path) -> int:
    """The pid the helper's starter wrote (a forked one writes it a moment later)."""
    for _ in range(500):
        text = (here / "helper.pid").read_text() if (here / "helper.pid").exists() else ""
        if text.strip().isdigit():
            return int(text)
        time.sleep(0.01)
    raise AssertionError("the helper wrote no pid")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states in /proc")
@pytest.mark.parametrize("how", list(HELPERS))
def test_what_a_plugin_started_stops_with_it_while_the_baseline_is_timed(
    here: Path, how: str
) -> None:
    """Until the twenty-third session only the plugin's own process was stopped: a
    process it had started worked on through the baseline's rounds; until the
    twenty-fourth one that left the plugin's group (``setsid``), or its parent
    too (an orphan, handed to the fork server), still did. Now whatever descends
    from the plugin's process is stopped, and ends with it."""
    program, setsid = HELPERS[how]
    code = STARTS_A_HELPER.replace("PROGRAM", repr(program)).replace("SETSID", str(setsid))
    name = write(here, "helper_kernels", code.replace("ORPHAN", repr(ORPHAN)))
    process = WitnessProcess(SHIPPED_FACTORY, (name,), CPU)
    helper, pid = _helper_pid(here), process._process.pid
    assert pid is not None
    try:
        with process.stopped():
            assert _settled(helper, lambda s: s == "T") == _settled(pid, lambda s: s == "T") == "T"
        assert "T" not in (_settled(pid, lambda s: s != "T"), _settled(helper, lambda s: s != "T"))
    finally:
        process.close()
    # killed with the plugin's process, and reaped by whoever inherits it
    assert _settled(helper, lambda s: s in ("", "Z")) in ("", "Z")


def _settled(pid: int, done: Callable[[str], bool]) -> str:
    """The process's state once ``done`` holds for it (a signal is delivered a moment
    after it is sent), or after a second."""
    for _ in range(100):
        if done(state := _state(pid)):
            return state
        time.sleep(0.01)
    return _state(pid)


@pytest.mark.parametrize(
    ("claim_us", "sets", "calls"),
    [(None, 1, witness.MIN_CALLS), (1e6, 1, witness.MIN_CALLS), (20.0, 7, 1001), (0.001, 3, 2001)],
)
def test_a_witness_makes_enough_calls_for_its_clock_every_set_as_often(
    claim_us: float | None, sets: int, calls: int
) -> None:
    assert witness._calls(claim_us, sets) == calls


@on_a_card
@pytest.mark.parametrize("cheat", ["", FORGES_ITS_ROWS], ids=["honest", "forger"])
def test_on_a_card_the_witness_shares_the_problems_by_cuda_ipc(
    here: Path, cheat: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name = write(here, "card_rows", cheat)
    found = run_plugins(here, [name], ON_THE_CARD, "evil.*", "torch.*")
    err = capsys.readouterr().err
    rows = [r for vid, r in found.items() if vid.startswith("evil.")]
    assert rows and "judged apart" in err
    for row in rows:
        if cheat:  # the zeros kernel's outputs fail; the exact one is slower than it says
            assert row.status is Status.ERROR and "judged apart" in row.reason, row.reason
            fell = "call 1/" if row.variant_id == "evil.zeros/default" else "calls took at least"
            assert fell in row.reason, row.reason
        elif row.variant_id == "evil.exact/default":
            assert row.status is Status.PASS, row.reason


#: On a card: its witness process says "done" as soon as the replay is launched.
SAYS_DONE_EARLY_ON_A_CARD = (
    FORGES_ITS_ROWS
    + """
        from matprobe.measure import sampling as _sampling
        _sampling.CudaRecorder.sync = lambda self: None
        """
)


@on_a_card
def test_on_a_card_a_witness_that_hears_done_early_waits_for_every_output(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = write(here, "early_card_rows", SAYS_DONE_EARLY_ON_A_CARD)
    rows = [r for vid, r in run_plugins(here, [name], ON_THE_CARD, "evil.exact").items()
            if vid == "evil.exact/default"]  # fmt: skip
    capsys.readouterr()
    assert rows
    for row in rows:
        assert row.status is Status.ERROR and "calls took at least" in row.reason, row.reason


#: Keeps its card busy from a thread of its own: two 10 ms kernels queued at a time,
#: which run on after the witness stops its process (the host side alone stops).
KEEPS_THE_CARD_BUSY = """
        import threading as _threading
        import torch as _torch

        def _keep_busy():
            stream = _torch.cuda.Stream()
            with _torch.cuda.stream(stream):
                while True:
                    _torch.cuda._sleep(20_000_000)
                    _torch.cuda._sleep(20_000_000)
                    stream.synchronize()

        if _torch.cuda.is_available():
            _threading.Thread(target=_keep_busy, daemon=True).start()
        """


@on_a_card
def test_on_a_card_work_a_stopped_plugin_left_queued_slows_no_baseline_round(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Until the twenty-fourth session the baseline's rounds ran beside what the
    plugin had queued on the card (time slices: a 10 ms kernel stretched a round of
    200 GEMVs 3.7×), so the witnessed ratio moved in the plugin's favour. Now a
    round counts only on a card quiet before and after it: the baseline's bound is
    the one it has alone, or the row has no verdict. (Its thread also breaks the
    plugin's own recordings at times: those rows have no verdict either.)"""
    name = write(here, "busy_card", KEEPS_THE_CARD_BUSY)
    run_plugins(here, [name], ON_THE_CARD, "evil.exact", "torch.*")
    capsys.readouterr()
    with ResultStore(here / "r.sqlite", read_only=True) as store:
        (run,) = store.runs()
        rows = {(r.spec_key, r.variant_id): r for r in store.results()}
    seen = run.environment["judged_apart"]
    assert seen
    for entry in seen:
        row = rows[entry["spec"], entry["variant"]]
        assert row.clocks.vs_baseline is not None
        alone = rows[entry["spec"], row.clocks.vs_baseline.baseline_id]  # the baseline's own
        assert alone.clocks.device is not None
        if entry["problem"] is not None:  # the card stayed busy, or its process broke
            assert row.status is Status.ERROR, entry
        else:  # on 26b11f1 the LM head's stood on a baseline 3.1× its own (H200)
            assert entry["baseline_us"] < 1.5 * alone.clocks.device.median_us, entry


@pytest.mark.parametrize(
    ("canaries", "wait_s", "found"),
    [
        ([50.0, 60.0], 0.0, True),
        # a busy canary (another context's time slice) starts the count again
        ([2300.0, 50.0, 2300.0, 50.0, 40.0], 60.0, True),
        ([50.0, 2300.0], 0.0, False),
        ([2300.0], 0.0, False),
    ],
)
def test_a_card_is_quiet_after_two_quick_canaries_in_a_row(
    canaries: list[float], wait_s: float, found: bool
) -> None:
    left = iter(canaries)
    assert witness_rounds.quiet(lambda: next(left), wait_s) is found
    assert next(left, None) is None  # no canary more than needed


@pytest.mark.parametrize(
    ("kind", "claim", "lowers", "base_lowers", "fails"),
    [
        # On a card the time a call claims is held to the witnessed bound, 15 % slack.
        ("cuda", witness_rounds.Claim(8.6, None, None), [10.0, 12.0], [], None),
        (
            "cuda",
            witness_rounds.Claim(8.4, None, None),
            [10.0, 12.0],
            [],
            "calls took at least 10.00",
        ),
        # ... and its ratio to the fastest baseline round, 15 % slack.
        ("cuda", witness_rounds.Claim(10.0, 0.86, "b"), [10.0], [10.0, 11.0], None),
        ("cuda", witness_rounds.Claim(10.0, 0.84, "b"), [10.0], [10.0, 11.0], "1.000× of it"),
        # On the CPU only a ratio ten times too good fails; no absolute bound.
        ("cpu", witness_rounds.Claim(0.1, 0.11, "b"), [10.0], [10.0], None),
        ("cpu", witness_rounds.Claim(0.1, 0.09, "b"), [10.0], [10.0], "the row claims 0.090×"),
        # Without a baseline's rounds (no ratio claimed), nothing is held on the CPU.
        ("cpu", witness_rounds.Claim(0.001, None, None), [10.0], [], None),
    ],
)
def test_a_claim_is_held_to_the_fastest_rounds_the_witness_timed(
    kind: str,
    claim: witness_rounds.Claim,
    lowers: list[float],
    base_lowers: list[float],
    fails: str | None,
) -> None:
    problem = witness_rounds.short_of(kind, lowers, base_lowers, claim, 100)
    if fails is None:
        assert problem is None
    else:
        assert problem is not None and fails in problem and "judged apart" in problem


def test_a_helper_a_plugins_worker_left_behind_stops_with_the_next_plugins_process(
    here: Path,
) -> None:
    """A worker's helper that left its group and its parent, and outlived the worker
    (an orphan of the fork server), is stopped while a later witness times a
    baseline, and killed when that witness ends. Until the twenty-fifth session
    only orphans that started after the witness's own process were looked for."""
    program, setsid = HELPERS["an orphan"]
    code = STARTS_A_HELPER.replace("PROGRAM", repr(program)).replace("SETSID", str(setsid))
    name = write(here, "leaving_kernels", code.replace("ORPHAN", repr(ORPHAN)))
    first = WitnessProcess(SHIPPED_FACTORY, (name,), CPU)
    helper = _helper_pid(here)
    first._process.kill()  # gone without its close: its helper lives on
    first._process.join()
    later = WitnessProcess(SHIPPED_FACTORY, (), CPU)
    try:
        with later.stopped():
            assert _settled(helper, lambda s: s == "T") == "T"
    finally:
        later.close()
        first.close()
    assert _settled(helper, lambda s: s in ("", "Z")) in ("", "Z")


def test_what_a_plugins_worker_started_ends_with_the_worker(here: Path) -> None:
    """A helper in the worker's own group or session, still its child, is killed when
    the worker is closed (it was left running until the twenty-fifth session)."""
    from conftest import FAST
    from matprobe.run.worker import Worker

    program, setsid = HELPERS["in a session of its own"]
    code = STARTS_A_HELPER.replace("PROGRAM", repr(program)).replace("SETSID", str(setsid))
    name = write(here, "worker_helper_kernels", code.replace("ORPHAN", repr(ORPHAN)))
    worker = Worker(plugins=(name,), device=CPU, policy=FAST, run_id=None, timeout_s=60)
    worker.spawn()
    try:
        worker._start(None)  # set up: the plugin imported, its helper started
        helper = _helper_pid(here)
        assert _state(helper) not in ("", "Z")
    finally:
        worker.close()
    assert _settled(helper, lambda s: s in ("", "Z")) in ("", "Z")
