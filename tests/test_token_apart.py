"""``matprobe token --table`` with a table that names plugins: the plugins run in a
process of their own, never in the one that poses, times and judges the token.

Until the twenty-fifth session that process imported the table's plugins and
ran their kernels beside its own judge, guarded by the tamper snapshot — which a
plugin can replace. These tests load each plugin only as a table's winner (the
store's check of its verdicts, tested in ``test_dispatch.py``, is waived here:
what is tested is what the token does with a winner that got that far), and
each fails on the code before (5df8683): the comparison a plugin
patched there PASSed its zeros, the baseline it slowed made it win, the helper
it started ran through the baseline's timing."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the token needs torch (CPU build is enough)")

from conftest import NO_GPU, on_a_card, run_cli  # noqa: E402
from matprobe.dispatch import DispatchTable, Entry  # noqa: E402
from matprobe.measure.device import cuda_available, detect  # noqa: E402
from matprobe.run.plugin_process import described_registry  # noqa: E402
from matprobe.token.step import WEIGHT_SITES, site_specs  # noqa: E402
from matprobe.token.weights import small_config  # noqa: E402

#: A plugin of one family, ``apart.mine``: the right answer in float64, rounded
#: once — then ``{cheat}``, which each test fills in.
PLUGIN = """
import os
import torch
from matprobe.measure.variants import variant_family

ALL_OPS = ("matmul", "matmul_bias_add", "matmul_alpha_beta")
CALLS = [0]


def exact(inputs):
    a = inputs.a_mk().to(torch.float64)
    b = inputs.b_kn().to(torch.float64)
    result = inputs.alpha * (a @ b)
    if inputs.bias is not None:
        result = result + inputs.bias.to(torch.float64)
    return result


@variant_family(name="apart.mine", ops=ALL_OPS, devices=("cpu", "cuda"))
def mine(spec, params, device):
    def run(inputs, out):
        CALLS[0] += 1
        out.copy_(answer(inputs, out))

    return run


def answer(inputs, out):
    return exact(inputs)


FAMILIES = (mine,)
{cheat}
"""

#: What a cheating plugin adds; each would pass on the code before.
CHEATS = {
    # The judge's comparison and the tamper check replaced where they run: on the
    # code before, the token's own process — zeros PASSed there.
    "forges the comparison": """
import matprobe.measure.tamper as tamper
import matprobe.token.bench as bench
import matprobe.token.judge as judge
import matprobe.token.validate as validate
from matprobe.token.validate import LogitError

def no_error(out, ref):
    return LogitError(0.0, 0.0, 0)

validate.logit_error = judge.logit_error = bench.logit_error = no_error
tamper.Snapshot.changed = lambda self, namespaces=None: []

def answer(inputs, out):
    return torch.zeros_like(out)
""",
    # Outputs remembered after the first few calls (the validation trials'): every
    # timed replay, on a fresh input, gets an old answer.
    "memoises": """
KEPT = {}

def answer(inputs, out):
    key = tuple(out.shape)
    if CALLS[0] > 27 and key in KEPT:  # 9 a token: warm-up, 2 validation trials
        return KEPT[key]
    KEPT[key] = exact(inputs).clone()
    return KEPT[key]
""",
    # The reply loop of its own process made to say "done" without a replay.
    "skips its replays": """
import matprobe.dispatch.apart_child as child
child.TableServer._run = lambda self, name, replays: ("done",)
""",
    # Its process ends in the middle of the timed rounds.
    "dies in the rounds": """
def answer(inputs, out):
    if CALLS[0] > 40:
        os._exit(3)
    return exact(inputs)
