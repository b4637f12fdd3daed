"""The CLI cannot mislead: arguments that were surely meant otherwise are refused up
front (exit 2, one line), data on stdout is data alone, shapes with nothing to
compute never reach the harness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the run command needs torch (CPU build is enough)")

from conftest import run_cli as run
from matprobe.run.store import ResultStore

SMALL = (
    "Matmul shape backend summary:\n"
    "  op=matmul | batch=1 | m=1 | n={n} | k={k} | tA=0 | tB=1:\n"
    "    backend=mps: count=24 | total=1.0ms | avg=0.042ms | min=0.040ms | max=0.050ms"
    " | p95_ms=0.045ms, p99_ms=0.049ms\n"
)


def profile(tmp_path: Path, n: int = 53, k: int = 40) -> str:
    path = tmp_path / f"summary_{n}_{k}.txt"
    path.write_text(SMALL.format(n=n, k=k))
    return str(path)


def run_cpu(
    tmp_path: Path, *argv: str, dtype: str | None = "f32", shape: tuple[int, int] = (53, 40)
) -> tuple[int, str]:
    """``matprobe run`` on the small profile (``shape``: its n and k) in ``dtype`` (None:
    the run's default) on the CPU, with ``argv`` after and the store ``r.sqlite`` in
    ``tmp_path``."""
    dtype_args = ("--dtype", dtype) if dtype is not None else ()
    store = str(tmp_path / "r.sqlite")
    return run(
        "run", profile(tmp_path, *shape), *dtype_args, "--device", "cpu", *argv, "--db", store
    )


def test_a_profile_after_variants_is_not_taken_as_a_glob(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run(
        "run",
        "--device",
        "cpu",
        "--variants",
        "torch.*",
        profile(tmp_path),
        "--db",
        str(tmp_path / "r.sqlite"),
    )
    err = capsys.readouterr().err
    assert code == 2 and "is a file" in err and "before --variants" in err
    assert len(err.strip().splitlines()) == 1


def test_a_glob_that_matches_nothing_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run_cpu(tmp_path, "--variants", "torch.*", "nosuch.*", dtype=None)
    assert code == 2 and "'nosuch.*' matches no variant" in capsys.readouterr().err


@pytest.mark.parametrize("form", ["json", "csv"])
def test_data_to_stdout_is_the_data_alone(
    tmp_path: Path, form: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stdout = run_cpu(tmp_path, "--variants", "torch.matmul", f"--{form}", "-")
    assert code == 0
    if form == "json":
        assert json.loads(stdout)["specs"]
    else:
        assert stdout.splitlines()[0].startswith("spec_key,variant_id")
    assert "== op=matmul" in capsys.readouterr().err  # the report went to stderr


def test_only_one_export_may_take_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run_cpu(tmp_path, "--json", "-", "--csv", "-", dtype=None)
    assert code == 2 and "only one of --json and --csv" in capsys.readouterr().err


def test_an_unwritable_out_fails_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "report"
    blocker.write_text("a file, not a folder")
    db = tmp_path / "r.sqlite"
    code, _ = run_cpu(tmp_path, "--variants", "torch.matmul", "--out", str(blocker), dtype=None)
    assert code == 2 and "it is a file" in capsys.readouterr().err
    if db.exists():
        with ResultStore(db) as store:
            assert store.runs() == []


@pytest.mark.parametrize(("n", "k"), [(0, 40), (53, 0)])
def test_a_zero_dimension_is_refused_with_a_reason(tmp_path: Path, n: int, k: int) -> None:
    code, text = run_cpu(tmp_path, "--variants", "torch.matmul", "numpy.matmul", shape=(n, k))
    assert code == 1  # nothing ran: exit status 1, with the reason in the report
    assert "zero dimension" in text and "ERROR" not in text and "FAIL" not in text


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "soon"])
def test_timeout_must_be_a_positive_number(
    tmp_path: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run("run", profile(tmp_path), "--timeout", value)
    assert code == 2 and "--timeout" in capsys.readouterr().err


def test_shapes_refuses_an_op_that_matches_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run("shapes", profile(tmp_path), "--op", "nosuchop")
    assert code == 2 and out == ""
    assert "'nosuchop' matches no spec" in capsys.readouterr().err


# ---- exit status: 0 all good, 1 when what matters failed, 2 usage errors -------------


def _manifest(tmp_path: Path, baseline: str) -> str:
    path = tmp_path / "manifest.toml"
    path.write_text(f'[baseline]\nmatmul = "{baseline}"\n')
    return str(path)


def test_all_good_is_zero(tmp_path: Path) -> None:
    code, _ = run_cpu(tmp_path, "--variants", "torch.matmul", "numpy.matmul", "--strict")
    assert code == 0


BAD_BASELINE = """
from matprobe.measure.variants import variant_family


@variant_family(name="bad.zeros", ops=("matmul",))
def zeros(spec, params, device):
    def run(inputs, out):
        out.zero_()

    return run


FAMILIES = (zeros,)
"""


def test_a_failing_baseline_is_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A baseline that FAILs leaves nothing to compare with: exit 1, said why."""
    (tmp_path / "badbase.py").write_text(BAD_BASELINE)
    monkeypatch.chdir(tmp_path)
    manifest = tmp_path / "manifest.toml"
    manifest.write_text('plugins = ["badbase"]\n\n[baseline]\nmatmul = "bad.zeros"\n')
    code, _ = run_cpu(
        tmp_path, "--variants", "bad.zeros", "torch.matmul", "--manifest", str(manifest)
    )
    assert code == 1
    assert "bad.zeros/default FAIL" in capsys.readouterr().err


def test_strict_fails_on_any_failure_and_nothing_passing_is_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from matprobe.measure.device import DeviceInfo
    from matprobe.measure.results import ErrorKind, PairResult, Status
    from matprobe.measure.timing import TimingPolicy
    from matprobe.report.model import Report, Row, SpecSection, run_problems
    from matprobe.spec import MatmulSpec

    spec = MatmulSpec.parse("op=matmul | batch=1 | m=1 | n=5 | k=3 | tA=0 | tB=1 | dtype=f32")

    def row(variant: str, status: Status, tags: tuple[str, ...] = ()) -> Row:
        fields = {"reason": "x"} if status is not Status.PASS else {}
        if status is Status.ERROR:
            fields["error_kind"] = ErrorKind.CRASH
        from matprobe.measure.results import ErrorMetrics

        metrics = ErrorMetrics(0, 0, 0, 0, 1, 1, 1) if status is Status.PASS else None
        result = PairResult(
            spec.key(),
            variant,
            variant.split("/")[0],
            {},
            "f",
            "d",
            "p",
            status,
            metrics=metrics,
            **fields,
        )  # type: ignore[arg-type]
        return Row(result, tags, None, None, None, None, None, None)

    def report(*rows: Row) -> Report:
        section = SpecSection(spec, rows, (), "base/x", None, None, None)
        return Report(
            [section], DeviceInfo(kind="cpu", name="c"), TimingPolicy(), "", 1, 0.0, False
        )

    ok = row("base/x", Status.PASS, ("baseline",))
    assert run_problems(report(ok, row("mine/a", Status.PASS))) == []
    assert run_problems(report(ok, row("mine/a", Status.FAIL))) == []
    assert run_problems(report(ok, row("mine/a", Status.FAIL)), strict=True)
    assert run_problems(report(row("base/x", Status.ERROR, ("baseline",)), row("m/a", Status.PASS)))
    assert run_problems(report(row("mine/a", Status.FAIL)))  # nothing passed


def test_dry_run_shows_the_plan_and_runs_nothing(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    code, out = run_cpu(tmp_path, "--variants", "torch.matmul", "numpy.matmul", "--dry-run")
    assert code == 0
    assert "2 to run" in out and "torch.matmul/default" in out and "numpy.matmul/default" in out
    assert not db.exists()  # a dry run creates nothing
    code, _ = run_cpu(tmp_path, "--variants", "torch.matmul")
    assert code == 0
    code, out = run_cpu(tmp_path, "--variants", "torch.matmul", "numpy.matmul", "--dry-run")
    assert "1 to run" in out and "1 cached" in out and "cached      torch.matmul" in out
    with ResultStore(db) as store:
        assert len(store.runs()) == 1  # the dry runs recorded no run


@pytest.mark.parametrize(
    ("pattern", "extra", "points"),
    [
        ("triton.gemv_nt", (), 1),  # naming a family keeps one point on the CPU
        ("triton.gemv_nt/*", (), None),  # naming its points asks for all of them
        ("triton.gemv_nt", ("--every-point",), None),
    ],
)
def test_naming_a_family_keeps_one_interpreted_point_on_the_cpu(
    tmp_path: Path, pattern: str, extra: tuple[str, ...], points: int | None
) -> None:
    pytest.importorskip("triton", reason="needs triton for the family's support check")
    from matprobe.kernels.catalogue import shipped_registry

    code, out = run_cpu(tmp_path, "--variants", pattern, *extra, "--dry-run")
    assert code == 0
    planned = [line for line in out.splitlines() if "triton.gemv_nt/" in line]
    everything = len(shipped_registry().family("triton.gemv_nt").variants())
    assert len(planned) == (points if points is not None else everything)


# ---- issue 21: found up front, one line, exit 2 ----------------------------------------------


@pytest.mark.parametrize("flag", ["--json", "--csv"])
@pytest.mark.parametrize("where", ["file_as_parent", "read_only_parent"])
def test_an_unwritable_export_path_fails_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, where: str
) -> None:
    """A missing parent under something that cannot hold it is found before the run
    (it was found only after the whole run had been measured)."""
    import os

    if where == "file_as_parent":
        blocker = tmp_path / "not_a_folder"
        blocker.write_text("a file")
        target = blocker / "missing" / "out.json"
        needle = "is a file, not a directory"
    else:
        if os.geteuid() == 0:
            pytest.skip("file modes do not bind root")
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        target = locked / "missing" / "out.json"
        needle = "is not writable"
    db = tmp_path / "r.sqlite"
    code, _ = run_cpu(tmp_path, "--variants", "torch.matmul", flag, str(target))
    err = capsys.readouterr().err
    assert code == 2 and needle in err, err
    if db.exists():
        with ResultStore(db) as store:
            assert store.runs() == []


def test_a_manifest_that_is_not_utf8_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_bytes(b'[families]\n"torch.matmul" = \xff\xfe\n')
    for argv in (["variants", "--manifest", str(manifest)], ["run", "--manifest", str(manifest)]):
        code, _ = run(*argv)
        err = capsys.readouterr().err
        assert code == 2, err
        assert "is not UTF-8 text" in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("value", ["-4", "0"])
@pytest.mark.parametrize("flag", ["--trials", "--tokens"])
def test_one_limit_one_message_for_every_value_below_it(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    """``--context -4`` said "must be 0 or more" and ``--context 0`` "must be at least 1"."""
    code, _ = run("run", "--device", "cpu", flag, value)
    err = capsys.readouterr().err
    assert code == 2 and f"must be at least 1, got {value}" in err, err
