"""The MPS path of the harness, on a machine without Metal: the measurement code
run end to end with ``torch.mps`` replaced by a stand-in that keeps the CPU's
tensors and records what the harness asked of it.

What this pins: an MPS pair is timed by the MPS recorder (events around eager
replays, the queue drained first), its references are float64 on the CPU (Metal
has none), every row says what its figure is, and the checks that fail a cheater
elsewhere fail it here too. What it cannot pin: Metal's own timings — the first
run on a Mac is the first word on those.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")

from conftest import FAST  # noqa: E402
from matprobe.kernels.peers.torch_ref import torch_matmul  # noqa: E402
from matprobe.measure import pair as measure_mod  # noqa: E402
from matprobe.measure.device import MPS_CACHE_BYTES, DeviceInfo  # noqa: E402
from matprobe.measure.inputs import MatmulInputs, float64_device  # noqa: E402
from matprobe.measure.pair import PairContext, measure_pair_safely  # noqa: E402
from matprobe.measure.results import Status  # noqa: E402
from matprobe.measure.sampling import MpsRecorder, recorder_for  # noqa: E402
from matprobe.measure.variants import KernelFn, Variant, variant_family  # noqa: E402
from matprobe.spec import MatmulSpec  # noqa: E402

MPS = DeviceInfo(kind="mps", name="Apple M9 (MPS)", l2_bytes=MPS_CACHE_BYTES)
AWKWARD = "op=matmul | batch=1 | m=1 | n=53 | k=40 | tA=0 | tB=1"


class FakeMps:
    """``torch.mps`` as the harness uses it: synchronize and timing events."""

    def __init__(self) -> None:
        self.synchronized = 0
        self.events_recorded = 0

    def synchronize(self) -> None:
        self.synchronized += 1

    @property
    def Event(self) -> type:  # noqa: N802 - torch.mps.Event's name
        fake = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                assert enable_timing
                self.at = 0.0

            def record(self) -> None:
                fake.events_recorded += 1
                self.at = time.perf_counter()

            def synchronize(self) -> None:
                fake.synchronize()

            def elapsed_time(self, end: Any) -> float:
                return float((end.at - self.at) * 1e3)  # ms, as torch's events

        return Event


@pytest.fixture
def fake_mps(monkeypatch: pytest.MonkeyPatch) -> FakeMps:
    fake = FakeMps()
    monkeypatch.setattr(torch, "mps", fake)
    # The tensors stay on the CPU: this machine has no Metal device to put them on.
    monkeypatch.setattr(measure_mod, "_torch_device", lambda device: "cpu")
    return fake


@variant_family(name="cheat.mps_zeros", ops={"matmul"}, devices=("mps",))
def MPS_ZEROS(  # noqa: N802 - a family is a module constant
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """Writes zeros: must FAIL on MPS as anywhere."""

    def run(inputs: MatmulInputs, out: Any) -> None:
        out.zero_()

    return run


def test_the_recorder_of_each_kind() -> None:
    assert isinstance(recorder_for("mps"), MpsRecorder)
    assert type(recorder_for("cpu")).__name__ == "CpuRecorder"


def test_mps_references_are_computed_on_the_cpu() -> None:
    assert float64_device("mps") == "cpu"
    assert float64_device(torch.device("mps")) == "cpu"
    assert float64_device("cpu") == "cpu"


def test_the_recorder_times_between_events_after_draining_the_queue(fake_mps: FakeMps) -> None:
    calls: list[int] = []
    recorder = MpsRecorder()
    recording = recorder.record([lambda: calls.append(1)], warmup=2)
    assert len(calls) == 2  # warm-up passes: Metal builds a pipeline per new shape
    drained = fake_mps.synchronized
    elapsed = recorder.time_us(recording)
    assert len(calls) == 3 and elapsed >= 0
    assert fake_mps.events_recorded == 2
    assert fake_mps.synchronized >= drained + 2  # before the start event, and at the end


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_torch_matmul_passes_and_is_timed_on_mps(fake_mps: FakeMps, dtype: str) -> None:
    spec = MatmulSpec.parse(AWKWARD).with_dtype(dtype)
    result = measure_pair_safely(spec, Variant(torch_matmul), PairContext(MPS, FAST))
    assert result.status is Status.PASS, result.reason
    assert result.clocks.device is not None and result.clocks.device.n >= 3
    assert any(note.startswith("MPS:") for note in result.clocks.notes)
    # A tiny spec would need thousands of eager calls a sample to pass 3× 96 MB:
    # capped, and said.
    assert any("rotation capped at 64 sets" in note for note in result.clocks.notes)
    assert fake_mps.events_recorded > 0


def test_a_cheater_fails_on_mps(fake_mps: FakeMps) -> None:
    spec = MatmulSpec.parse(AWKWARD).with_dtype("f16")
    result = measure_pair_safely(spec, Variant(MPS_ZEROS), PairContext(MPS, FAST))
    assert result.status is Status.FAIL
