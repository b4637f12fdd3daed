"""What every registered family must do, checked once for all of them.

Parametrized over every family of the shipped registry (and, where it checks
the checks, the test fake ``fake.exact``), so a new family is covered the day
it is registered, without a test file of its own:

1. its module imports without torch or triton, and lists and plans its
   variants there: a missing library is a reason, never an ImportError;
2. its fingerprint covers its code: every grid point has its own, and editing
   any file of its module closure changes it;
3. a spec it does not take (another op, an unknown dimension, another dtype,
   another device) gets a reason, never an exception;
4. on awkward shapes, for every op × dtype it supports, the first grid point
   that takes the spec passes the harness's own validation (``validate_pair``:
   outputs prefilled with fresh values inside guard zones, the float64 reference);
5. the harness catches its real kernel made to cheat: writing nothing, zeroing
   its output, writing one element past it.

The Triton families (``interpreted_on_cpu``) share one wrapper contract, checked
here too: a build refuses what the family's predicate refuses, refuses a GPU
while the interpreter is on, a spec too large for the interpreter is a CPU
reason, and the built kernel names a wrong operand instead of launching on it.
The interpreter is slow (~10 ms a program), so the shapes are small and each
(family, spec) runs one grid point, twice.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from conftest import NOT_INTERPRETING, interpreting, python_c
from matprobe.errors import MatprobeError
from matprobe.kernels.catalogue import shipped_registry
from matprobe.measure.device import DeviceInfo
from matprobe.measure.fingerprint import module_closure
from matprobe.measure.inputs import MatmulInputs
from matprobe.measure.pair import GuardBreachError, validate_pair
from matprobe.measure.variants import KernelFn, Variant, VariantFamily, variant_family
from matprobe.spec import DTYPES, OP_KINDS, MatmulSpec

CPU = DeviceInfo(kind="cpu", name="test")
GPU = DeviceInfo(kind="cuda", name="fake H100", capability=(9, 0), sm_count=132)
DEVICE_KINDS = ("cpu", "cuda", "mps")
TRIALS = 2


SHIPPED = shipped_registry().families()
try:  # the fake needs torch; without it the shipped families' static checks still run
    from fake_variants import fake_exact

    FAKES = [fake_exact]
except ImportError:
    FAKES = []


def by_name(families: list[VariantFamily]) -> Any:
    return pytest.mark.parametrize("family", families, ids=[f.name for f in families])


def home(family: VariantFamily) -> DeviceInfo:
    """A device the family runs on: the CPU where it can."""
    return CPU if "cpu" in family.devices else GPU


# ---- 1. no torch, no triton ------------------------------------------------------------

NO_GPU_STACK = """
import json, sys
sys.modules["torch"] = None
sys.modules["triton"] = None
import importlib
from matprobe.measure.device import DeviceInfo
from matprobe.spec import MatmulSpec

