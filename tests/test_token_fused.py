"""The fused decode step and the Q8_0 token: ``forward_fused`` computes the same
step as ``forward`` (a float64 fused implementation matches it, and fused
kernels that drop a norm, a residual or swap gate and up fail validation), the
real ``triton.gemv_decode`` kernels pass in f16 and Q8_0 (interpreter), and a
Q8_0 token's fp16 peers run beside it, each validated against its own float64
reference."""

from __future__ import annotations

import io
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the token needs torch (the CPU build is enough)")

from conftest import interpreting  # noqa: E402
from matprobe.errors import MatprobeError  # noqa: E402
from matprobe.profile.models import ModelConfig  # noqa: E402
from matprobe.token.bench import TokenBench  # noqa: E402
from matprobe.token.modes import mode_named, parse_modes, select_modes  # noqa: E402
from matprobe.token.report import render_text  # noqa: E402
from matprobe.token.result import TokenResult  # noqa: E402
from matprobe.token.step import RMS_EPS, DecodeStep, site_specs  # noqa: E402
from matprobe.token.weights import Q8Matrix, make_weights, small_config  # noqa: E402

CONTEXT = 9
#: Q8_0 needs hidden and intermediate in blocks of 32; odd heads and vocab.
Q8_CONFIG = small_config(layers=2, hidden=64, intermediate=96, heads=6, kv_heads=2,
                         head_dim=16, vocab=83)  # fmt: skip
#: The real kernels run in the interpreter: one layer, still ragged.
TINY = small_config(layers=1, hidden=64, intermediate=96, heads=2, kv_heads=1, head_dim=16,
                    vocab=50)  # fmt: skip


def bench(config: ModelConfig, dtype: str = "f16", **kwargs: Any) -> TokenBench:
    return TokenBench(config, context=CONTEXT, dtype=dtype, device="cpu", **kwargs)


def run_modes(b: TokenBench, *names: str, rounds: int = 2) -> TokenResult:
    selection = select_modes(names, device_kind="cpu", have_table=False, dtype=b.dtype)
    return b.run(selection, rounds=rounds)


class TorchFused:
    """The fused ops in plain torch, each rounding once (as a fused kernel does):
    honest unless told to cheat."""

    def __init__(self, step: DecodeStep, cheat: str = "") -> None:
        self.step, self.cheat = step, cheat
        w = step.weights
        qkv = [m if step.specs["qkv"].tB else m.T for m in w.qkv]
        self.rows: dict[str, list[Any]] = {
            "qkv": qkv, "o_proj": w.o_proj, "gate_up": w.gate_up, "down": w.down,
            "lm_head": [w.lm_head],
        }  # fmt: skip

    def _w(self, site: str, layer: int | None) -> Any:
        m = self.rows[site][0 if layer is None else layer]
        return (m.dense(torch.float64) if isinstance(m, Q8Matrix) else m).double()

    def _normed(self, h: Any, gain: Any) -> Any:
        x = h.double()
        if self.cheat != "skips the norm's scale":
            x = x / torch.sqrt(x.pow(2).mean() + RMS_EPS)
        return x * gain.double()

    def norm_linear(self, site: str, layer: int | None, h: Any, gain: Any, bias: Any) -> Any:
        y = self._normed(h, gain) @ self._w(site, layer).T
        return (y if bias is None else y + bias.double()).to(h.dtype)

    def norm_swiglu(self, layer: int, h: Any, gain: Any) -> Any:
        both = self._normed(h, gain) @ self._w("gate_up", layer).T
        gate, up = both.chunk(2, dim=-1)
        if self.cheat == "swaps gate and up":
            gate, up = up, gate
        return (torch.nn.functional.silu(gate) * up).to(h.dtype)

    def linear_residual(self, site: str, layer: int, x: Any, residual: Any) -> Any:
        y = x.double() @ self._w(site, layer).T
        if not (self.cheat == "drops one residual" and site == "down" and layer == 0):
            y = y + residual.double()
        return y.to(x.dtype)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "q8_0"])
def test_the_fused_step_computes_the_step(dtype: str) -> None:
    b = bench(Q8_CONFIG, dtype)
    b.fused = TorchFused(b.step)
    result = run_modes(b, "fused")
    row = result.get("fused")
    assert row is not None and row.status == "PASS", row and row.reason
    assert row.error is not None and result.baseline.error is not None
    # rounding once a matmul, it is no less exact than the eager baseline
    assert row.error.norm_rel <= 1.5 * result.baseline.error.norm_rel


