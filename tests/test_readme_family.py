"""The README's "Adding a kernel family" example, run as written: its two files,
loaded as a plugin package, pass validation on awkward shapes in the Triton
interpreter and run through ``matprobe run`` beside the baseline."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import pytest

from conftest import CPU, interpreting

pytest.importorskip("torch", reason="the harness needs torch")
pytest.importorskip("triton", reason="the example is a Triton kernel")
pytestmark = pytest.mark.skipif(not interpreting(), reason="needs the Triton interpreter")

from matprobe.cli import main  # noqa: E402
from matprobe.measure.pair import validate_pair  # noqa: E402
from matprobe.spec import MatmulSpec  # noqa: E402

README = Path(__file__).resolve().parents[1] / "README.md"
PACKAGE = "readme_family"


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"### {title}")
    end = text.find("\n## ", start)
    following = text.find("\n### ", start + 1)
    ends = [e for e in (end, following) if e != -1]
    return text[start : min(ends) if ends else len(text)]


@pytest.fixture
def family_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The README's two files as a package in a kernel engineer's repo (the current
    directory); returns the wrapper module's name."""
    kernel, wrapper = re.findall(r"```python\n(.*?)```", _section("Adding a kernel family"), re.S)
    package = tmp_path / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "_rows_kernels.py").write_text(kernel)
    # The README's import of its kernel module, as it would be inside the repo.
    shipped = "from matprobe.kernels.triton._rows_kernels import rows_kernel"
    assert shipped in wrapper
    (package / "rows.py").write_text(
        wrapper.replace(shipped, f"from {PACKAGE}._rows_kernels import rows_kernel")
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield f"{PACKAGE}.rows"
    for name in [m for m in sys.modules if m.startswith(PACKAGE)]:
        del sys.modules[name]


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize(("n", "k"), [(53, 40), (1, 300), (130, 1)])
def test_the_example_validates_on_awkward_shapes(
    family_package: str, dtype: str, n: int, k: int
) -> None:
    (family,) = importlib.import_module(family_package).FAMILIES
    spec = MatmulSpec.parse(f"op=matmul | batch=1 | m=1 | n={n} | k={k} | tA=0 | tB=1")
    spec = spec.with_dtype(dtype)
    for variant in family.variants():
        assert variant.unsupported_reason(spec, CPU) is None
        checked = validate_pair(spec, variant.build(spec, CPU), CPU, 2, interpreted=True)
        assert checked.passed, (variant.id, checked.failure)


def test_the_example_says_why_it_does_not_apply(family_package: str) -> None:
    (family,) = importlib.import_module(family_package).FAMILIES
    qkv = MatmulSpec.parse("op=matmul_bias_add | batch=1 | m=1 | n=24 | k=16 | tA=0 | tB=0")
    reason = family.variants()[0].unsupported_reason(qkv.with_dtype("f16"), CPU)
    assert reason and "matmul_bias_add" in reason


def test_the_example_runs_through_matprobe_run(
    family_package: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "summary.txt"  # an analyzer summary with one small decode shape
    profile.write_text(
        "Matmul shape backend summary:\n"
        "  op=matmul | batch=1 | m=1 | n=53 | k=40 | tA=0 | tB=1:\n"
        "    backend=mps: count=24 | total=1.0ms | avg=0.042ms | min=0.040ms | max=0.050ms"
        " | p95_ms=0.045ms, p99_ms=0.049ms\n"
    )
    code = main(
        [
            "run",
            str(profile),
            "--dtype",
            "f16",
            "--plugin",
            family_package,
            "--device",
            "cpu",
            "--variants",
            "triton.rows/*",
            "torch.matmul",
            "--db",
            str(tmp_path / "r.sqlite"),
            "--json",
            str(tmp_path / "r.json"),
        ]
    )
    assert code == 0, capsys.readouterr().err
    report = json.loads((tmp_path / "r.json").read_text())
    mine = [r for s in report["specs"] for r in s["results"] if r["family"] == "triton.rows"]
    assert len(mine) == 4 and {r["status"] for r in mine} == {"pass"}