found = {}
for module_name, name, kind, op, dtype in json.loads(sys.argv[1]):
    try:
        module = importlib.import_module(module_name)
        family = next(f for f in module.FAMILIES if f.name == name)
        spec = MatmulSpec(op=op, m=1, n=53, k=40, tB=True, dtype=dtype)
        device = DeviceInfo(kind=kind, name="x")
        found[name] = [v.unsupported_reason(spec, device) for v in family.variants()]
    except BaseException as exc:
        found[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def without_gpu_stack() -> dict[str, Any]:
    """Per family: its variants' reasons in a process where torch and triton cannot be
    imported, or the exception importing or planning it raised there."""
    asks = [(f.build.__module__, f.name, home(f).kind, min(f.ops), min(f.dtypes)) for f in SHIPPED]
    found: dict[str, Any] = json.loads(python_c(NO_GPU_STACK, json.dumps(asks)))
    return found


@by_name(SHIPPED)
def test_imports_and_plans_without_torch_or_triton(
    family: VariantFamily, without_gpu_stack: dict[str, Any]
) -> None:
    """Listing and planning work on a machine without the GPU stack."""
    reasons = without_gpu_stack[family.name]
    assert isinstance(reasons, list), f"{family.build.__module__}: {reasons}"
    assert len(reasons) == len(family.variants())
    for reason in reasons:
        assert reason and "not installed" in reason, reason


# ---- 2. the fingerprint covers the code ------------------------------------------------


@pytest.fixture
def module_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], dict[str, Path]]:
    """Copies a module's closure (see ``measure.fingerprint``) to ``tmp_path`` and points
    the loaded module's ``__file__`` at the copy: editing the copies edits the code a
    family's fingerprint is taken from. Returns the copies by module name."""

    def copy(module_name: str) -> dict[str, Path]:
        module = sys.modules[module_name]
        path = Path(module.__file__ or "")
        copies = {}
        for name, file in module_closure(module_name, path).items():
            target = tmp_path / file.relative_to(path.parent)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(file, target)
            copies[name] = target
        monkeypatch.setattr(module, "__file__", str(copies[module_name]))
        return copies

    return copy


@by_name(SHIPPED)
def test_fingerprint_covers_its_code(
    family: VariantFamily, module_copy: Callable[[str], dict[str, Path]]
) -> None:
    assert family.source_fingerprint
    variants = family.variants()
    assert len({v.fingerprint for v in variants}) == len(variants), "grid points share one"

    def fingerprint_now() -> str:
        again = variant_family(name=family.name, ops=family.ops, supports=family.supports,
                               grid=family.grid)(family.build)  # fmt: skip
        return again.source_fingerprint

    before = fingerprint_now()
    copies = module_copy(family.build.__module__)
    assert fingerprint_now() == before, "the same text elsewhere must hash the same"
    for name, file in copies.items():
        text = file.read_text(encoding="utf-8")
        file.write_text(text + "\n# edited\n", encoding="utf-8")
        assert fingerprint_now() != before, f"editing {name} leaves the fingerprint as it was"
        file.write_text(text, encoding="utf-8")
    assert fingerprint_now() == before


# ---- 3. capability reasons -------------------------------------------------------------


def plain_spec(family: VariantFamily) -> MatmulSpec:
    """A small GEMV in an op and a dtype of the family."""
    return with_width(
        MatmulSpec(op=min(family.ops), m=1, n=53, k=40, tB=True, dtype=min(family.dtypes)), 53
    )


def with_width(spec: MatmulSpec, n: int) -> MatmulSpec:
    """``spec`` with n output columns: for ``matmul_swiglu`` that is n0 = n1 = n (gate
    and up stacked, n left to the parts), for any other op n itself."""
    if spec.kind == "matmul_swiglu":
        return replace(spec, n=None, n0=n, n1=n)
    return replace(spec, n=n)


def refusals(family: VariantFamily) -> dict[str, tuple[MatmulSpec, DeviceInfo]]:
    """Specs and devices the family does not take, by what is wrong with them."""
    device, base = home(family), plain_spec(family)
    cases = {
        "unknown k": (replace(base, k=None), device),
        "unknown tB": (replace(base, tB=None), device),
        "no dtype": (replace(base, dtype=None), device),
    }
    for op in (*OP_KINDS, "matmul_softmax"):
        if op not in family.ops:
            cases[f"op {op}"] = (replace(base, op=op), device)
    for dtype in DTYPES:
        if dtype not in family.dtypes:
            cases[f"dtype {dtype}"] = (replace(base, dtype=dtype), device)
    for kind in DEVICE_KINDS:
        if kind not in family.devices:
            cases[f"device {kind}"] = (base, DeviceInfo(kind=kind, name="elsewhere"))
    return cases


