"""``gemlite.a16w8``, the gemlite peer, without a GPU: the layout it hands gemlite
(read back the way gemlite's kernel dequantizes, it is our Q8_0 weights exactly)
and its refusals — gemlite missing, another device, another gemlite or triton,
the interpreter, shapes its linear layer does not take. Its kernel itself runs
only on a CUDA GPU (gemlite queries the GPU when imported)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from dataclasses import replace

import numpy as np
import pytest

from conftest import CPU
from matprobe.kernels.catalogue import shipped_registry
from matprobe.kernels.peers import gemlite_ref
from matprobe.kernels.peers.gemlite_ref import GEMLITE_A16W8, NAME, gemlite_layout
from matprobe.measure.device import DeviceInfo
from matprobe.measure.variants import Variant
from matprobe.spec import MatmulSpec

GPU = DeviceInfo(kind="cuda", name="fake H100", capability=(9, 0), sm_count=132)
SPEC = MatmulSpec.parse("op=matmul | batch=1 | m=1 | n=53 | k=96 | tA=0 | tB=1").with_dtype("q8_0")


def gemlite_dequantize(w_q: np.ndarray, scales: np.ndarray, group_size: int) -> np.ndarray:
    """gemlite's ``dequantize`` for unpacked int8 weights in ``W_group_mode`` 2
    (symmetric, no shift): ``w[i, j] = W_q[i, j]·scales[i // group_size, j]``, W_q
    ``[k, n]``, scales ``[k/group_size, n]`` (the group of row i is i // group_size:
    its kernels index the scales by (K offset)·BLOCK_SIZE_K / group_size)."""
    k = w_q.shape[0]
    groups = np.arange(k) // group_size
    return w_q.astype(np.float32) * scales.astype(np.float32)[groups, :]


@pytest.mark.parametrize(("n", "k"), [(53, 96), (7, 32), (64, 896)])
def test_the_layout_read_as_gemlite_reads_it_is_our_weights(n: int, k: int) -> None:
    torch = pytest.importorskip("torch")
    from matprobe.measure.inputs import make_inputs
    from matprobe.quant import dequantize_q8_0

    s = replace(SPEC, n=n, k=k)
    inputs = make_inputs(s, seed=3)
    quants, scales = inputs.b[0], inputs.scales[0]
    w_q, d = gemlite_layout(quants, scales)
    assert w_q.shape == (k, n) and d.shape == (k // 32, n)
    assert w_q.dtype == torch.int8 and d.dtype == torch.float16
    # views, not copies: nothing is repacked per call
    assert w_q.data_ptr() == quants.data_ptr() and d.data_ptr() == scales.data_ptr()
    ours = dequantize_q8_0(quants, scales).numpy()  # [n, k], exact in fp32
    theirs = gemlite_dequantize(w_q.numpy(), d.contiguous().numpy(), 32)
    assert np.array_equal(theirs.T, ours)


def test_it_is_a_peer_registered_with_q8_0_only() -> None:
    family = shipped_registry().family(NAME)
    assert family is GEMLITE_A16W8 and family.peer and not family.baseline
    assert family.dtypes == frozenset({"q8_0"}) and family.devices == frozenset({"cuda"})
    assert family.activation_quant is None  # fp16 activations: the plain Q8_0 bound
    assert [v.tag for v in family.variants()] == ["sc0", "sc1"]


def test_without_gemlite_it_is_refused_as_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gemlite", None)  # find_spec: not installed
    for variant in GEMLITE_A16W8.variants():
        reason = variant.unsupported_reason(SPEC, GPU)
        assert reason is not None and "gemlite" in reason and "not installed" in reason, reason


def test_on_the_cpu_it_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    installed(monkeypatch)
    for variant in GEMLITE_A16W8.variants():
        assert variant.unsupported_reason(SPEC, CPU) == "runs on cuda, not cpu"
        assert "CUDA GPUs only" in (GEMLITE_A16W8.supports(SPEC, variant.param_dict, CPU) or "")


def installed(
    monkeypatch: pytest.MonkeyPatch,
    gemlite: tuple[int, ...] | None = (0, 6, 0),
    triton: tuple[int, ...] | None = (3, 6, 0),
) -> None:
    """gemlite (and torch, triton) found by ``find_spec``, at these versions, and the
    interpreter off: the family's own predicate decides."""
    for name in ("gemlite", "torch", "triton"):
        if name == "gemlite" or importlib.util.find_spec(name) is None:
            module = types.ModuleType(name)
            module.__spec__ = importlib.machinery.ModuleSpec(name, None)
            monkeypatch.setitem(sys.modules, name, module)
    versions = {"gemlite": gemlite, "triton": triton}
    monkeypatch.setattr(gemlite_ref, "_version", lambda dist: versions.get(dist))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def test_on_a_gpu_with_gemlite_0_6_it_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    installed(monkeypatch)
    bias = MatmulSpec.parse(
        "op=matmul_bias_add | batch=1 | m=1 | n=1152 | k=896 | tA=0 | tB=0"
    ).with_dtype("q8_0")
    view, copy = GEMLITE_A16W8.variants()
    for variant in (view, copy):
        assert variant.unsupported_reason(bias, GPU) is None
    # a ragged n: only the padded copy of the scales (gemlite loads them unmasked)
    assert copy.unsupported_reason(SPEC, GPU) is None
    reason = view.unsupported_reason(SPEC, GPU)
    assert reason is not None and "n=53" in reason and "sc=1" in reason, reason


@pytest.mark.parametrize(
    ("versions", "fragment"),
    [
        ({"gemlite": (0, 5, 3)}, "written against gemlite 0.6"),
        ({"gemlite": (0, 7, 0)}, "found 0.7.0"),
        ({"triton": (3, 4, 0)}, "needs triton >= 3.6, found 3.4.0"),
    ],
)
def test_another_gemlite_or_an_older_triton_is_refused(
    monkeypatch: pytest.MonkeyPatch, versions: dict[str, tuple[int, ...]], fragment: str
) -> None:
    installed(monkeypatch, **versions)
    reason = Variant(GEMLITE_A16W8, (("sc", 1),)).unsupported_reason(SPEC, GPU)
    assert reason is not None and fragment in reason, reason


def test_the_interpreter_and_shapes_it_does_not_take_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed(monkeypatch)
    variant = GEMLITE_A16W8.variants()[1]  # sc=1: takes a ragged n
    refused = {
        "batch=1": replace(SPEC, batch=2),
        "needs m=1": replace(SPEC, m=17),
        "tA=0": replace(SPEC, tA=True),
        "op matmul_alpha_beta not implemented": replace(
            SPEC, op="matmul_alpha_beta", alpha=0.5, beta=0.5
        ),
        "dtype f16 not supported": replace(SPEC, dtype="f16"),
        "k=40 is not a multiple": replace(SPEC, k=40),
    }
    for fragment, spec in refused.items():
        reason = variant.unsupported_reason(spec, GPU)
        assert reason is not None and fragment in reason, (fragment, reason)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    reason = variant.unsupported_reason(SPEC, GPU)
    assert reason is not None and "TRITON_INTERPRET=1" in reason, reason


def test_the_version_is_read_without_importing() -> None:
    assert gemlite_ref._version("no-such-distribution-matprobe") is None
    found = gemlite_ref._version("numpy")
    assert found is not None and found[0] >= 1
