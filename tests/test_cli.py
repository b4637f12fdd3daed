"""The `matprobe` command: subcommands, output forms, and one-line user errors."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import seed
from matprobe.cli import main


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("matprobe 0.")
    for command in ("analyze", "shapes", "synth-profile"):
        with pytest.raises(SystemExit) as exc:
            main([command, "--help"])
        assert exc.value.code == 0
        assert f"usage: matprobe {command}" in capsys.readouterr().out


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: matprobe" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["analyze", "/no/such/file.jsonl"], "cannot read /no/such/file.jsonl"),
        (["shapes", "/no/such/file.txt"], "cannot read /no/such/file.txt"),
        (["shapes", "--model", "gpt-17"], "qwen2.5-0.5b"),
        (["shapes", "--model", "qwen2.5-0.5b", "--context", "0"], "at least 1"),
        (["analyze", "x.jsonl", "--top", "-3"], "must be 0 or more"),
        (["shapes", "--dtype", "f8"], "invalid choice"),
        (["bogus"], "invalid choice"),
    ],
)
def test_user_errors_are_one_line_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_error_for_text_summary_given_to_analyze(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(seed("003"))]) == 2
    assert "text summary" in capsys.readouterr().err


def test_empty_and_binary_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 50)
    assert main(["analyze", str(empty)]) == 2
    assert "is empty" in capsys.readouterr().err
    assert main(["analyze", str(binary)]) == 2
    assert "not a JSONL profile" in capsys.readouterr().err
    assert main(["shapes", str(binary)]) == 2
    assert "no matmul shape blocks" in capsys.readouterr().err


def test_shapes_builtin_table() -> None:
    code, out = run("shapes")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("built-in profile qwen2.5-0.5b-decode: 39 matmul shapes")
    assert "n=9728 | k=896" in lines[3]  # largest production total first
    assert "740.540" in lines[3] and "2280" in lines[3] and "mps" in lines[3]


def test_shapes_filters_and_json() -> None:
    code, out = run("shapes", "--json", "--min-count", "95")
    data = json.loads(out)
    assert code == 0 and len(data["specs"]) == 5  # lm_head runs 95 times, the rest 2280
    code, out = run("shapes", "--json", "--min-count", "96")
    data = json.loads(out)
    assert len(data["specs"]) == 4
    assert all(s["provenance"]["count"] >= 96 for s in data["specs"])
    code, out = run("shapes", "--json", "--op", "matmul_alpha_beta")
    specs = json.loads(out)["specs"]
    assert len(specs) == 34 and {s["op"] for s in specs} == {"matmul_alpha_beta_cache"}
    code, out = run("shapes", "--json", "--op", "matmul_bias_add")
    (qkv,) = json.loads(out)["specs"]
    assert qkv["n"] == 1152 and qkv["flops"] == 2 * 1152 * 896 + 1152


def test_shapes_of_a_text_summary_warns_on_truncation(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run("shapes", str(seed("001")))
    assert code == 0
    assert "8 matmul shapes" in out
    assert "line 32" in capsys.readouterr().err


def test_shapes_model_list_and_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run("shapes", "--model", "list")
    assert code == 0
    for name in ("qwen2.5-0.5b", "qwen2.5-7b", "llama-3.2-1b", "llama-3.1-8b"):
        assert name in out
    code, out = run("shapes", "--model", "qwen2.5-0.5b", "--json", "--context", "130")
    data = json.loads(out)
    roles = {s["role"]: s for s in data["specs"]}
    assert roles["lm_head"]["count"] == 1 and roles["gate_up"]["n"] == 9728
    assert roles["attn_qk"]["n"] == 130 and roles["attn_pv"]["k"] == 130
    code, out = run("shapes", "--model", "qwen2.5-0.5b", "--dtype", "q8_0")
    assert "dtype=q8_0" in out and "lm_head" in out
    code, _ = run("shapes", str(seed("001")), "--model", "qwen2.5-0.5b")
    assert code == 2


def test_analyze_gzip_and_plain_agree(tmp_path: Path) -> None:
    from matprobe.profile.synth import SynthConfig, generate

    lines, _ = generate(SynthConfig(tokens=2, layers=2, seed=3))
    plain = tmp_path / "p.jsonl"
    plain.write_text("\n".join(lines) + "\n")
    packed = tmp_path / "p.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    code_a, text_a = run("analyze", str(plain), "--json")
    code_b, text_b = run("analyze", str(packed), "--json")
    assert code_a == code_b == 0
    a, b = json.loads(text_a), json.loads(text_b)
    a.pop("file"), b.pop("file")
    assert a == b
    code, shapes_out = run("shapes", str(packed), "--json")
    assert code == 0 and json.loads(shapes_out)["specs"]


def test_synth_profile_then_analyze(tmp_path: Path) -> None:
    out_file = tmp_path / "s.jsonl"
    code, out = run("synth-profile", str(out_file), "--events", "3000", "--seed", "1")
    assert code == 0 and "3000" in out
    code, text = run("analyze", str(out_file), "--top", "3")
    assert code == 0
    assert "Total events: 3000" in text
    assert "Matmul shape backend summary:" in text


def test_console_script_runs_as_a_module() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "matprobe", "shapes", "--min-count", "1000"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "n=151936" not in proc.stdout  # 95 calls: filtered out
    assert "n=9728" in proc.stdout


# ---- issue 21: a summary's bad input is reported, never summed or sent raw -------------------

SUMMARY = (
    "Matmul shape backend summary:\n"
    "  op=matmul | batch=1 | m=1 | n=896 | k=896 | tA=0 | tB=1:\n"
    "    backend={backend}: count=2280 | total={total}ms | avg={avg}ms | min=0.1ms"
    " | max=0.5ms | p95_ms=0.4ms, p99_ms=0.45ms\n"
    "\n"
    "  op=matmul | batch=1 | m=1 | n=4864 | k=896 | tA=0 | tB=1:\n"
    "    backend=mps: count=2280 | total=2.00ms | avg=0.001ms | min=0.001ms"
    " | max=0.002ms | p95_ms=0.002ms, p99_ms=0.002ms\n"
)


@pytest.mark.parametrize(("total", "avg"), [("-740.54", "-0.3"), ("nan", "0.3"), ("1.0", "-0.1")])
def test_negative_or_nonfinite_times_in_a_summary_are_input_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], total: str, avg: str
) -> None:
    path = tmp_path / "s.txt"
    path.write_text(SUMMARY.format(backend="mps", total=total, avg=avg))
    out = io.StringIO()
    assert main(["shapes", str(path)], out=out) == 0
    assert "1 matmul shapes, 2.00 ms in production" in out.getvalue()
    err = capsys.readouterr().err
    assert "malformed timing line: bad time" in err or "bad timing field" in err


def test_shapes_shows_a_profiles_control_bytes_instead_of_sending_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s\x07.txt"
    path.write_text(SUMMARY.format(backend="mps\x1b[31m\x07", total="1.0", avg="0.3"))
    out = io.StringIO()
    assert main(["shapes", str(path)], out=out) == 0
    text = out.getvalue() + capsys.readouterr().err
    assert "\x1b" not in text and "\x07" not in text
    assert "mps\\x1b[31m\\x07" in text


# ---- issue 21: the user's own profile measures something ------------------------------------


@pytest.mark.parametrize(
    ("prefix", "weights", "said"),
    [
        ("001", "f16", "f16 taken (as the built-in profile)"),
        ("000", "f16", "f16 taken"),
        ("003", "q8_0", "Q8_0 weights taken from its Q8_0 loaders and kernels"),
    ],
)
def test_a_profile_without_dtypes_gets_one_and_says_which(
    prefix: str, weights: str, said: str
) -> None:
    """Every seed summary names no dtype: ``matprobe run`` on one recorded a run of
    "unsupported: no dtype" pairs. Now the profile's own signs decide (Q8_0 loaders
    and kernels), else f16 — said in one warning; ``--dtype`` decides silently."""
    from matprobe.profile.profiles import load_specs

    loaded = load_specs(seed(prefix))
    assert all(s.dtype for s in loaded.specs)
    weight_specs = [s for s in loaded.specs if s.kind != "matmul_alpha_beta"]
    assert weight_specs and all(s.dtype == weights for s in weight_specs)
    assert any(said in w for w in loaded.warnings)
    chosen = load_specs(seed(prefix), default_dtype="bf16")
    assert not any("no dtype" in w for w in chosen.warnings)


def test_a_run_on_a_seed_summary_plans_pairs_to_run() -> None:
    code, out = run(
        "run", str(seed("001")), "--device", "cpu", "--variants", "torch.*", "--dry-run"
    )
    assert code == 0, out
    assert "no dtype" not in out and " to run" in out


@pytest.mark.parametrize("command", ["shapes", "run"])
def test_model_list_lists_the_models(command: str) -> None:
    """``run --help`` says '--model list' names them; it exited 2 with "unknown model"."""
    code, out = run(command, "--model", "list")
    assert code == 0
    assert "qwen2.5-0.5b" in out and "llama-3.2-1b" in out