@by_name(SHIPPED + FAKES)
def test_refusals_are_reasons(family: VariantFamily) -> None:
    for variant in family.variants():
        for what, (spec, device) in refusals(family).items():
            reason = variant.unsupported_reason(spec, device)
            assert isinstance(reason, str) and reason, f"{variant.id}, {what}: {reason!r}"
        # Shapes at the edges reach the family's own predicate: an answer, never an error.
        base = plain_spec(family)
        for spec in (replace(base, n=0), replace(base, k=0), replace(base, n=151936, k=896),
                     replace(base, batch=70000)):  # fmt: skip
            reason = variant.unsupported_reason(spec, home(family))
            assert reason is None or (isinstance(reason, str) and reason), spec


# ---- 4. awkward shapes, every op and dtype ---------------------------------------------


@dataclass(frozen=True)
class Case:
    """An awkward shape: ragged against every power-of-two tile, or degenerate."""

    name: str
    n: int
    k: int
    batch: int = 1


CASES = (Case("n53_k40", 53, 40), Case("n1", 1, 40), Case("k1", 7, 1), Case("batch3", 13, 40, 3))
#: (tA, tB): W stored [n, k] first, decode's weight layout
LAYOUTS = ((False, True), (False, False), (True, True), (True, False))
#: m: decode's 1, else just past a 16-row tile (a tiled GEMM refuses m = 1)
MS = (1, 17)
#: a family for large K only (split-K) takes the case 1024 columns deeper
K_SHIFTS = (0, 1024)
#: Q8_0 stores K in blocks of 32: its awkward K is three blocks (k=1 becomes one)
Q8_0_K = {40: 96, 1: 32}


def awkward_spec(op: str, dtype: str, case: Case, m: int, k: int, layout: tuple[bool, bool]
                 ) -> MatmulSpec:  # fmt: skip
    """α·A·B with β ≠ 0 for the alpha_beta op (C₀ read), and a bias too at batch 3;
    for matmul_swiglu, case.n outputs from gate and up of case.n rows each."""
    ab = op == "matmul_alpha_beta"
    return with_width(MatmulSpec(
        op=op, batch=case.batch, m=m, n=case.n, k=k, tA=layout[0], tB=layout[1], dtype=dtype,
        alpha=0.125 if ab else None, beta=0.5 if ab else None,
        bias=True if ab and case.batch > 1 else None,
    ), case.n)  # fmt: skip


def pick(family: VariantFamily, op: str, dtype: str, case: Case, device: DeviceInfo,
         rotate: int = 0) -> tuple[MatmulSpec, Variant] | str:  # fmt: skip
    """The case's spec in the first layout (from the ``rotate``-th on), m and K the
    family takes, with the first grid point that takes it; else why not."""
    first_reason = None
    for layout in LAYOUTS[rotate % 4 :] + LAYOUTS[: rotate % 4]:
        for m in MS:
            for shift in K_SHIFTS:
                k = Q8_0_K[case.k] if dtype == "q8_0" else case.k
                spec = awkward_spec(op, dtype, case, m, k + shift, layout)
                for variant in family.variants():
                    reason = variant.unsupported_reason(spec, device)
                    if reason is None:
                        return spec, variant
                    first_reason = first_reason or reason
    return first_reason or "no grid point"