""",
}


@pytest.fixture
def in_a_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The current directory is a kernel engineer's repo (plugins import from there);
    the store's check of a table's verdicts waived (see the module doc)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.setattr("matprobe.dispatch.unjudged_entries", lambda table, store: [])
    yield tmp_path


def table_of(plugin: str, cheat: str, where: Path, device: str = "cpu") -> Path:
    """A table whose every weight site of the small token is won by ``plugin``'s
    family (its fingerprint read in a child process: this one imports nothing)."""
    source = textwrap.dedent(PLUGIN).replace("{cheat}", textwrap.dedent(cheat))
    (where / f"{plugin}.py").write_text(source, encoding="utf-8")
    family = described_registry(plugins=(plugin,)).family("apart.mine")
    (variant,) = family.variants()
    specs = site_specs(small_config(), context=128, dtype="f16")
    here = detect(device)
    table = DispatchTable(
        device={"name": here.name, "kind": here.kind, "capability": here.capability},
        versions=dict(here.versions),
        dtype="f16",
        policy="p",
        families={family.name: family.source_fingerprint},
        entries=tuple(
            Entry(specs[site].key(), family.name, {}, variant.id, 1.0, 2.0, 0.5)
            for site in WEIGHT_SITES
        ),
        plugins=(plugin,),
    )
    path = where / "table.json"
    table.write(path)
    return path


def token(
    table: Path, *more: str, device: str = "cpu", modes: str = "eager,eager-none,eager+table"
) -> tuple[int, dict[str, Any]]:
    """``matprobe token --small`` (on the CPU), eager beside the table's mode; the exit
    status and the JSON it wrote."""
    out = table.parent / "token.json"
    code, _ = run_cli(
        "token", "--small", "--device", device, "--modes", modes,
        "--rounds", "4", "--table", str(table), "--json", str(out), *more,
    )  # fmt: skip
    return code, json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}


def row(data: dict[str, Any], mode: str) -> dict[str, Any]:
    (found,) = [m for m in data["modes"] if m["name"] == mode]
    return found


ON_A_CARD = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason=NO_GPU)]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=ON_A_CARD)])
def test_a_tables_plugin_runs_apart_and_its_honest_kernels_pass(
    in_a_repo: Path, capsys: pytest.CaptureFixture[str], device: str
) -> None:
    """Never imported here; every timed replay judged here (on a card, its logits
    and KV slots through CUDA IPC); the clock and the kernel count say whose they
    are; the profile of its mode is recorded there. (On the CPU both processes
    time on one thread each meanwhile: this one's count is put back after.)"""
    table = table_of("honest_kernels", "", in_a_repo, device)
    profile = in_a_repo / "table.jsonl"
    more = ("--profile", str(profile), "--profile-mode", "eager+table")
    threads = torch.get_num_threads()
    # on a card torch.compile's mode too (its custom op compiled there)
    modes = "eager,eager-none,eager+table" + (",compile+table" if device == "cuda" else "")
    code, data = token(table, *more, device=device, modes=modes)
    assert torch.get_num_threads() == threads
    err = capsys.readouterr().err
    assert code == 0, err
    assert "honest_kernels" not in sys.modules
    for compiled in ("compile+table",) if device == "cuda" else ():
        assert row(data, compiled)["status"] == "PASS", row(data, compiled)["reason"]
    mine = row(data, "eager+table")
    assert mine["status"] == "PASS", mine["reason"]
    # every round's replay (one a warm-up round), and on a card every window's 4 too
    assert mine["judged_replays"] == 5 * (5 if device == "cuda" else 1)
    assert len(mine["samples_us"]) == 4
    assert all(us > 0 for us in mine["samples_us"])
    assert "its word" in mine["kernels"]["what"]
    assert any("never does" in note and "eager+table" in note for note in data["notes"])
    events = [json.loads(line) for line in profile.read_text(encoding="utf-8").splitlines()]
    backends = {e["event"]["data"].get("backend") for e in events}
    assert "matprobe-table" in backends


@pytest.mark.parametrize(
    ("cheat", "status", "why"),
    [
        ("forges the comparison", "FAIL", "norm-wise"),
        ("memoises", "FAIL", "timed replay 1 of"),
        ("skips its replays", "ERROR", "judged apart: its process said done, its outputs"),
        ("dies in the rounds", "ERROR", "judged apart: its process ended (exit code 3)"),
    ],
)
def test_a_tables_cheating_plugin_reaches_only_its_own_process(
    in_a_repo: Path, cheat: str, status: str, why: str
) -> None:
    """Whatever the plugin patches at import, or does in its kernels, the verdict is
    this process's; the baseline's row keeps its figures."""
    code, data = token(table_of("cheat_" + cheat.replace(" ", "_"), CHEATS[cheat], in_a_repo))
    mine, eager = row(data, "eager+table"), row(data, "eager")
    assert (mine["status"], mine["samples_us"]) == (status, []), mine
    assert why in mine["reason"]
    assert eager["status"] == "PASS" and len(eager["samples_us"]) == 4
    assert code == 0  # only the baseline's verdict fails the command without --strict


def test_a_tables_plugin_that_slows_the_baseline_slows_only_its_own_process(
    in_a_repo: Path,
) -> None:
    """Torch's linears patched at import to sleep 3 ms a call (the tamper check
    replaced too): on the code before, the eager baseline took ~27 ms more a token
    and the table's mode won by ~10×; now the eager token is as it is alone."""
    cheat = """
import time
import matprobe.measure.tamper as tamper

def slowed(fn):
    def slow(*args, **kwargs):
        time.sleep(0.003)
        return fn(*args, **kwargs)
    return slow

for name in ("mm", "addmm"):
    setattr(torch, name, slowed(getattr(torch, name)))
torch.nn.functional.linear = slowed(torch.nn.functional.linear)
tamper.Snapshot.changed = lambda self, namespaces=None: []
"""
    code, data = token(table_of("slowing_kernels", cheat, in_a_repo))
    assert code == 0
    eager, mine = row(data, "eager"), row(data, "eager+table")
    assert mine["status"] == "PASS"
    # nine weight matmuls of 3 ms would put the eager token over 27 ms
    assert eager["median_us"] < 15_000, eager["samples_us"]
    assert mine["median_us"] > eager["median_us"] * 0.5


def test_what_a_tables_plugin_started_stops_while_the_judge_times_its_own_modes(
    in_a_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A helper the plugin starts at import, in a session of its own, is stopped
    (``T`` in ``/proc``) during every timed call of this process's modes."""
    pid_file = in_a_repo / "helper.pid"
    # a helper per import (the process that describes its families imports it too),
    # each spinning for two minutes at the most
    cheat = f"""
import subprocess, sys
helper = subprocess.Popen(
    [sys.executable, "-c", "import time\\nt = time.time()\\nwhile time.time() < t + 120: pass"],
    start_new_session=True,
)
open({str(pid_file)!r}, "a").write(f"{{helper.pid}}\\n")
"""
    from matprobe.token import bench

    states: list[str] = []
    clock = bench.host_time_us

    def watched(call: Callable[[], object]) -> float:
        states.append(_stopped(_helpers(pid_file)[-1]))
        return clock(call)

    monkeypatch.setattr(bench, "host_time_us", watched)
    try:
        table = table_of("helper_kernels", cheat, in_a_repo)
        _kill(_helpers(pid_file))  # the describing process's: not the one under test
        code, data = token(table)
        assert code == 0 and row(data, "eager+table")["status"] == "PASS"
        assert states and set(states) == {"T"}, states
        assert _gone(_helpers(pid_file)[-1])  # killed with the plugin's process
    finally:
        _kill(_helpers(pid_file))


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _stopped(pid: int, wait_s: float = 1.0) -> str:
    """``pid``'s state once it reads ``T``, or after ``wait_s``: a stop signal is acted
    on when the process next runs, and on a loaded host a runnable process may wait
    for a core that long (it runs none of its code before it stops)."""
    import time

    deadline = time.monotonic() + wait_s
    while (state := _state(pid)) != "T" and time.monotonic() < deadline:
        time.sleep(0.001)
    return state


def _helpers(pid_file: Path) -> list[int]:
    """The pids of the helpers the plugin started, in order (the last: the token's
    table's process's)."""
    return [int(line) for line in pid_file.read_text(encoding="utf-8").split()]


def _state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    return text.rpartition(")")[2].split()[0]


def _gone(pid: int, wait_s: float = 5.0) -> bool:
    """Whether ``pid`` is gone, or a zombie, within ``wait_s`` seconds."""
    import time

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            if _state(pid) == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):  # gone; the second while being reaped
            return True
        time.sleep(0.05)
    return False


def test_a_table_whose_plugin_changed_since_is_refused_before_anything_runs(
    in_a_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table's process checks it as this one checks a table of matprobe's own
    families: a plugin edited since the table was written is a usage error."""
    table = table_of("edited_kernels", "", in_a_repo)
    with (in_a_repo / "edited_kernels.py").open("a", encoding="utf-8") as plugin:
        plugin.write("\n# edited after the table was written\n")
    code, data = token(table)
    assert (code, data) == (2, {})
    err = capsys.readouterr().err
    assert "--table, in its own process" in err and "changed" in err


@on_a_card
def test_on_a_card_what_a_tables_plugin_queued_at_import_is_drained_before_it_answers(
    in_a_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plugin that queues ~30 s of kernels on a stream of its own at import: its
    process synchronizes the whole device before each answer (its build, its
    replays), so nothing it queued then is left when it is stopped and this process
    times its own modes — a quiet card, figures that stand. (On an H200 the test
    took 53 s with 30 s queued, >110 s with 100 s: the wait is the plugin's own.)"""
    cheat = """
_side = torch.cuda.Stream()
with torch.cuda.stream(_side):
    for _ in range(1000):
        torch.cuda._sleep(60_000_000)
"""
    code, data = token(table_of("busy_at_import", cheat, in_a_repo, "cuda"), device="cuda")
    err = capsys.readouterr().err
    assert code == 0, err
    assert row(data, "eager")["status"] == row(data, "eager+table")["status"] == "PASS"


@on_a_card
def test_on_a_card_work_a_tables_plugin_left_queued_leaves_the_token_without_a_verdict(
    in_a_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plugin whose thread keeps two ~6 s kernels queued on a stream of its own,
    queueing another the moment the first of them ends: its process's answer waits
    for the work queued before it, and at least one kernel is left in flight when
    this process stops it — stopping its host side, not the kernel, which shares
    the card with this process's own timed modes by time slices. The canary, which
    waits 5 s for a quiet card, sees it, and the token's figures are no verdict.
    (One kernel at a time raced: on an H200 this test passed once and failed once,
    the answer sent before the thread queued the next.)"""
    cheat = """
import threading
import time


def _flood():
    side = torch.cuda.Stream()
    queued = []
    while True:
        queued = [done for done in queued if not done.query()]
        while len(queued) < 2:
            with torch.cuda.stream(side):
                torch.cuda._sleep(12_000_000_000)
                done = torch.cuda.Event()
                done.record(side)
            queued.append(done)
        time.sleep(0.0005)


threading.Thread(target=_flood, daemon=True).start()
"""
    code, _ = token(table_of("busy_kernels", cheat, in_a_repo, "cuda"), device="cuda")
    err = capsys.readouterr().err
    assert code == 1, err
    assert "the card was busy" in err and "no verdict" in err
