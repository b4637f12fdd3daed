"""`matprobe run` and `matprobe variants` end to end on the CPU, and the manifest."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")

from matprobe.cli import main
from matprobe.errors import MatprobeError
from matprobe.kernels.catalogue import shipped_registry
from matprobe.run.manifest import ManifestError, load_manifest, parse_manifest
from matprobe.run.store import ResultStore


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_run_on_the_cpu_then_cached(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.sqlite"
    args = [
        "run",
        "--device",
        "cpu",
        "--db",
        str(db),
        "--op",
        "matmul_bias_add",
        "--variants",
        "torch.*",
        "numpy.*",
        "--out",
        str(tmp_path / "rep"),
    ]
    code, text = run(*args)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "2 to run, 0 cached" in err
    assert "== op=matmul_bias_add | batch=1 | m=1 | n=1152 | k=896" in text
    assert "torch.matmul/default" in text and "[baseline]" in text
    assert "2280 calls in the profile" in text
    for name in ("report.txt", "report.md", "report.json", "report.csv"):
        assert (tmp_path / "rep" / name).stat().st_size > 0
    data = json.loads((tmp_path / "rep" / "report.json").read_text())
    (spec,) = data["specs"]
    assert {r["status"] for r in spec["results"]} == {"pass"}
    assert all(r["clocks"]["device"]["samples"] for r in spec["results"])
    code, text = run(*args)
    assert code == 0
    assert "0 to run, 2 cached" in capsys.readouterr().err
    with ResultStore(db) as store:
        assert [r.status for r in store.runs()] == ["done", "done"]
        assert len(store.results()) == 2


def test_run_json_to_stdout_and_model_specs(tmp_path: Path) -> None:
    code, text = run(
        "run",
        "--device",
        "cpu",
        "--db",
        str(tmp_path / "r.sqlite"),
        "--model",
        "qwen2.5-0.5b",
        "--context",
        "16",
        "--op",
        "matmul_alpha_beta",
        "--variants",
        "torch.matmul",
        "--json",
        "-",
    )
    assert code == 0
    data = json.loads(text[text.index("{\n") :])
    assert {s["spec"]["provenance"]["count"] for s in data["specs"]} == {24}
    assert {s["spec"]["batch"] for s in data["specs"]} == {14}


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["run", "--variants", "nope.*"], "matches no variant"),
        (["run", "--op", "nope"], "matches no spec"),
        (["run", "--device", "cpu", "--db", "/proc/forbidden/x.sqlite"], "matprobe: error:"),
    ],
)
def test_run_user_errors(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_run_rejects_a_store_that_is_not_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bogus = tmp_path / "notes.txt"
    bogus.write_text("not a database\n" * 100)
    before = bogus.read_bytes()
    assert main(["run", "--device", "cpu", "--db", str(bogus), "--op", "matmul_bias_add"]) == 2
    assert "not a matprobe result store" in capsys.readouterr().err
    assert bogus.read_bytes() == before


def test_variants_listing_and_support(capsys: pytest.CaptureFixture[str]) -> None:
    code, text = run("variants")
    assert code == 0
    assert "torch.matmul [baseline, peer]" in text
    assert "triton.gemv_nt/bn2_bk1024_w4_pdl0  (enabled" in text
    code, text = run(
        "variants",
        "--device",
        "cpu",
        "--spec",
        "op=matmul | batch=1 | m=4 | n=64 | k=64 | tA=0 | tB=1",
    )
    assert "triton.gemv_nt/bn2_bk1024_w4_pdl0" in text and "unsupported: needs m=1" in text
    assert "torch.matmul/default  (enabled" in text and ": supported" in text


# ---- manifest ---------------------------------------------------------------------------


def test_default_manifest_loads_and_selects() -> None:
    registry = shipped_registry()
    manifest = load_manifest(None, registry)
    ids = {v.id for v in manifest.variants(registry)}
    assert "torch.matmul/default" in ids and "triton.gemv_nt/bn8_bk1024_w8_pdl1" in ids
    assert manifest.baseline_for("matmul", registry) == "torch.matmul"
    only = {v.id for v in manifest.variants(registry, ["triton.*"])}
    assert only and all(i.startswith("triton.") for i in only)


def test_manifest_overrides_grid_exclude_and_disable(tmp_path: Path) -> None:
    registry = shipped_registry()
    path = tmp_path / "m.toml"
    path.write_text(
        '[families."triton.gemv_nt"]\ngrid = { bn = [32], bk = [64, 512], pdl = [0] }\n'
        'exclude = ["triton.gemv_nt/bn32_bk512_w4_pdl0"]\n'
        '[families."numpy.matmul"]\nenabled = false\n'
        '[baseline]\nmatmul = "triton.gemv_nt/bn2_bk1024_w4_pdl0"\n'
    )
    manifest = load_manifest(path, registry)
    ids = [v.id for v in manifest.variants(registry)]
    assert "triton.gemv_nt/bn32_bk64_w4_pdl0" in ids
    assert "triton.gemv_nt/bn32_bk512_w4_pdl0" not in ids
    assert not any(i.startswith("triton.gemv_nt/") and i.endswith("pdl1") for i in ids)
    assert not any(i.startswith("numpy.") for i in ids)
    assert manifest.baseline_for("matmul", registry) == "triton.gemv_nt/bn2_bk1024_w4_pdl0"


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"famillies": {}}, "famillies"),
        ({"families": {"triton.gemv": {}}}, "families.triton.gemv"),
        ({"families": {"triton.gemv_nt": {"grdi": {}}}}, "families.triton.gemv_nt.grdi"),
        (
            {"families": {"triton.gemv_nt": {"grid": {"bm": [1]}}}},
            "families.triton.gemv_nt.grid.bm",
        ),
        ({"families": {"triton.gemv_nt": {"enabled": "yes"}}}, "families.triton.gemv_nt.enabled"),
        # Grid values are checked when read: a negative size, another type, a name
        # with a newline (it would become part of a variant id).
        (
            {"families": {"triton.gemv_nt": {"grid": {"bn": [-8]}}}},
            "families.triton.gemv_nt.grid.bn",
        ),
        (
            {"families": {"triton.gemv_nt": {"grid": {"bn": ["8\nFAIL"]}}}},
            "families.triton.gemv_nt.grid.bn",
        ),
        (
            {"families": {"triton.gemv_nt": {"grid": {"bk": [1024.5]}}}},
            "families.triton.gemv_nt.grid.bk",
        ),
        ({"baseline": {"matmull": "torch.matmul"}}, "baseline.matmull"),
        ({"baseline": {"matmul": "torch.mm"}}, "baseline.matmul"),
    ],
)
def test_bad_manifest_names_the_key(data: dict[str, object], key: str) -> None:
    with pytest.raises(ManifestError) as exc:
        parse_manifest(data, "m.toml", shipped_registry())
    assert f"m.toml: {key}:" in str(exc.value)


def test_unknown_family_suggests_the_close_name() -> None:
    with pytest.raises(ManifestError, match=r"did you mean triton\.gemv_nt"):
        parse_manifest({"families": {"triton.gemv_nnt": {}}}, "m.toml", shipped_registry())


def test_manifest_that_is_not_toml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.toml"
    path.write_text("[families\n")
    assert main(["run", "--device", "cpu", "--manifest", str(path)]) == 2
    assert "not valid TOML" in capsys.readouterr().err


def test_tokens_are_inferred_from_the_lm_head_only_when_it_fits() -> None:
    from matprobe.cli.run import _infer_tokens
    from matprobe.profile.profiles import load_specs

    assert _infer_tokens(load_specs().specs) == 95  # lm_head 95 calls, the rest 2280
    qkv_only = [s for s in load_specs().specs if s.op == "matmul_bias_add"]
    assert _infer_tokens(qkv_only) is None


def test_disabled_family_runs_only_when_named() -> None:
    registry = shipped_registry()
    manifest = load_manifest(None, registry)
    assert not any(v.family.name == "torch.compile" for v in manifest.variants(registry))
    assert not any(v.family.name == "torch.compile" for v in manifest.variants(registry, ["*"]))
    named = manifest.variants(registry, ["torch.compile"])
    assert [v.id for v in named] == ["torch.compile/default"]


def test_cpu_default_run_validates_one_point_per_triton_family() -> None:
    from matprobe.run.selection import one_point_per_interpreted_family

    registry = shipped_registry()
    variants = load_manifest(None, registry).variants(registry)
    kept, dropped = one_point_per_interpreted_family(variants)
    interpreted = [v for v in kept if v.family.interpreted_on_cpu]
    assert len(interpreted) == len({v.family.name for v in interpreted}) >= 4
    assert dropped == len(variants) - len(kept) > 0
    assert any(v.id == "torch.matmul/default" for v in kept)


def test_the_report_explains_pdl_only_when_a_pdl_variant_runs() -> None:
    """pdl=1 figures include overlap with the previous call: the report must say so
    whenever one is measured (or cached), and not otherwise. The note comes from the
    family's declared trait (``early_launch_param``), not from a name the CLI knows."""
    from matprobe.kernels.triton.gemv import GEMV_NT
    from matprobe.report.build import early_launch_note
    from matprobe.run.runner import PairState, Plan, PlannedPair
    from matprobe.spec import MatmulSpec

    assert GEMV_NT.early_launch_param == "pdl"
    spec = MatmulSpec.parse("op=matmul | batch=1 | m=1 | n=9728 | k=896 | tA=0 | tB=1 | dtype=f16")
    (pdl1,) = GEMV_NT.variants({"bn": (8,), "bk": (1024,), "w": (4,), "pdl": (1,)})
    (pdl0,) = GEMV_NT.variants({"bn": (8,), "bk": (1024,), "w": (4,), "pdl": (0,)})
    note = early_launch_note(
        Plan([PlannedPair(spec, pdl0, PairState.RUN), PlannedPair(spec, pdl1, PairState.CACHED)])
    )
    assert note.startswith("pdl1 variants launch early")
    assert "producer kernel" in note and "dependent calls" in note
    assert not early_launch_note(
        Plan(
            [
                PlannedPair(spec, pdl0, PairState.RUN),
                PlannedPair(spec, pdl1, PairState.UNSUPPORTED, "cpu"),
            ]
        )
    )