def eager_torch_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """``torch.compile`` as the identity: the function Inductor would compile runs
    eagerly (as tests/test_torch_compile.py runs it); Inductor itself needs a GPU."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch, "compile", lambda fn, **_: fn)


#: GPU-only families with a cheap stand-in on the CPU: built for a (fake) GPU, run on
#: CPU tensors once the stand-in is in place.
CPU_STAND_INS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "torch.compile": eager_torch_compile,
}


def cpu_run(family: VariantFamily, monkeypatch: pytest.MonkeyPatch) -> DeviceInfo:
    """The device to build for so that the kernel runs on CPU tensors, or skip."""
    if family.interpreted_on_cpu and not interpreting():
        pytest.skip(NOT_INTERPRETING)
    missing = [m for m in family.requires if not _importable(m)]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}, which is not installed")
    if "cpu" in family.devices:
        return CPU
    stand_in = CPU_STAND_INS.get(family.name)
    if stand_in is None:
        pytest.skip(f"runs on {'/'.join(sorted(family.devices))} only: needs a GPU")
    stand_in(monkeypatch)
    return GPU


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def validate(family: VariantFamily, spec: MatmulSpec, fn: KernelFn) -> str | None:
    """The harness's verdict on ``fn`` for ``spec`` on CPU tensors: None when it passes
    (judged on the x its declared activation quantization computes with, if any)."""
    try:
        checked = validate_pair(spec, fn, CPU, TRIALS, interpreted=family.interpreted_on_cpu,
                                activation_quant=family.activation_quant)  # fmt: skip
    except GuardBreachError as breach:
        return str(breach)
    return checked.failure


OP_DTYPES = [
    pytest.param(family, op, dtype, id=f"{family.name}-{op}-{dtype}")
    for family in SHIPPED + FAKES
    for op in sorted(family.ops)
    for dtype in sorted(family.dtypes)
]


@pytest.mark.parametrize(("family", "op", "dtype"), OP_DTYPES)
def test_validates_on_awkward_shapes(
    family: VariantFamily, op: str, dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each case in a layout of its own (the layouts rotate over cases, ops and dtypes,
    so every layout the family takes meets every op and dtype)."""
    device = cpu_run(family, monkeypatch)
    rotate = sorted(family.ops).index(op) + sorted(family.dtypes).index(dtype)
    failures, refused = [], {}
    for i, case in enumerate(CASES):
        picked = pick(family, op, dtype, case, device, rotate + i)
        if isinstance(picked, str):
            refused[case.name] = picked
            continue
        spec, variant = picked
        if failure := validate(family, spec, variant.build(spec, device)):
            failures.append(f"{variant.id} on {spec.key()}: {failure}")
    assert not failures, "\n".join(failures)
    if len(refused) == len(CASES):
        if len(set(refused.values())) == 1:  # the same reason for every shape: this machine
            pytest.skip(next(iter(refused.values())))
        pytest.fail(f"takes none of the awkward shapes: {refused}")


# ---- 4b. prologues: every family that declares one passes it on awkward shapes ---------

#: ε of the awkward norm specs: Llama's (Qwen2.5's is 1e-6)
NORM_EPS = 1e-5

PROLOGUE_OP_DTYPES = [
    pytest.param(family, op, dtype, id=f"{family.name}-{prologue}-{op}-{dtype}")
    for family in SHIPPED + FAKES
    for prologue in sorted(family.prologues)
    for op in sorted(family.ops)
    for dtype in sorted(family.dtypes)
]


def normed(spec: MatmulSpec) -> MatmulSpec:
    return replace(spec, rmsnorm=NORM_EPS)


