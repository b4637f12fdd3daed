"""Stale verdicts: the fingerprints that decide whether a stored result is served.

A family's fingerprint covers its whole wrapper module and the package modules
it imports; the timing policy's covers the measurement core's code, every
module of ``measure/``; the plan says why a pair that was measured before runs
again.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import CPU, python_c
from matprobe.measure import fingerprint
from matprobe.measure.device import DeviceInfo
from matprobe.measure.fingerprint import (
    imported_names,
    measurement_fingerprint,
    measurement_sources,
    module_closure,
    module_fingerprint,
)
from matprobe.measure.results import ErrorKind, ErrorMetrics, PairResult, Status
from matprobe.measure.timing import TimingPolicy
from matprobe.measure.variants import KernelFn, Variant, variant_family
from matprobe.run.runner import (
    ERRORED,
    FORCED,
    NEW,
    POLICY_CHANGED,
    SOURCE_CHANGED,
    PairState,
    make_plan,
)
from matprobe.run.store import ResultStore
from matprobe.spec import MatmulSpec

# ---- a family module in a temporary package ------------------------------------------

WRAPPER = '''"""A family: a wrapper with a constant; its kernel is imported by the builder."""

from __future__ import annotations

from typing import Any

from matprobe.measure.variants import variant_family

from . import _helpers

MAX_UNROLLED_TILES = 16


@variant_family(name="tmp.family", ops=("matmul",), devices=("cpu",))
def FAMILY(spec: Any, params: Any, device: Any) -> Any:
    from {pkg}._kernels import BLOCK

    return lambda inputs, out: (BLOCK, _helpers.SCALE, MAX_UNROLLED_TILES)
'''

FILES = {
    "__init__.py": "",
    "_kernels.py": "BLOCK = 64\n",
    "_helpers.py": "SCALE = 2\n",  # imported relatively
    "_unrelated.py": "OTHER = 1\n",  # a sibling nobody imports
}


def write_package(where: Path, pkg: str) -> Path:
    root = where / pkg
    root.mkdir(parents=True)
    for name, text in {**FILES, "wrapper.py": WRAPPER.format(pkg=pkg)}.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")


@pytest.fixture
def load_family(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], Any]]:
    """Imports ``<pkg>.wrapper`` afresh each call (the decorator hashes at import)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    loaded: set[str] = set()

    def forget(pkg: str) -> None:
        for name in [n for n in sys.modules if n == pkg or n.startswith(pkg + ".")]:
            del sys.modules[name]

    def load(pkg: str) -> Any:
        forget(pkg)
        loaded.add(pkg)
        importlib.invalidate_caches()
        return importlib.import_module(f"{pkg}.wrapper")

    yield load
    for pkg in loaded:
        forget(pkg)


def test_family_fingerprint_covers_its_module_and_imported_siblings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load_family: Callable[[str], Any]
) -> None:
    pkg = "mp_fp_family_a"
    root = write_package(tmp_path, pkg)
    monkeypatch.syspath_prepend(str(tmp_path))

    def fingerprint_now() -> str:
        return str(load_family(pkg).FAMILY.source_fingerprint)

    base = fingerprint_now()
    assert fingerprint_now() == base
    # A constant of the wrapper, outside the builder function.
    edit(root / "wrapper.py", "MAX_UNROLLED_TILES = 16", "MAX_UNROLLED_TILES = 32")
    assert fingerprint_now() != base
    edit(root / "wrapper.py", "MAX_UNROLLED_TILES = 32", "MAX_UNROLLED_TILES = 16")
    assert fingerprint_now() == base
    # A constant of the kernel module the builder imports inside its body.
    edit(root / "_kernels.py", "BLOCK = 64", "BLOCK = 128")
    kernel_edited = fingerprint_now()
    assert kernel_edited != base
    # A module imported relatively.
    edit(root / "_helpers.py", "SCALE = 2", "SCALE = 3")
    assert fingerprint_now() not in (base, kernel_edited)
    edit(root / "_helpers.py", "SCALE = 3", "SCALE = 2")
    assert fingerprint_now() == kernel_edited
    # A sibling that nothing imports is not part of the family.
    edit(root / "_unrelated.py", "OTHER = 1", "OTHER = 2")
    (root / "_new_module.py").write_text("X = 1\n", encoding="utf-8")
    assert fingerprint_now() == kernel_edited