@pytest.mark.parametrize("cheat", ["skips the norm's scale", "drops one residual",
                                   "swaps gate and up"])  # fmt: skip
def test_fused_kernels_that_cheat_fail(cheat: str) -> None:
    b = bench(Q8_CONFIG, "f16")
    b.fused = TorchFused(b.step, cheat)
    row = run_modes(b, "fused").get("fused")
    assert row is not None and row.status == "FAIL" and not row.timed, (cheat, row and row.reason)


def test_q8_weights_are_the_fp16_models_draws_quantized() -> None:
    q8 = make_weights(Q8_CONFIG, context=CONTEXT, dtype="q8_0")
    f16 = make_weights(Q8_CONFIG, context=CONTEXT, dtype="f16")
    assert isinstance(q8.qkv[0], Q8Matrix) and isinstance(q8.lm_head, Q8Matrix)
    # Q8_0 stores every matrix [n, k]; the fp16 QKV weight is [k, n] (the engine's)
    assert q8.qkv[0].shape == tuple(f16.qkv[0].T.shape)
    assert site_specs(Q8_CONFIG, context=CONTEXT, dtype="q8_0")["qkv"].tB
    dense, want = q8.down[1].dense(torch.float64), f16.down[1].double()
    step = dense.abs().amax() / 127
    assert float((dense - want).abs().max()) <= float(step)  # half a quant + fp16 rounding
    assert q8.attn_norm[0].dtype == torch.float16 and torch.equal(q8.x0, f16.x0)
    assert q8.weight_bytes() < 0.6 * f16.weight_bytes()


def test_a_q8_token_runs_beside_its_fp16_peers() -> None:
    b = bench(Q8_CONFIG, "q8_0")
    result = run_modes(b, "eager", "eager-none", "f16:eager-none")
    names = [r.mode.name for r in result.modes]
    assert names == ["eager", "eager-none", "f16:eager", "f16:eager-none"]
    peer = result.get("f16:eager")
    assert peer is not None and peer.status == "PASS" and peer.timed
    assert result.baseline.status == "PASS"
    # each against its own float64 reference: the two models' logits differ
    assert not torch.allclose(b.references[0], b.peer().references[0])
    assert len(result.baseline.samples_us) == len(peer.samples_us) == 2
    text = render_text(result)
    assert "f16:eager added" in "\n".join(result.notes)
    # the token's matmul share is read against its fp16 peer's — unless the CPU's
    # rounds (two, on a loaded machine) leave a share within its noise: then the
    # table says "noise" and no ratio is printed
    if result.share_ratio("eager", "f16:eager") is not None:
        assert "f16:eager's" in text
    else:
        assert "noise" in text


def test_mode_selection_knows_peers_and_what_q8_cannot_run() -> None:
    f16 = select_modes(["f16:compile"], device_kind="cuda", have_table=True, dtype="f16")
    assert ("f16:compile", "a peer runs beside a q8_0 token (this token is f16)") in f16.skipped
    q8 = select_modes(["eager+table", "fused"], device_kind="cuda", have_table=True,
                      dtype="q8_0")  # fmt: skip
    assert [m.name for m in q8.modes] == ["eager", "fused"]
    assert "dense weights" in dict(q8.skipped)["eager+table"]
    default = select_modes(None, device_kind="cuda", have_table=False, dtype="q8_0",
                           pdl_problem=None)  # fmt: skip
    assert "f16:compile" in [m.name for m in default.modes] and not default.skipped
    no_triton = select_modes(
        ["fused"], device_kind="cuda", have_table=False, triton_problem="needs triton (…)"
    )
    assert "needs triton" in dict(no_triton.skipped)["fused"]
    assert mode_named("f16:compile") is not None and mode_named("f16:eager+table") is None
    assert mode_named("bf16:eager") is None
    with pytest.raises(MatprobeError, match="unknown mode 'f16:fused'"):
        parse_modes("eager,f16:fused")


def test_fused_and_modes_together_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from matprobe.cli import main

    code = main(["token", "--small", "--fused", "--modes", "eager"], out=io.StringIO())
    assert code == 2
    assert "--fused or --modes" in capsys.readouterr().err


@pytest.mark.skipif(not interpreting(), reason="the kernels run here in the Triton interpreter")
@pytest.mark.parametrize("dtype", ["f16", "q8_0"])
def test_the_decode_kernels_pass_plain_and_fused(dtype: str) -> None:
    pytest.importorskip("triton")
    b = bench(TINY, dtype, trials=1)
    result = run_modes(b, "eager+decode", "fused", rounds=1)
    for name in ("eager+decode", "fused"):
        row = result.get(name)
        assert row is not None and row.status == "PASS", (name, row and row.reason)


