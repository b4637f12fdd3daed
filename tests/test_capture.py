"""``matprobe capture``: one decode step of a transformers model, its matmuls recorded.

Specified here on tiny configs (2 layers, hidden 64) built with random weights
on the CPU: the capture holds exactly the matmuls decode_specs predicts with
Q/K/V and gate/up unfused (how transformers runs them), the written profile
reads back through the package's own reader and ``shapes``, every known
difference is explained and an unknown one is not, and bad input is one line
on stderr, with nothing from the config reaching the terminal unescaped.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip(
    "transformers", reason="matprobe capture needs transformers (pip install 'matprobe[capture]')"
)

import torch
import torch.nn.functional as F  # noqa: N812 - PyTorch's own convention
from torch.nn.attention import SDPBackend, sdpa_kernel

import matprobe.cli
from conftest import run_cli
from matprobe.cli.capture import register
from matprobe.errors import MatprobeError
from matprobe.profile.capture import (
    Capture,
    capture_decode,
    compare_capture,
    compare_counts,
    render_comparison,
    resolve_model,
    write_profile,
)
from matprobe.profile.capture import compare as compare_module
from matprobe.profile.capture.aten import layout_transposed, recording
from matprobe.profile.capture.compare import comparable
from matprobe.profile.jsonl import scan
from matprobe.profile.models import ModelConfig, decode_specs, get_model
from matprobe.profile.profiles import load_specs
from matprobe.spec import MatmulSpec

DATA = Path(__file__).resolve().parent / "data" / "capture"
TINY_QWEN2 = DATA / "tiny-qwen2.json"
TINY_LLAMA = DATA / "tiny-llama.json"

#: The numbers of the two configs, written out by hand so that a misread
#: config.json fails as surely as a wrong capture. The Qwen2 head_dim (32) is
#: not hidden / heads (16); the Llama's q_proj and o_proj are the same matmul.
QWEN2_NUMBERS = ModelConfig(
    name="tiny-qwen2", hidden=64, intermediate=96, heads=4, kv_heads=2, head_dim=32,
    vocab=160, layers=2, qkv_bias=True, tie_embeddings=True,
)  # fmt: skip
LLAMA_NUMBERS = ModelConfig(
    name="tiny-llama", hidden=64, intermediate=128, heads=4, kv_heads=1, head_dim=16,
    vocab=192, layers=2, qkv_bias=False, tie_embeddings=False,
)  # fmt: skip
CACHED = 5


def expected_counts(config: ModelConfig, *, context: int) -> dict[MatmulSpec, int]:
    """decode_specs unfused, equal specs summed, α as compared."""
    counts: dict[MatmulSpec, int] = {}
    for shape in decode_specs(
        config, context=context, dtype="f32", fuse_qkv=False, fuse_gate_up=False
    ):
        spec = comparable(shape.spec)
        counts[spec] = counts.get(spec, 0) + shape.count
    return counts


def comparable_counts(capture: Capture) -> dict[MatmulSpec, int]:
    return {comparable(spec): count for spec, count in capture.counts().items()}


def config_file(tmp_path: Path, base: Path, **changes: object) -> Path:
    data = json.loads(base.read_text(encoding="utf-8"))
    data.update(changes)
    path = tmp_path / f"{base.stem}-changed.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def qwen2() -> Capture:
    return capture_decode(str(TINY_QWEN2), context=CACHED, dtype="f32")


@pytest.fixture(scope="module")
def llama() -> Capture:
    return capture_decode(str(TINY_LLAMA), context=CACHED, dtype="f32")


@pytest.fixture(scope="module")
def biased_llama(tmp_path_factory: pytest.TempPathFactory) -> Capture:
    """Llama with attention_bias: a bias on o_proj too, which decode_specs does not model."""
    path = config_file(tmp_path_factory.mktemp("biased"), TINY_LLAMA, attention_bias=True)
    return capture_decode(str(path), context=CACHED, dtype="f32")


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[int, str]]:
    """``matprobe ARGS`` through the real ``main`` (its error handling included), with
    ``capture`` registered as matprobe.cli does once its ``register`` line is in."""
    build = matprobe.cli.build_parser

    def build_with_capture() -> argparse.ArgumentParser:
        parser = build()
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        if "capture" not in commands.choices:
            register(commands)
        return parser

    monkeypatch.setattr(matprobe.cli, "build_parser", build_with_capture)
    return run_cli


# ---- the capture is decode_specs, unfused ------------------------------------------


def test_tiny_qwen2_runs_exactly_the_unfused_decode_specs(qwen2: Capture) -> None:
    assert replace(qwen2.model, source="") == QWEN2_NUMBERS
    assert comparable_counts(qwen2) == expected_counts(QWEN2_NUMBERS, context=CACHED + 1)
    # One layer in the order it runs; every layer alike, then the lm_head once.
    layer = [(call.site_pattern, call.call) for call in qwen2.calls[:9]]
    assert layer == [
        ("model.layers.*.self_attn.q_proj", "addmm"),  # the Q/K/V bias rides in addmm
        ("model.layers.*.self_attn.k_proj", "addmm"),
        ("model.layers.*.self_attn.v_proj", "addmm"),
        ("model.layers.*.self_attn", "sdpa_qk"),
        ("model.layers.*.self_attn", "sdpa_pv"),
        ("model.layers.*.self_attn.o_proj", "mm"),
        ("model.layers.*.mlp.gate_proj", "mm"),
        ("model.layers.*.mlp.up_proj", "mm"),
        ("model.layers.*.mlp.down_proj", "mm"),
    ]
    assert [c.site for c in qwen2.calls[9:18]] == [
        c.site.replace(".0.", ".1.") for c in qwen2.calls[:9]
    ]
    assert [(c.site, c.call) for c in qwen2.calls[18:]] == [("lm_head", "mm")]
    assert qwen2.unhandled == ()


def test_attention_is_one_batch_per_query_head_over_the_cache_and_the_new_token(
    qwen2: Capture,
) -> None:
    scores, output = (call.spec for call in qwen2.calls[3:5])
    # GQA: 2 KV heads serve 4 query heads; the batch is the query heads.
    assert (scores.batch, scores.m, scores.n, scores.k, scores.tB) == (4, 1, CACHED + 1, 32, True)
    assert (output.batch, output.m, output.n, output.k, output.tB) == (4, 1, 32, CACHED + 1, False)
    # transformers scales by head_dim ** -0.5, one ulp off decode_specs' 1/sqrt(32):
    # the comparison rounds α to 12 digits for that reason.
    assert scores.alpha == 32**-0.5 != 1 / math.sqrt(32)
    assert math.isclose(scores.alpha, 1 / math.sqrt(32), rel_tol=1e-15)


def test_tiny_llama_runs_exactly_the_unfused_decode_specs(llama: Capture) -> None:
    assert replace(llama.model, source="") == LLAMA_NUMBERS
    counts = comparable_counts(llama)
    assert counts == expected_counts(LLAMA_NUMBERS, context=CACHED + 1)
    # hidden = heads·head_dim and no bias: q_proj and o_proj are one spec, 2 a layer.
    square = MatmulSpec(op="matmul", m=1, n=64, k=64, tA=False, tB=True, dtype="f32")
    assert counts[square] == 4
    assert {call.site_pattern for call in llama.calls if call.spec == square} == {
        "model.layers.*.self_attn.q_proj",
        "model.layers.*.self_attn.o_proj",
    }


def test_bf16_is_recorded_as_bf16() -> None:
    capture = capture_decode(str(TINY_LLAMA), context=2, dtype="bf16", layers=1)
    assert {spec.dtype for spec in capture.counts()} == {"bf16"}
    assert capture.model.layers == 1 and len(capture.calls) == 9 + 1


def test_a_known_name_is_built_from_the_numbers_shapes_uses() -> None:
    for name, architecture in (("Qwen2.5-0.5B", "qwen2"), ("llama-3.2-1b", "llama")):
        config = get_model(name)
        source = resolve_model(name, layers=3, context=4096)
        hf = source.hf_config
        assert source.known_name and source.architecture == architecture
        assert source.config == replace(config, layers=3)
        assert (
            hf.hidden_size, hf.intermediate_size, hf.num_attention_heads,
            hf.num_key_value_heads, hf.head_dim, hf.vocab_size, hf.num_hidden_layers,
            hf.tie_word_embeddings,
        ) == (
            config.hidden, config.intermediate, config.heads, config.kv_heads,
            config.head_dim, config.vocab, 3, config.tie_embeddings,
        )  # fmt: skip
        assert hf.max_position_embeddings > 4096  # the new token's position has a rotary entry


# ---- the comparison ----------------------------------------------------------------


def test_the_check_finds_the_same_shapes_and_counts(qwen2: Capture) -> None:
    comparison = compare_capture(qwen2)
    assert comparison.ok and comparison.differences == ()
    assert sum(count for _, count in comparison.same) == len(qwen2.calls) == 19
    text = render_comparison(comparison)
    assert "result: the same shapes and counts" in text
    assert "attention spans 6 keys: the 5 cached tokens and the new one" in text
    assert "fuses them into one qkv (n = 256)" in text  # 128 + 2·64


def test_a_bias_decode_specs_does_not_model_is_explained(biased_llama: Capture) -> None:
    o_proj = next(c.spec for c in biased_llama.calls if c.site.endswith("o_proj"))
    assert o_proj.op == "matmul_bias_add"
    comparison = compare_capture(biased_llama)
    assert comparison.ok
    (difference,) = comparison.differences
    assert difference.captured == o_proj and difference.captured_count == 2
    assert difference.expected == replace(o_proj, op="matmul") and difference.expected_count == 2
    assert difference.why is not None and "bias" in difference.why


def test_an_unknown_difference_is_reported_not_explained(qwen2: Capture) -> None:
    counts = qwen2.counts()
    lm_head = qwen2.calls[-1].spec
    stray = MatmulSpec(op="matmul", m=1, n=7, k=64, tA=False, tB=True, dtype="f32")
    counts.pop(lm_head)
    counts[stray] = 3
    comparison = compare_counts(counts, QWEN2_NUMBERS, context=CACHED + 1, dtype="f32")
    assert not comparison.ok
    assert {
        (d.captured, d.captured_count, d.expected, d.expected_count, d.why)
        for d in comparison.differences
    } == {
        (stray, 3, None, 0, None),
        (None, 0, comparable(lm_head), 1, None),
    }
    text = render_comparison(comparison)
    assert text.count("NOT EXPLAINED") == 2 and "result: 2 differences not explained" in text


def test_a_count_off_by_some_calls_is_a_difference(qwen2: Capture) -> None:
    counts = qwen2.counts()
    gate_up = qwen2.calls[6].spec
    counts[gate_up] -= 1  # one of gate and up missed in one layer
    comparison = compare_counts(counts, QWEN2_NUMBERS, context=CACHED + 1, dtype="f32")
    assert [(d.captured, d.expected, d.expected_count) for d in comparison.differences] == [
        (None, gate_up, 1)
    ]
    assert not comparison.ok


def test_the_older_rotary_matmul_is_explained_and_a_lookalike_is_not(qwen2: Capture) -> None:
    # Older transformers build the rotary table as inv_freq [head_dim/2, 1] @ position [1, 1].
    rotary = MatmulSpec(op="matmul", m=16, n=1, k=1, strided_batch=True, dtype="f32")
    not_rotary = replace(rotary, m=15)
    comparison = compare_counts(
        {**qwen2.counts(), rotary: 1, not_rotary: 1},
        QWEN2_NUMBERS,
        context=CACHED + 1,
        dtype="f32",
    )
    whys = {d.captured: d.why for d in comparison.differences}
    assert whys[rotary] is not None and "rotary" in whys[rotary]
    assert whys[not_rotary] is None


def test_a_matmul_like_op_not_recorded_fails_the_check(qwen2: Capture) -> None:
    comparison = compare_capture(replace(qwen2, unhandled=(("aten::mv", 2),)))
    assert not comparison.ok
    assert "aten::mv: looks like a matmul, not recorded" in render_comparison(comparison)


# ---- what one call records -------------------------------------------------------


def record(run: Callable[[], object]) -> list[tuple[str, MatmulSpec]]:
    with torch.no_grad(), recording(torch.nn.Module()) as log:
        run()
    return [(call.call, call.spec) for call in log.calls]


def test_linear_is_recorded_as_the_aten_call_it_lowers_to() -> None:
    x = torch.randn(1, 1, 8)
    weight = torch.randn(12, 8)  # [N, K], as nn.Linear stores it
    bias = torch.randn(12)
    plain = MatmulSpec(op="matmul", m=1, n=12, k=8, tA=False, tB=True, dtype="f32")
    assert record(lambda: F.linear(x, weight)) == [("mm", plain)]
    assert record(lambda: F.linear(x, weight, bias)) == [
        ("addmm", replace(plain, op="matmul_bias_add"))
    ]
    # A weight stored [K, N] and read as it is: tB=0; an activation read transposed: tA=1.
    assert record(lambda: x[0] @ weight.T.contiguous()) == [("mm", replace(plain, tB=False))]
    xt = torch.randn(8, 3).T
    assert record(lambda: xt @ weight.T) == [("mm", replace(plain, m=3, tA=True))]


def test_batched_and_scaled_products() -> None:
    a, b, c0 = torch.randn(5, 2, 8), torch.randn(5, 8, 3), torch.randn(5, 2, 3)
    batched = MatmulSpec(op="matmul", batch=5, m=2, n=3, k=8, strided_batch=True, dtype="f32")
    assert record(lambda: torch.bmm(a, b)) == [("bmm", batched)]
    scaled = replace(batched, op="matmul_alpha_beta", alpha=0.5, beta=2.0, accumulate=True)
    assert record(lambda: torch.baddbmm(c0, a, b, beta=2.0, alpha=0.5)) == [("baddbmm", scaled)]
    # β = 0 never reads C₀: no accumulate, as decode_specs writes attention.
    assert record(lambda: torch.baddbmm(c0, a, b, beta=0.0, alpha=0.5))[0][1].accumulate is None
    # A whole C₀ is not a bias row: addmm adds it as β·C₀.
    full_c0 = record(lambda: torch.addmm(torch.randn(2, 3), a[0], b[0]))
    assert full_c0 == [("addmm", replace(scaled, batch=1, strided_batch=None, alpha=1.0, beta=1.0))]


def test_attention_is_its_two_products_whatever_backend_runs_it() -> None:
    q = torch.randn(1, 4, 1, 16)
    k, v = torch.randn(1, 2, 9, 16), torch.randn(1, 2, 9, 16)
    scores = MatmulSpec(
        op="matmul_alpha_beta", batch=4, m=1, n=9, k=16, tB=True, alpha=0.25, beta=0.0,
        strided_batch=True, dtype="f32",
    )  # fmt: skip
    output = replace(scores, n=16, k=9, tB=False, alpha=1.0)
    fused = record(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    assert fused == [("sdpa_qk", scores), ("sdpa_pv", output)]
    # The math backend runs bmm calls inside: they are not counted twice.
    with sdpa_kernel(SDPBackend.MATH):
        math_backend = record(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    assert math_backend == fused
    # Arguments by position, and a K stored transposed (tB=0 for Q·Kᵀ).
    kt = torch.randn(1, 4, 16, 9).transpose(-1, -2)
    (_, qk), _ = record(lambda: F.scaled_dot_product_attention(q, kt, kt, None, 0.0, scale=0.5))
    assert (qk.alpha, qk.tB) == (0.5, False)


def test_a_matmul_the_rules_do_not_know_is_counted_not_dropped() -> None:
    with recording(torch.nn.Module()) as log:
        torch.mv(torch.randn(3, 4), torch.randn(4))
    assert log.calls == [] and dict(log.unhandled) == {"aten::mv": 1}


@pytest.mark.parametrize(
    ("shape", "strides", "transposed"),
    [
        ((4, 8), (8, 1), False),  # row-major
        ((8, 4), (1, 8), True),  # W.T of a W stored [4, 8]
        ((1, 8), (1, 1), False),  # a vector: row-major whatever its strides
        ((8, 1), (1, 1), False),
        ((8, 1), (1, 0), False),  # an expanded column: its size-1 stride says nothing
        ((4, 8), (16, 2), None),  # a strided view: neither
    ],
)
def test_layout_from_strides(
    shape: tuple[int, int], strides: tuple[int, int], transposed: bool | None
) -> None:
    assert layout_transposed(shape, strides) is transposed


# ---- the profile -----------------------------------------------------------------


def test_the_profile_reads_back_as_the_captured_specs(
    qwen2: Capture, tmp_path: Path, cli: Callable[..., tuple[int, str]]
) -> None:
    path = tmp_path / "capture.jsonl"
    assert write_profile(qwen2, path) == 19
    result = scan(path)
    assert result.problems.total == 0 and result.event_counts == {"GpuOpCompleted": 19}
    assert set(result.matmul_backends) == {"torch"}
    loaded = load_specs(path)
    assert loaded.warnings == []
    read = {spec: spec.provenance.count for spec in loaded.specs if spec.provenance}
    assert read == qwen2.counts()  # the keys parse back to the very same specs, α exact
    code, out = cli("shapes", str(path))
    assert code == 0
    for spec, count in qwen2.counts().items():
        assert any(
            line.split()[1] == str(count) and line.endswith(spec.key()) for line in out.splitlines()
        )


# ---- the command -------------------------------------------------------------------


def test_the_command_writes_the_profile_and_checks_it(
    tmp_path: Path, cli: Callable[..., tuple[int, str]]
) -> None:
    out_file = tmp_path / "tiny.jsonl"
    code, out = cli("capture", "--model", str(TINY_QWEN2), "--context", "3", "--dtype", "f32",
                    "--out", str(out_file), "--check")  # fmt: skip
    assert code == 0, out
    assert out.startswith("captured tiny-qwen2 (qwen2, 2 layers): one decode token after 3 cached")
    assert f"wrote 19 events to {out_file}" in out
    assert out.rstrip().endswith("result: the same shapes and counts")
    assert len(load_specs(out_file).specs) == 8


def test_the_check_exits_1_on_a_difference_it_cannot_explain(
    tmp_path: Path, cli: Callable[..., tuple[int, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compare_module, "RULES", ())  # the o_proj bias goes unexplained
    path = config_file(tmp_path, TINY_LLAMA, attention_bias=True)
    code, out = cli("capture", "--model", str(path), "--context", "2", "--layers", "1", "--check")
    assert code == 1 and "NOT EXPLAINED" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--model", "gpt-5"], "unknown model 'gpt-5'; known: qwen2.5-0.5b"),
        (["--model", "missing/config.json"], "cannot read missing/config.json"),
        (["--model", "{not-json}"], "is not JSON: Expecting property name"),
        (
            ["--model", "{gpt2}"],
            "unsupported architecture (model_type 'gpt2'); supported: qwen2, llama",
        ),
        (["--model", "{bad-hidden}"], "hidden_size must be a positive integer, got 'wide'"),
        (["--model", "{zero-heads}"], "num_attention_heads must be a positive integer, got 0"),
        (["--model", "{bad-eps}"], "config.json: transformers cannot read it as a qwen2 config:"),
        (["--model", "qwen2.5-0.5b", "--context", "0"], "--context: must be at least 1"),
        (["--model", "qwen2.5-0.5b", "--out", "."], "cannot write .: it is a directory"),
        pytest.param(
            ["--model", "qwen2.5-0.5b", "--device", "cuda"],
            "no CUDA device is visible here",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here"),
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(
    argv: list[str], needle: str, tmp_path: Path, cli: Callable[..., tuple[int, str]],
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    files = {
        "{not-json}": "{'model_type': 'qwen2'}",
        "{gpt2}": json.dumps({"model_type": "gpt2", "n_embd": 64}),
        "{bad-hidden}": json.dumps({"model_type": "qwen2", "hidden_size": "wide"}),
        "{zero-heads}": json.dumps({"model_type": "llama", "num_attention_heads": 0}),
        "{bad-eps}": json.dumps({"model_type": "qwen2", "rms_norm_eps": "tiny"}),
    }
    for i, arg in enumerate(argv):
        if arg in files:
            argv[i] = str(tmp_path / "config.json")
            (tmp_path / "config.json").write_text(files[arg], encoding="utf-8")
    code, out = cli("capture", *argv)
    err = capsys.readouterr().err
    assert code == 2 and out == ""
    assert needle in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_context_0_is_refused_by_the_library_too() -> None:
    with pytest.raises(MatprobeError, match="context must be an integer >= 1, got 0"):
        capture_decode("qwen2.5-0.5b", context=0)


HOSTILE = "\x1b[2J\x1b]0;owned\x07<script>alert(1)</script>\nmatprobe: all good"


def test_names_from_a_config_never_reach_the_terminal_unescaped(
    tmp_path: Path, cli: Callable[..., tuple[int, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, TINY_LLAMA, _name_or_path=HOSTILE)
    code, out = cli("capture", "--model", str(path), "--context", "2", "--layers", "1", "--check")
    err = capsys.readouterr().err
    assert code == 0
    header = out.splitlines()[0]
    # ESC and BEL are shown, not acted on (no screen wipe, no window title), and
    # the newline is a space: no forged line.
    shown = "\\x1b[2J\\x1b]0;owned\\x07<script>alert(1)</script> matprobe: all good"
    assert header.startswith(f"captured {shown} (llama, 1 layers)")
    for text in (out, err):
        assert "\x1b" not in text and "\x07" not in text
    assert not any(line.startswith("matprobe: all good") for line in (out + err).splitlines())

    hostile_type = config_file(tmp_path, TINY_LLAMA, model_type=HOSTILE)
    code, _ = cli("capture", "--model", str(hostile_type))
    err = capsys.readouterr().err
    assert code == 2 and "\x1b" not in err and "\x07" not in err
    assert len(err.strip().splitlines()) == 1 and "model_type '\\x1b[2J" in err