def test_family_fingerprint_does_not_depend_on_the_checkout_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load_family: Callable[[str], Any]
) -> None:
    pkg = "mp_fp_family_b"
    first = write_package(tmp_path / "one", pkg)
    second = tmp_path / "elsewhere" / "deeper"
    shutil.copytree(first, second / pkg)
    monkeypatch.syspath_prepend(str(tmp_path / "one"))
    here = load_family(pkg)
    monkeypatch.syspath_prepend(str(second))
    there = load_family(pkg)
    assert Path(there.__file__).is_relative_to(second)
    assert here.FAMILY.source_fingerprint == there.FAMILY.source_fingerprint
    name = f"{pkg}.wrapper"
    assert module_fingerprint(name, first / "wrapper.py") == module_fingerprint(
        name, second / pkg / "wrapper.py"
    )
    assert sorted(module_closure(name, first / "wrapper.py")) == [
        pkg,
        f"{pkg}._helpers",
        f"{pkg}._kernels",
        name,
    ]


def _fingerprints_in_subprocess(code: str, seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    return python_c(code, env=env, cwd=Path(__file__).parent)


def test_fingerprints_are_the_same_in_every_process() -> None:
    """Hash seeds and object addresses must not leak in: a builder without a
    source file (generated code) once hashed its repr, which holds its address."""
    code = "\n".join([
        "from matprobe.measure.variants import variant_family",
        "from matprobe.kernels.triton.gemv_stream import GEMV_STREAM",
        "from matprobe.measure.timing import TimingPolicy",
        "ns = {'__name__': 'generated'}",
        "exec('def build(spec, params, device):\\n    return None\\n', ns)",
        "print(variant_family(name='gen', ops=('matmul',))(ns['build']).source_fingerprint)",
        "print(GEMV_STREAM.source_fingerprint)",
        "print(TimingPolicy().fingerprint)",
    ])  # fmt: skip
    assert _fingerprints_in_subprocess(code, "1") == _fingerprints_in_subprocess(code, "2")


# ---- the shipped families ----------------------------------------------------------------

SHIPPED = ["gemv", "gemv_stream", "splitk", "gemv_tn", "attention", "gemm"]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_families_hash_the_modules_their_sources_lists_named(name: str) -> None:
    """What the hand-made ``sources=`` lists named — the kernel file, the shared
    helpers, the epilogue the kernels call — is in the whole-module hash."""
    module = importlib.import_module(f"matprobe.kernels.triton.{name}")
    closure = module_closure(module.__name__, Path(module.__file__ or ""))
    kernels = f"matprobe.kernels.triton._{name}_kernels"
    assert {module.__name__, kernels, "matprobe.kernels.triton._common"} <= set(closure)
    assert closure[kernels].read_text(encoding="utf-8") == module.KERNELS_SOURCE
    if "matprobe.kernels.triton._blocks" in module.KERNELS_SOURCE:
        assert "matprobe.kernels.triton._blocks" in closure
    assert not any(n.startswith(("matprobe.measure", "matprobe.kernels.peers")) for n in closure)
    assert all(n.startswith("matprobe.kernels.triton") for n in closure)  # only the package


def test_imported_names_resolve_relative_and_from_imports() -> None:
    source = b"""
import a.b.e
from .. import x
from .d import y
from . import z as zz
from a.b import *

def f():
    from a.b.k import K
"""
    found = imported_names(source, "a.b.c", False)
    assert {"a", "a.b", "a.b.e", "a.x", "a.b.d", "a.b.d.y", "a.b.z", "a.b.k", "a.b.k.K"} <= found
    assert imported_names(b"from . import k", "a.b", True) >= {"a.b", "a.b.k"}
    assert imported_names(b"def broken(:", "a.b", True) == frozenset()


# ---- the measurement core's code (measure/) ---------------------------------------------


@pytest.fixture
def measurement_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the measurement modules, used in place of the real ones."""
    copy = tmp_path / "measure"
    copy.mkdir()
    for file in measurement_sources().values():
        shutil.copy(file, copy / file.name)
    measurement_fingerprint.cache_clear()
    monkeypatch.setattr(fingerprint, "MEASURE_DIR", copy)
    yield copy
    monkeypatch.undo()
    measurement_fingerprint.cache_clear()


def test_the_measurement_code_is_every_module_of_the_measure_folder() -> None:
    """No hand-kept list: the folder is what the policy fingerprint hashes."""
    found = measurement_sources()
    folder = Path(fingerprint.__file__).parent
    assert folder.name == "measure"
    assert set(found) == {
        "matprobe.measure" if p.stem == "__init__" else f"matprobe.measure.{p.stem}"
        for p in folder.glob("*.py")
    }
    assert {"matprobe.measure.timing", "matprobe.measure.validate", "matprobe.measure.pair",
            "matprobe.measure.variants", "matprobe.measure.fingerprint"} <= set(found)  # fmt: skip
    assert all(n == "matprobe.measure" or n.startswith("matprobe.measure.") for n in found)
    assert "matprobe.report.build" not in found
    assert not any(n.startswith(("matprobe.run", "matprobe.kernels"))
                   for n in found)  # fmt: skip


def test_policy_fingerprint_follows_the_measurement_code(measurement_copy: Path) -> None:
    real = Path(fingerprint.__file__).parent
    assert fingerprint.hash_files(measurement_sources(real)) == fingerprint.hash_files(
        measurement_sources(measurement_copy)
    )  # same bytes in another directory: the same hash
    before = TimingPolicy().fingerprint
    (measurement_copy / "validate.py").write_text(
        (measurement_copy / "validate.py").read_text(encoding="utf-8") + "\nSLACK = 2.0\n",
        encoding="utf-8",
    )
    assert TimingPolicy().fingerprint == before  # once per process: the code that runs
    measurement_fingerprint.cache_clear()
    stricter = TimingPolicy().fingerprint
    assert stricter != before
    # A file of the folder that is not a module does not count; any module does,
    # an edited one or one added later, whatever its name.
    (measurement_copy / "NOTES.txt").write_text("WIDTH = 80\n", encoding="utf-8")
    measurement_fingerprint.cache_clear()
    assert TimingPolicy().fingerprint == stricter
    (measurement_copy / "checks.py").write_text("CHECKS = ()\n", encoding="utf-8")
    measurement_fingerprint.cache_clear()
    edited = TimingPolicy().fingerprint
    assert edited != stricter
    (measurement_copy / "newly_added.py").write_text("WIDTH = 80\n", encoding="utf-8")
    measurement_fingerprint.cache_clear()
    assert TimingPolicy().fingerprint not in (stricter, edited)
    # The settings still count.
    assert TimingPolicy(min_samples=11).fingerprint != TimingPolicy().fingerprint


# ---- the plan says why a pair runs again ------------------------------------------------------

SPEC = MatmulSpec(op="matmul", batch=1, m=1, n=8, k=16, tA=False, tB=True, dtype="f32")
POLICY = TimingPolicy(min_samples=3, max_samples=5)


@variant_family(name="tmp.plan", ops=("matmul",), devices=("cpu",), grid={"x": (1, 2, 3, 4, 5)})
def PLANNED(spec: MatmulSpec, params: Any, device: DeviceInfo) -> KernelFn:  # noqa: N802
    """Never built: planning only."""
    raise NotImplementedError


def stored(variant: Variant, status: Status = Status.PASS, **changes: Any) -> PairResult:
    """A row for (SPEC, variant) as the current harness would key it, then ``changes``."""
    result = PairResult(
        spec_key=SPEC.key(),
        variant_id=variant.id,
        family=variant.family.name,
        params=variant.param_dict,
        fingerprint=variant.fingerprint,
        device=CPU.fingerprint,
        policy=POLICY.fingerprint,
        status=status,
        reason="" if status is Status.PASS else "crashed",
        error_kind=ErrorKind.CRASH if status is Status.ERROR else None,
        metrics=ErrorMetrics(max_abs=0.0, max_rel=0.0, norm_rel=0.0, nonfinite=0,
                             tol_norm=1e-5, tol_rel=1e-3, trials=3),
        measured_at="2026-01-02T00:00:00.000000Z",
    )  # fmt: skip
    return replace(result, **changes)


def test_a_pass_from_an_older_harness_is_not_served(tmp_path: Path) -> None:
    (variant, *_) = PLANNED.variants()
    with ResultStore(tmp_path / "s.db") as store:
        store.put(stored(variant, policy="p-older-harness"))
        plan = make_plan([SPEC], [variant], CPU, POLICY, store)
    (pair,) = plan.pairs
    assert pair.state is PairState.RUN and pair.reason == POLICY_CHANGED
    assert plan.summary() == (
        "1 pairs: 1 to run (1 harness or timing policy changed), 0 cached, 0 unsupported"
    )


def test_a_pass_from_an_older_kernel_source_says_so(tmp_path: Path) -> None:
    (variant, *_) = PLANNED.variants()
    with ResultStore(tmp_path / "s.db") as store:
        store.put(stored(variant, fingerprint="older-source"))
        # An older source under an older policy too: the source is the news.
        store.put(stored(variant, fingerprint="oldest", policy="p-old",
                         measured_at="2026-01-01T00:00:00.000000Z"))  # fmt: skip
        plan = make_plan([SPEC], [variant], CPU, POLICY, store)
    (pair,) = plan.pairs
    assert pair.state is PairState.RUN and pair.reason == SOURCE_CHANGED
    assert "1 to run (1 kernel source changed), 0 cached" in plan.summary()


def test_the_summary_counts_every_reason(tmp_path: Path) -> None:
    same, policy, source, errored, new = PLANNED.variants()
    with ResultStore(tmp_path / "s.db") as store:
        for row in [
            stored(same),
            # A later row of another policy does not hide the exact match.
            stored(same, policy="p-newer", measured_at="2026-01-03T00:00:00.000000Z"),
            stored(policy, policy="p-older"),
            stored(source, fingerprint="older-source"),
            stored(errored, Status.ERROR),
        ]:
            store.put(row)
        plan = make_plan([SPEC], [same, policy, source, errored, new], CPU, POLICY, store)
        forced = make_plan([SPEC], [same, new], CPU, POLICY, store, force=True)
    assert [(p.state, p.reason) for p in plan.pairs] == [
        (PairState.CACHED, ""),
        (PairState.RUN, POLICY_CHANGED),
        (PairState.RUN, SOURCE_CHANGED),
        (PairState.RUN, ERRORED),
        (PairState.RUN, NEW),
    ]
    assert plan.summary() == (
        "5 pairs: 4 to run (1 harness or timing policy changed, 1 kernel source changed, "
        "1 new, 1 re-run: earlier result was an error), 1 cached, 0 unsupported"
    )
    assert [p.reason for p in forced.pairs] == [FORCED, FORCED]
    assert forced.summary() == "2 pairs: 2 to run (2 --force), 0 cached, 0 unsupported"


def test_a_fresh_store_plans_new_pairs_without_detail(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "s.db") as store:
        plan = make_plan([SPEC], PLANNED.variants()[:2], CPU, POLICY, store)
    assert [p.reason for p in plan.pairs] == [NEW, NEW]
    assert plan.summary() == "2 pairs: 2 to run, 0 cached, 0 unsupported"


H100 = DeviceInfo(
    kind="cuda",
    name="NVIDIA H100 80GB HBM3",
    index=1,
    capability=(9, 0),
    sm_count=132,
    l2_bytes=50 << 20,
    memory_bytes=80 << 30,
    driver="580.159.04",
    versions={"torch": "2.11.0", "triton": "3.6.0"},
)


@pytest.mark.parametrize("device", [DeviceInfo(kind="cpu", name="test-cpu"), H100])
def test_a_device_survives_its_dict_form_and_keeps_its_fingerprint(device: DeviceInfo) -> None:
    """As a store, a report and a worker's pipe carry it: JSON turns the capability
    into a list and adds the fingerprint; both come back as they were."""
    import json

    data = json.loads(json.dumps(device.to_dict()))
    again = DeviceInfo.from_dict({**data, "added_later": 1})
    assert again == device and again.fingerprint == data["fingerprint"]
    assert DeviceInfo.from_dict({}).name == "unknown device"