def test_triton_modes_off_a_gpu_are_skipped_up_front_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``token --small --fused`` on the CPU ended its Triton modes in "RuntimeError:
    0 active drivers" (exit 0): without the interpreter they are skipped before the
    token runs, saying how to run them."""
    from matprobe.token.modes import triton_problem

    pytest.importorskip("triton", reason="the reason given without triton is another")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    why = triton_problem("cpu")
    assert why is not None and "TRITON_INTERPRET=1" in why
    chosen = select_modes(["eager", "fused"], device_kind="cpu", have_table=False,
                          triton_problem=why)  # fmt: skip
    assert [m.name for m in chosen.modes] == ["eager"]
    assert dict(chosen.skipped)["fused"] == why
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert triton_problem("cpu") is None and triton_problem("cuda") is None


@pytest.mark.parametrize(
    ("shares", "noise"),
    [
        ([-19657.3, -20000.0, -19000.0, -21000.0, -18000.0, -20500.0, -19900.0], True),
        ([-30.0, 40.0, -10.0, 25.0, 5.0, -20.0, 15.0, 30.0, -5.0], True),  # interval holds 0
        ([580.0, 582.0, 579.0, 590.0, 585.0, 581.0, 583.0], False),
        ([-3.0, -1.0], True),  # too few for an interval: the median's sign
    ],
)
def test_a_matmul_share_whose_interval_holds_zero_is_noise_not_a_figure(
    shares: list[float], noise: bool
) -> None:
    """``token`` printed ``-19657.3 µs, -56.946×`` as a matmul share."""
    from matprobe.token.modes import mode_named
    from matprobe.token.result import ModeResult

    eager, table = mode_named("eager"), mode_named("eager+table")
    assert eager is not None and table is not None
    result = ModeResult(table, "PASS", share_samples_us=shares)
    assert result.share_is_noise is noise
    base = ModeResult(eager, "PASS", share_samples_us=[800.0, 805.0, 798.0, 810.0, 802.0, 799.0])
    assert not base.share_is_noise


def test_a_tables_tiles_reach_the_decode_kernels_and_the_rest_keep_their_own() -> None:
    """``TokenBench(tiles=…)`` (``matprobe token --table``: the layer sites'
    triton.gemv_decode winners) sets those sites' tiles in every decode-kernel set."""
    from matprobe.kernels.triton.decode import DecodeTile

    own = bench(small_config()).decode_kernels(as_op=False, pdl=True).tiles
    chosen = DecodeTile(1, 64, 8)
    b = bench(small_config(), tiles={"down": chosen})
    for as_op, pdl in ((False, False), (False, True), (True, False)):
        tiles = b.decode_kernels(as_op=as_op, pdl=pdl).tiles
        assert tiles["down"] == chosen
        assert {s: t for s, t in tiles.items() if s != "down"} == {
            s: t for s, t in own.items() if s != "down"
        }


@pytest.mark.parametrize(
    ("card", "n", "k", "quantized", "tile"),
    [
        # Tiles measured in a whole token on an H100 serve every card ...
        ("NVIDIA H100 80GB HBM3", 151936, 896, False, (4, 512, 4)),
        ("NVIDIA H100 80GB HBM3", 896, 4864, True, (1, 1024, 8)),
        ("NVIDIA H100 80GB HBM3", 1152, 896, False, (4, 512, 4)),
        ("", 896, 4864, True, (1, 1024, 8)),
        # ... but where an H200's own token chose otherwise.
        ("NVIDIA H200", 151936, 896, False, (4, 512, 2)),
        ("NVIDIA H200", 896, 4864, True, (1, 1024, 4)),
        ("NVIDIA H200", 1152, 896, False, (4, 1024, 4)),
        ("NVIDIA H200", 4864, 896, False, (2, 1024, 4)),
        # A shape measured nowhere takes the rule on any card.
        ("NVIDIA H200", 128256, 2048, False, (2, 1024, 4)),
    ],
)
def test_a_token_tile_is_the_one_measured_on_its_card_else_an_h100s(
    card: str, n: int, k: int, quantized: bool, tile: tuple[int, int, int]
) -> None:
    from matprobe.token.fused import default_tile

    got = default_tile(n, k, quantized=quantized, card=card)
    assert (got.bn, got.bk, got.warps) == tile