@pytest.mark.parametrize(("family", "op", "dtype"), PROLOGUE_OP_DTYPES)
def test_validates_its_rmsnorm_prologue(
    family: VariantFamily, op: str, dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """x the residual stream, the kernel normalising it on the way (``rmsnorm=ε``):
    judged against a float64 RMSNorm + the op on one awkward shape it takes — the
    shapes rotate over ops and dtypes (the interpreter's time: the plain suite
    above already walks every shape through the same sums)."""
    device = cpu_run(family, monkeypatch)
    rotate = sorted(family.ops).index(op) + sorted(family.dtypes).index(dtype)
    for i in range(len(CASES)):
        picked = pick_normed(family, op, dtype, CASES[(rotate + i) % len(CASES)], device, rotate)
        if picked is not None:
            spec, variant = picked
            failure = validate(family, spec, variant.build(spec, device))
            assert failure is None, f"{variant.id} on {spec.key()}: {failure}"
            return
    pytest.skip(f"{family.name} takes no awkward {op} {dtype} shape with a norm")


def pick_normed(family: VariantFamily, op: str, dtype: str, case: Case, device: DeviceInfo,
                rotate: int) -> tuple[MatmulSpec, Variant] | None:  # fmt: skip
    """The first layout, m and K (from the ``rotate``-th layout on) whose normed spec
    some grid point takes (the norm needs tA = 0), with that grid point."""
    for layout in LAYOUTS[rotate % 4 :] + LAYOUTS[: rotate % 4]:
        for m in MS:
            for shift in K_SHIFTS:
                k = Q8_0_K[case.k] if dtype == "q8_0" else case.k
                spec = normed(awkward_spec(op, dtype, case, m, k + shift, layout))
                for variant in family.variants():
                    if variant.unsupported_reason(spec, device) is None:
                        return spec, variant
    return None


def ignores_the_gain(fn: KernelFn) -> KernelFn:
    import torch

    def run(inputs: Any, out: Any) -> None:
        fn(replace(inputs, gain=torch.ones_like(inputs.gain)), out)

    return run


@by_name([family for family in SHIPPED + FAKES if "rmsnorm" in family.prologues])
def test_a_norm_done_wrong_fails(family: VariantFamily, monkeypatch: pytest.MonkeyPatch) -> None:
    """The family's own kernel with the gain replaced by ones, and its kernel for the
    spec without the norm (x multiplied as given): both fail the normed spec."""
    device = cpu_run(family, monkeypatch)
    picked = pick_normed(family, "matmul", main_dtype(family), CASES[0], device, 0)
    assert picked is not None, f"{family.name} takes no normed n53 matmul"
    spec, variant = picked
    plain = variant.build(replace(spec, rmsnorm=None), device)
    for cheat in (ignores_the_gain(variant.build(spec, device)),
                  lambda inputs, out: plain(replace(inputs, gain=None), out)):  # fmt: skip
        failure = validate(family, spec, cheat)
        assert failure is not None and "error" in failure, failure


def test_families_without_the_prologue_refuse_normed_specs() -> None:
    """A spec asking for a norm is never run as a plain matmul by a family that lacks it."""
    spec = normed(MatmulSpec(op="matmul", m=1, n=64, k=64, tB=True, dtype="f16"))
    lacking = [family for family in SHIPPED + FAKES if "rmsnorm" not in family.prologues]
    assert lacking
    for family in lacking:
        for variant in family.variants():
            for device in (CPU, GPU):
                reason = variant.unsupported_reason(spec, device)
                assert reason is not None, variant.id


# ---- 5. the harness catches the family's kernel made to cheat ---------------------------


def writes_nothing(fn: KernelFn) -> KernelFn:
    def run(inputs: Any, out: Any) -> None:
        fn(inputs, out.clone())

    return run


def zeros_its_output(fn: KernelFn) -> KernelFn:
    def run(inputs: Any, out: Any) -> None:
        fn(inputs, out.clone())
        out.zero_()

    return run


def writes_past_the_end(fn: KernelFn) -> KernelFn:
    def run(inputs: Any, out: Any) -> None:
        import torch

        fn(inputs, out)
        past = torch.as_strided(out, (1,), (1,), out.storage_offset() + out.numel())
        past.copy_(out.reshape(-1)[-1:])

    return run


def writes_past_the_guard(fn: KernelFn) -> KernelFn:
    """Honest, plus one element 64 past the guard zone after its output (issue 20:
    such a store PASSed on an H100, landing where no guard was)."""

    def run(inputs: Any, out: Any) -> None:
        import torch

        from matprobe.measure.outputs import GUARD_MIN_ELEMENTS

        fn(inputs, out)
        far = out.storage_offset() + out.numel() + max(GUARD_MIN_ELEMENTS, out.numel()) + 64
        torch.as_strided(out, (1,), (1,), far).copy_(out.reshape(-1)[-1:])

    return run


CHEATS = {
    "writes_nothing": (writes_nothing, "error"),  # the prefill stays: far from the answer
    "zeros_its_output": (zeros_its_output, "error"),
    "writes_past_the_end": (writes_past_the_end, "wrote outside its output"),
    "writes_past_the_guard": (writes_past_the_guard, "wrote outside its output"),
}


@pytest.mark.parametrize("cheat", list(CHEATS))
@by_name(SHIPPED + FAKES)
def test_cheating_with_its_kernel_fails(
    family: VariantFamily, cheat: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    device = cpu_run(family, monkeypatch)
    op = "matmul" if "matmul" in family.ops else min(family.ops)
    dtype = "f32" if "f32" in family.dtypes else min(family.dtypes)
    picked = pick(family, op, dtype, CASES[2], device)
    if isinstance(picked, str):
        pytest.skip(picked)
    spec, variant = picked
    wrap, needle = CHEATS[cheat]
    failure = validate(family, spec, wrap(variant.build(spec, device)))
    assert failure is not None and needle in failure, failure


# ---- the Triton families' wrapper contract ---------------------------------------------

TRITON = [family for family in SHIPPED if family.interpreted_on_cpu]


def main_dtype(family: VariantFamily) -> str:
    """The dtype the contract is checked in: f16 (decode's), or the family's own (q8_0)."""
    return "f16" if "f16" in family.dtypes else min(family.dtypes)


def all_awkward_specs(family: VariantFamily) -> Iterator[MatmulSpec]:
    for op in sorted(family.ops):
        for case in CASES:
            for layout in LAYOUTS:
                for m in (*MS, 2):
                    for shift in K_SHIFTS:
                        dtype = main_dtype(family)
                        k = Q8_0_K[case.k] if dtype == "q8_0" else case.k
                        yield awkward_spec(op, dtype, case, m, k + shift, layout)


@by_name(TRITON)
def test_build_refuses_what_it_does_not_take(family: VariantFamily) -> None:
    """The builder re-checks the family's predicate: a refused spec never launches."""
    variant = family.variants()[0]
    refused = 0
    for spec in all_awkward_specs(family):
        reason = family.supports(spec, variant.param_dict, CPU)
        if reason is not None:
            with pytest.raises(MatprobeError, match=re.escape(f"{family.name}: {reason}")):
                variant.build(spec, CPU)
            refused += 1
    assert refused, "refuses none of the awkward specs: the check checked nothing"


@by_name(TRITON)
def test_the_interpreter_refuses_what_would_take_minutes(family: VariantFamily) -> None:
    """A spec too large for the interpreter is refused on the CPU, with that reason,
    and taken on a GPU."""
    op = "matmul" if "matmul" in family.ops else min(family.ops)
    picked = pick(family, op, main_dtype(family), CASES[0], GPU)
    assert not isinstance(picked, str), picked
    spec, variant = picked
    refused = {}
    for big in (with_width(spec, 151936), replace(with_width(spec, 4096), batch=1024)):
        refused[big.key()] = (variant.unsupported_reason(big, CPU) or "",
                              variant.unsupported_reason(big, GPU))  # fmt: skip
        if "too large for the Triton interpreter (CPU)" in refused[big.key()][0]:
            assert refused[big.key()][1] is None, refused
            return
    pytest.fail(f"{variant.id}: no large spec refused for the interpreter: {refused}")


@pytest.mark.interpreter
@by_name(TRITON)
def test_build_refuses_a_gpu_while_interpreting(family: VariantFamily) -> None:
    picked = pick(family, min(family.ops), main_dtype(family), CASES[0], GPU)
    assert not isinstance(picked, str), picked
    spec, variant = picked
    with pytest.raises(MatprobeError, match="TRITON_INTERPRET=1 is set"):
        variant.build(spec, GPU)


@pytest.mark.interpreter
@by_name(TRITON)
def test_kernel_names_a_wrong_operand(family: VariantFamily) -> None:
    """Built for f16 α·A·B + β·C₀ + bias (and for plain α·A·B), the kernel raises
    ValueError naming the operand that does not match, before it launches."""
    pytest.importorskip("torch")
    if "matmul_alpha_beta" not in family.ops:
        return names_a_wrong_operand_without_epilogue(family)
    picked = pick(family, "matmul_alpha_beta", main_dtype(family), CASES[0], CPU)
    assert not isinstance(picked, str), picked
    spec, variant = replace(picked[0], bias=True), picked[1]
    assert variant.unsupported_reason(spec, CPU) is None
    run, inputs, out = built_on_cpu(variant, spec)
    assert_each_named(
        run,
        [
            *wrong_outputs(inputs, out),
            (r"C0 is missing", replace(inputs, c0=None), out),
            (r"bias is missing", replace(inputs, bias=None), out),
            (r"A \(as .*\) has shape", replace(inputs, a=inputs.a[:, :, :-1]), out),
            (r"B.* has shape|W.* has shape", replace(inputs, b=inputs.b[:, :, :-1]), out),
            (r"tb=|has shape", replace(inputs, tb=not inputs.tb), out),  # B in the other layout
        ],
    )
    plain = replace(spec, op="matmul", alpha=None, beta=None, bias=None)
    assert_each_named(
        variant.build(plain, CPU),
        [("carry C0", inputs, out), ("carry a bias", replace(inputs, c0=None), out)],
    )


def names_a_wrong_operand_without_epilogue(family: VariantFamily) -> None:
    """The wrong-operand check for a family whose op has no epilogue operands
    (matmul_swiglu): A, W, out and the layout are named, and inputs that carry a C₀
    or a bias (another op's) are refused."""
    torch = pytest.importorskip("torch")
    picked = pick(family, min(family.ops), main_dtype(family), CASES[0], CPU)
    assert not isinstance(picked, str), picked
    spec, variant = picked
    run, inputs, out = built_on_cpu(variant, spec)
    bias = torch.zeros(out.shape[-1], dtype=out.dtype)
    assert_each_named(
        run,
        [
            *wrong_outputs(inputs, out),
            (r"A \(as .*\) has shape", replace(inputs, a=inputs.a[:, :, :-1]), out),
            (r"W.* has shape", replace(inputs, b=inputs.b[:, :-2, :]), out),
            (r"tb=|has shape", replace(inputs, tb=not inputs.tb), out),
            (r"carry C0", replace(inputs, c0=torch.zeros_like(out)), out),
            (r"carry a bias", replace(inputs, bias=bias), out),
        ],
    )


#: A call a kernel must refuse: what it must say, the inputs and the output given.
WrongCall = tuple[str, MatmulInputs, Any]


def built_on_cpu(variant: Variant, spec: MatmulSpec) -> tuple[KernelFn, MatmulInputs, Any]:
    """``variant`` built for ``spec`` on the CPU, its inputs of seed 0 and an output."""
    from matprobe.measure.inputs import make_inputs
    from matprobe.measure.outputs import empty_output

    return variant.build(spec, CPU), make_inputs(spec, seed=0), empty_output(spec, "cpu")


def wrong_outputs(inputs: MatmulInputs, out: Any) -> list[WrongCall]:
    """The wrong outputs every kernel must name: f32 for f16, one column wider."""
    import torch

    wider = torch.empty(*out.shape[:-1], out.shape[-1] + 1, dtype=out.dtype)
    return [
        (r"out is torch\.float32, expected torch\.float16", inputs, out.float()),
        (r"out has shape", inputs, wider),
    ]


def assert_each_named(run: KernelFn, wrong: list[WrongCall]) -> None:
    """Each call raises ValueError saying what is wrong (before the kernel launches)."""
    for needle, given, into in wrong:
        with pytest.raises(ValueError, match=needle):
            run(given, into)