def test_early_launch_is_a_declared_trait() -> None:
    """Which parameter launches early is the family's word: shipped families with a
    ``pdl`` grid declare it, others have none; a family may name another parameter."""
    from matprobe.measure.variants import variant_family

    declared = {f.name: f.early_launch_param for f in shipped_registry().families()}
    assert {n for n, p in declared.items() if p} == {
        "triton.gemv_nt",
        "triton.gemv_stream",
        "triton.attn_bmv",
    }

    def build(*_: object) -> object:
        raise AssertionError

    early = variant_family(
        name="x.early", ops={"matmul"}, grid={"dep": (0, 1)}, early_launch_param="dep"
    )(build)  # type: ignore[arg-type]
    assert [v.launches_early for v in early.variants()] == [False, True]
    plain = variant_family(
        name="x.plain", ops={"matmul"}, grid={"pdl": (1,)}, early_launch_param=None
    )(build)  # type: ignore[arg-type]
    assert not plain.variants()[0].launches_early
    with pytest.raises(MatprobeError, match="early_launch_param 'pdl' is not a grid parameter"):
        variant_family(name="x.bad", ops={"matmul"}, early_launch_param="pdl")


def test_the_cpu_default_validates_each_interpreted_family_on_one_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A newcomer's first run without a GPU ends in minutes: every Triton family is
    validated once, on its cheapest spec, and the plan says which pairs were set
    aside and why; --every-point validates every spec and grid point."""
    db = str(tmp_path / "p.sqlite")
    code, text = run("run", "--device", "cpu", "--dry-run", "--db", db)
    assert code == 0
    lines = text.splitlines()
    triton_runs = [
        line.split()[1] for line in lines if line.startswith("  run ") and "triton." in line
    ]
    families = [variant.split("/")[0] for variant in triton_runs]
    assert len(families) == len(set(families)) >= 4, triton_runs  # one pair each
    aside = [line for line in lines if "not validated here — the interpreter checks" in line]
    assert aside and all("--every-point checks every spec" in line for line in aside)
    code, every = run("run", "--device", "cpu", "--dry-run", "--every-point", "--db", db)
    assert code == 0
    assert sum(line.startswith("  run ") for line in every.splitlines()) > len(triton_runs) + 100


@pytest.mark.parametrize(
    ("pattern", "runs"),
    [
        ("torch.compile", True),  # the exact name
        ("torch.comp*", True),  # a glob over the name: enabled by the same rule
        ("torch.compile/*", True),  # a grid point's id
        ("*.compile", True),  # matches it and no enabled family
        ("*", False),  # matches the enabled families: those run
        ("torch.*", False),  # matches torch.matmul, which is on
        ("numpy.*", False),  # matches another family only
    ],
)
def test_one_rule_enables_a_family_the_manifest_turns_off(pattern: str, runs: bool) -> None:
    """``--variants 'mlx*'`` said no variant matched while ``--variants mlx.matmul``
    ran: a pattern that matches no enabled family reaches the families turned off,
    whether it spells a name or globs it; one that matches an enabled family keeps
    what the manifest turned off, off."""
    registry = shipped_registry()
    manifest = parse_manifest(
        {"families": {"torch.compile": {"enabled": False}}}, "m.toml", registry
    )
    chosen = {v.family.name for v in manifest.variants(registry, [pattern])}
    assert ("torch.compile" in chosen) is runs
    assert manifest.variants(registry, [pattern]), "a pattern that matches a family runs it"


def test_each_pattern_reaches_the_off_families_on_its_own() -> None:
    registry = shipped_registry()
    manifest = parse_manifest(
        {"families": {"torch.compile": {"enabled": False}}}, "m.toml", registry
    )
    chosen = {v.family.name for v in manifest.variants(registry, ["torch.*", "*.compile"])}
    assert {"torch.matmul", "torch.compile"} <= chosen


def test_the_rule_is_said_when_nothing_matches(tmp_path: Path) -> None:
    with pytest.raises(MatprobeError, match="turns off runs for a --variants pattern"):
        from matprobe.run.session import RunOptions, RunSession

        manifest = tmp_path / "m.toml"
        off = ("torch.matmul", "numpy.matmul", "mlx.matmul")
        manifest.write_text("".join(f'[families."{f}"]\nenabled = false\n' for f in off))
        # excluded by the manifest and not a family's name: nothing to reach
        RunSession(RunOptions(variants=("torch.matmul/nosuchpoint",), manifest=manifest))
