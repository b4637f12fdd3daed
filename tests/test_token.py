"""``matprobe token``: one decode step, its modes, its validation, its profile.

On the CPU everything but torch.compile's Inductor and CUDA graphs runs here, on
small configs (a compiled mode is traced by Dynamo with its eager backend: one
graph, no break); the GPU test at the end runs every mode for real.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the token needs torch (the CPU build is enough)")

from conftest import on_a_card  # noqa: E402
from matprobe.cli.run import _infer_tokens  # noqa: E402
from matprobe.cli.token import register  # noqa: E402
from matprobe.errors import MatprobeError  # noqa: E402
from matprobe.profile.analysis import AnalyzeOptions, analyze  # noqa: E402
from matprobe.profile.jsonl import scan  # noqa: E402
from matprobe.profile.models import ModelConfig, decode_specs, get_model  # noqa: E402
from matprobe.profile.profiles import load_specs  # noqa: E402
from matprobe.spec import MatmulSpec  # noqa: E402
from matprobe.token.bench import TokenBench, step_call  # noqa: E402
from matprobe.token.floor import ByteFloor, token_bytes  # noqa: E402
from matprobe.token.judge import ReplayJudge  # noqa: E402
from matprobe.token.linear import NoMatmul, torch_linear  # noqa: E402
from matprobe.token.modes import MODES, parse_modes, select_modes  # noqa: E402
from matprobe.token.predict import check_predictions, weight_calls  # noqa: E402
from matprobe.token.profile import record_token, save_profile  # noqa: E402
from matprobe.token.report import render_text, to_json  # noqa: E402
from matprobe.token.result import TokenResult  # noqa: E402
from matprobe.token.step import (  # noqa: E402
    FINAL_PARTS,
    LAYER_PARTS,
    WEIGHT_SITES,
    DecodeStep,
    site_specs,
)
from matprobe.token.timing import WINDOW, interleaved_rounds, rotation  # noqa: E402
from matprobe.token.validate import (  # noqa: E402
    LogitError,
    baseline_bound,
    relative_to_baseline,
)
from matprobe.token.weights import make_weights, small_config  # noqa: E402

Linear = Callable[[MatmulSpec, Any, Any, Any], Any]

#: Awkward configs: odd hidden, intermediate and vocab, one KV head for three
#: query heads, no QKV bias (Llama-like), groups of two.
AWKWARD: dict[str, ModelConfig] = {
    "small": small_config(),
    "odd": small_config(
        layers=3, hidden=37, intermediate=53, heads=3, kv_heads=1, head_dim=10, vocab=101
    ),
    "no-bias": small_config(
        layers=2, hidden=45, intermediate=71, heads=6, kv_heads=3, head_dim=6, vocab=97,
        qkv_bias=False,
    ),
}  # fmt: skip
DTYPES = ("f16", "bf16", "f32")
CONTEXT = 9


@pytest.fixture(autouse=True, scope="module")
def one_cpu_thread() -> Iterator[None]:
    """Two intra-op threads on a 2-core box made a 1 ms step take 1-100 ms."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def bench(
    config: ModelConfig = AWKWARD["small"],
    dtype: str = "f16",
    **linears: Linear,
) -> TokenBench:
    """The step of ``config`` on the CPU; ``linears`` by kind (``table=``,
    ``torch=`` to replace the baseline's kernels)."""
    table = {name.replace("_", "-"): fn for name, fn in linears.items()}
    return TokenBench(config, context=CONTEXT, dtype=dtype, device="cpu", linears=table)


def run_modes(b: TokenBench, *names: str, rounds: int = 3) -> TokenResult:
    selection = select_modes(names, device_kind="cpu", have_table="table" in b.linears)
    return b.run(selection, rounds=rounds)


# ---- honest and cheating kernels ------------------------------------------------


def round_once_linear(spec: MatmulSpec, x: Any, w: Any, bias: Any) -> Any:
    """An honest kernel of another kind: fp32 products and sum, bias added in fp32,
    rounded once (what a Triton GEMV does)."""
    wf = w.float().T if spec.tB else w.float()
    y = x.float() @ wf
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


def drop_k_tail(spec: MatmulSpec, x: Any, w: Any, bias: Any) -> Any:
    """Leaves out the last 1/8 of K (an unmasked last tile read as zeros)."""
    keep = x.shape[1] - x.shape[1] // 8
    x = x.clone()
    x[:, keep:] = 0
    return torch_linear(spec, x, w, bias)


class ZeroOneDown:
    """Returns zeros for one layer's down projection (a kernel wrong on one call of
    a spec out of many), computes everything else."""

    def __init__(self, down: MatmulSpec, layer: int, layers: int) -> None:
        self.down, self.layer, self.layers = down, layer, layers
        self.calls = 0  # of the down projection, over every token

    def __call__(self, spec: MatmulSpec, x: Any, w: Any, bias: Any) -> Any:
        y = torch_linear(spec, x, w, bias)
        if spec != self.down:
            return y
        layer, self.calls = self.calls % self.layers, self.calls + 1
        return torch.zeros_like(y) if layer == self.layer else y


class StaleX:
    """Computes with the x of the previous call of the same spec (a kernel that reads
    its input before the producer wrote it)."""

    def __init__(self) -> None:
        self.previous: dict[str, Any] = {}

    def __call__(self, spec: MatmulSpec, x: Any, w: Any, bias: Any) -> Any:
        key = spec.key()
        stale = self.previous.get(key, x)
        self.previous[key] = x.clone()
        return torch_linear(spec, stale, w, bias)


def nan_linear(spec: MatmulSpec, x: Any, w: Any, bias: Any) -> Any:
    y = torch_linear(spec, x, w, bias)
    y[0, -1] = math.nan
    return y


# ---- the step --------------------------------------------------------------------


def test_weights_are_stored_as_decode_specs_lays_them_out() -> None:
    config = AWKWARD["odd"]
    w = make_weights(config, context=CONTEXT, dtype="bf16")
    specs = site_specs(config, context=CONTEXT, dtype="bf16")
    assert specs["qkv"].tB is False and tuple(w.qkv[0].shape) == (specs["qkv"].k, specs["qkv"].n)
    for role in ("o_proj", "gate_up", "down"):
        assert specs[role].tB is True
        assert tuple(getattr(w, role)[0].shape) == (specs[role].n, specs[role].k)
    assert tuple(w.lm_head.shape) == (config.vocab, config.hidden)
    # every layer reads weights of its own (cold in decode), rounded to the dtype
    assert len({t.data_ptr() for t in w.down}) == config.layers
    assert not torch.equal(w.down[0], w.down[1])
    assert all(t.dtype == torch.bfloat16 for t in w.tensors())


def test_the_step_calls_linear_with_exactly_the_specs_decode_specs_gives() -> None:
    config = AWKWARD["odd"]
    b = bench(config)
    calls: list[tuple[MatmulSpec, tuple[int, ...], tuple[int, ...], bool]] = []

    def recording(spec: MatmulSpec, x: Any, w: Any, bias: Any) -> Any:
        calls.append((spec, tuple(x.shape), tuple(w.shape), bias is not None))
        return torch_linear(spec, x, w, bias)

    b.step.forward(recording)
    shapes = decode_specs(config, context=CONTEXT, dtype="f16")
    weight = {s.role: s for s in shapes if s.role in WEIGHT_SITES}
    roles = [*(["qkv", "o_proj", "gate_up", "down"] * config.layers), "lm_head"]
    assert [spec for spec, *_ in calls] == [weight[role].spec for role in roles]
    assert Counter(spec.key() for spec, *_ in calls) == {
        s.spec.key(): s.count for s in weight.values()
    }
    for (spec, x_shape, w_shape, has_bias), role in zip(calls, roles, strict=True):
        assert x_shape == (1, spec.k)
        assert w_shape == ((spec.n, spec.k) if spec.tB else (spec.k, spec.n))
        assert has_bias == (role == "qkv")


def naive_step(config: ModelConfig, w: Any, context: int) -> Any:
    """Hugging Face's Qwen2 decode step written out plainly in float64, one query head
    at a time with its KV head h // group (repeat_kv): an independent check of the
    step's grouped attention, RoPE and op order."""
    c, pos = config, context - 1
    group = c.heads // c.kv_heads
    qn, kvn = c.heads * c.head_dim, c.kv_heads * c.head_dim
    k_cache = [t.clone() for t in w.k_cache]
    v_cache = [t.clone() for t in w.v_cache]

    def norm(x: Any, g: Any) -> Any:
        return x / torch.sqrt((x * x).mean() + 1e-6) * g

    def rope(x: Any) -> Any:
        half = c.head_dim // 2
        return x * w.cos + torch.cat([-x[half:], x[:half]]) * w.sin

    h = w.x0[0]
    for i in range(c.layers):
        qkv = norm(h, w.attn_norm[i]) @ w.qkv[i]
        if w.qkv_bias[i] is not None:
            qkv = qkv + w.qkv_bias[i]
        heads_out = []
        for kv in range(c.kv_heads):
            k_cache[i][kv, pos] = rope(qkv[qn + kv * c.head_dim : qn + (kv + 1) * c.head_dim])
            v_cache[i][kv, pos] = qkv[qn + kvn + kv * c.head_dim : qn + kvn + (kv + 1) * c.head_dim]
        for head in range(c.heads):
            q = rope(qkv[head * c.head_dim : (head + 1) * c.head_dim])
            keys, values = k_cache[i][head // group], v_cache[i][head // group]
            p = torch.softmax(keys @ q / math.sqrt(c.head_dim), dim=0)
            heads_out.append(p @ values)
        h = h + w.o_proj[i] @ torch.cat(heads_out)
        gate_up = w.gate_up[i] @ norm(h, w.mlp_norm[i])
        act = torch.nn.functional.silu(gate_up[: c.intermediate]) * gate_up[c.intermediate :]
        h = h + w.down[i] @ act
    return w.lm_head @ norm(h, w.final_norm)


@pytest.mark.parametrize("name", sorted(AWKWARD))
def test_the_step_computes_a_qwen2_decode_step(name: str) -> None:
    config = AWKWARD[name]
    w = make_weights(config, context=CONTEXT, dtype="f32").map(lambda t: t.double())
    specs = site_specs(config, context=CONTEXT, dtype="f32")
    got = DecodeStep(config, w, specs, context=CONTEXT).forward(torch_linear)
    want = naive_step(config, w, CONTEXT)
    assert torch.allclose(got[0], want, rtol=1e-10, atol=1e-10)


def test_activations_stay_of_order_one_through_many_layers() -> None:
    config = small_config(layers=24, hidden=96, intermediate=160, vocab=64)
    b = bench(config, "f32")
    rms: list[float] = []

    def watching(spec: MatmulSpec, x: Any, w: Any, bias: Any) -> Any:
        rms.append(float(x.pow(2).mean().sqrt()))
        return torch_linear(spec, x, w, bias)

    logits = b.step.forward(watching)
    assert min(rms) > 0.2 and max(rms) < 5.0, (min(rms), max(rms))
    assert 0.3 < float(logits.pow(2).mean().sqrt()) < 3.0


def test_the_step_replays_to_the_same_logits() -> None:
    """It writes only the cache's newest slot, so a graph of it can be replayed."""
    b = bench(AWKWARD["odd"], "bf16")
    first = b.step.forward(torch_linear).clone()
    assert torch.equal(b.step.forward(torch_linear), first)


def test_the_byte_floor_counts_every_weight_once_and_the_whole_cache() -> None:
    for config in AWKWARD.values():
        w = make_weights(config, context=CONTEXT, dtype="bf16")
        assert (w.weight_bytes(), w.kv_bytes()) == token_bytes(
            config, context=CONTEXT, dtype="bf16"
        )
    # DESIGN.md §7: Qwen2.5-0.5B in fp16 reads ≈ 988 MB of weights a token
    weights, kv = token_bytes(get_model("qwen2.5-0.5b"), context=128, dtype="f16")
    assert round(weights / 1e6) == 988 and kv == 24 * 2 * 2 * 128 * 64 * 2
    floor = ByteFloor(weights, kv, read_gbps=3000.0)
    assert floor.floor_us == pytest.approx((weights + kv) / 3000e3)
    assert floor.percent(2 * (floor.floor_us or 0)) == pytest.approx(50.0)
    assert ByteFloor(weights, kv, None).percent(100.0) is None


# ---- validation ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(AWKWARD))
def test_honest_kernels_pass(name: str, dtype: str) -> None:
    result = run_modes(bench(AWKWARD[name], dtype, table=round_once_linear), "eager+table")
    for mode in ("eager", "eager+table"):
        row = result.get(mode)
        assert row is not None and row.status == "PASS", (mode, row and row.reason)
    assert result.tolerance is not None
    assert result.baseline.error is not None
    assert result.baseline.error.norm_rel <= result.baseline_bound.norm_rel


#: Each cheater, made for the step's specs (by role).
CHEATERS: dict[str, Callable[[ModelConfig, dict[str, MatmulSpec]], Linear]] = {
    "drops the K tail": lambda config, specs: drop_k_tail,
    "zeroes one layer's down projection": lambda config, specs: ZeroOneDown(
        specs["down"], layer=1, layers=config.layers
    ),
    "uses the previous call's x": lambda config, specs: StaleX(),
    "writes a NaN": lambda config, specs: nan_linear,
}


@pytest.mark.parametrize("dtype", ("f16", "bf16"))
@pytest.mark.parametrize("cheat", sorted(CHEATERS))
def test_cheating_kernels_fail_and_are_never_timed(cheat: str, dtype: str) -> None:
    config = AWKWARD["odd"]
    cheater = CHEATERS[cheat](config, site_specs(config, context=CONTEXT, dtype=dtype))
    result = run_modes(bench(config, dtype, table=cheater), "eager+table")
    row = result.get("eager+table")
    assert row is not None and row.status == "FAIL", (cheat, row and row.reason)
    assert not row.timed and row.share_us is None
    assert result.baseline.status == "PASS" and result.baseline.timed


def test_a_kernel_that_answers_the_first_trial_only_fails() -> None:
    """Validation writes a fresh embedding for its second trial: a kernel memoising
    its outputs (by call position, by pointer) gives the first token's logits."""
    memo: dict[int, Any] = {}
    counter = {"calls": 0}

    def memoising(spec: MatmulSpec, x: Any, w: Any, bias: Any) -> Any:
        key = counter["calls"] % (4 * AWKWARD["small"].layers + 1)
        counter["calls"] += 1
        if key not in memo:
            memo[key] = torch_linear(spec, x, w, bias)
        return memo[key]

    result = run_modes(bench(table=memoising), "eager+table")
    row = result.get("eager+table")
    assert row is not None and row.status == "FAIL"


def test_a_kernel_that_crashes_or_returns_the_wrong_shape_costs_its_row_only() -> None:
    def crashing(spec: MatmulSpec, x: Any, w: Any, bias: Any) -> Any:
        raise RuntimeError("illegal\nmemory access")

    def narrow(spec: MatmulSpec, x: Any, w: Any, bias: Any) -> Any:
        return torch_linear(spec, x, w, bias)[:, :-1]

    for fn, needle in ((crashing, "RuntimeError: illegal"), (narrow, "expected (1, ")):
        result = run_modes(bench(table=fn), "eager+table", "eager-none")
        row = result.get("eager+table")
        assert row is not None and row.status == "ERROR" and needle in row.reason
        assert "\n" not in row.reason
        none = result.get("eager-none")
        assert result.baseline.timed and none is not None and none.timed


def test_a_baseline_that_fails_is_reported_and_others_face_the_absolute_bound() -> None:
    b = bench(torch=drop_k_tail, table=torch_linear)
    result = run_modes(b, "eager+table")
    assert result.baseline.status == "FAIL" and not result.baseline.timed
    assert result.tolerance is None  # nothing to be relative to
    assert "other modes held to the same bound" in render_text(result)
    row = result.get("eager+table")
    assert row is not None and row.status == "PASS"


def test_tolerances_follow_the_baseline_with_a_floor() -> None:
    u = 2.0**-11
    loose = relative_to_baseline(LogitError(10 * u, 30 * u, 0), "f16", 4864)
    assert (loose.norm_rel, loose.max_rel) == (20 * u, 90 * u)
    exact = relative_to_baseline(LogitError(0.0, 0.0, 0), "f16", 4864)
    assert (exact.norm_rel, exact.max_rel) == (2 * u, 8 * u)
    assert "NaN" in (exact.failure(LogitError(math.inf, math.inf, 3)) or "")
    # the baseline's own bound grows with depth and, in f32, with the accumulation
    assert baseline_bound("bf16", 24, 896).norm_rel > baseline_bound("bf16", 2, 896).norm_rel
    f32 = baseline_bound("f32", 24, 4864)
    assert 100 * 2.0**-24 < f32.norm_rel < 2.0**-13  # catches TF32 (≈ 2⁻¹¹ a matmul)
    # in f32 an exact baseline still leaves room for an honest other summation order
    # (≈ √k roundings), and none for TF32
    f32_exact = relative_to_baseline(LogitError(0.0, 0.0, 0), "f32", 64)
    assert f32_exact.norm_rel == pytest.approx(2 * 8 * 2.0**-24)
    assert 10 * 2.0**-24 < f32_exact.norm_rel < 2.0**-13
    assert f32_exact.max_rel == pytest.approx(4 * f32_exact.norm_rel)


@pytest.mark.parametrize("which", ["norm", "max"])
def test_a_failing_token_prints_its_figure_and_its_bound_apart(which: str) -> None:
    """As a matmul's failure does (issue 21): never "1.50e-03 > 1.50e-03"."""
    bound = relative_to_baseline(LogitError(7.5e-4, 2.5e-4, 0), "f16", 896)  # 1.5e-3, 8u
    figure = (bound.norm_rel if which == "norm" else bound.max_rel) * (1 + 2e-4)
    error = LogitError(figure, 0.0, 0) if which == "norm" else LogitError(0.0, figure, 0)
    message = bound.failure(error) or ""
    shown, limit = message.split(" (")[0].split(" ")[-3::2]
    assert float(shown) > float(limit), message


# ---- every timed replay judged -------------------------------------------------------


class HonestWhileValidated:
    """Right for as many tokens as validation makes, then its LM head returns what it
    returned last (a kernel that knows validation comes first, or serves timed calls
    from a cache)."""

    def __init__(self, lm_head: MatmulSpec, honest_tokens: int) -> None:
        self.lm_head, self.honest_tokens = lm_head, honest_tokens
        self.tokens = 0
        self.last: Any = None

    def __call__(self, spec: MatmulSpec, x: Any, w: Any, bias: Any) -> Any:
        if spec != self.lm_head:
            return torch_linear(spec, x, w, bias)
        self.tokens += 1
        if self.last is None or self.tokens <= self.honest_tokens:
            self.last = torch_linear(spec, x, w, bias)
        return self.last.clone()


def test_every_timed_replay_of_a_mode_is_judged_on_a_fresh_input() -> None:
    b = bench(table=round_once_linear)
    seen: list[tuple[float, ...]] = []
    lm_head = b.specs["lm_head"]

    def watching(spec: MatmulSpec, x: Any, w: Any, bias: Any) -> Any:
        if spec == lm_head:
            seen.append(tuple(x.reshape(-1).tolist()))
        return round_once_linear(spec, x, w, bias)

    b.linears["table"] = watching
    result = run_modes(b, "eager+table", rounds=4)
    row = result.get("eager+table")
    assert row is not None and row.status == "PASS"
    assert row.judged == 4 + 1  # the rounds and the warm-up round
    assert result.baseline.judged == 5
    # the timed replays' problems: each new, none met before (validation) or after
    # (the kernel count, after the rounds)
    *rest, counted = seen
    timed, before = rest[-row.judged :], [*rest[: -row.judged], counted]
    assert len(set(timed)) == len(timed) and not set(timed) & set(before)


def test_a_mode_right_only_while_validated_fails_its_timed_replays() -> None:
    """On main it PASSed and was timed: validation, the warm-up and the kernel count
    met honest tokens; the rounds got the last logits again."""
    b = bench()
    b.linears["table"] = HonestWhileValidated(b.specs["lm_head"], honest_tokens=4)
    result = run_modes(b, "eager+table", rounds=3)
    row = result.get("eager+table")
    assert row is not None and row.status == "FAIL", row.reason
    assert row.reason.startswith("timed replay ") and not row.samples_us


def test_every_timed_replay_gets_a_rope_position_of_its_own() -> None:
    """The RoPE tables the step reads change with every timed replay (outside the
    clock) and are put back after the rounds; each replay is judged at its own
    position (an honest mode passes only if the reference used that position)."""
    b = bench(table=round_once_linear)
    tables: list[tuple[float, ...]] = []
    lm_head = b.specs["lm_head"]
    validation = tuple(b.weights.cos.tolist())

    def watching(spec: MatmulSpec, x: Any, w: Any, bias: Any) -> Any:
        if spec == lm_head:
            tables.append(tuple(b.weights.cos.tolist()))
        return round_once_linear(spec, x, w, bias)

    b.linears["table"] = watching
    result = run_modes(b, "eager+table", rounds=4)
    row = result.get("eager+table")
    assert row is not None and row.status == "PASS", row.reason
    timed = tables[-row.judged - 1 : -1]  # the last: the kernel count, after the rounds
    assert len(set(timed)) == len(timed) and validation not in timed
    assert tuple(b.weights.cos.tolist()) == validation


def test_a_step_that_baked_in_its_rope_tables_fails_its_timed_replays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step (or a fused kernel) that read the RoPE tables once, when it was built,
    answers validation's position and no other."""
    from matprobe.token.step import DecodeStep

    rope = DecodeStep._rope
    baked: dict[int, tuple[Any, Any]] = {}

    def baked_rope(self: DecodeStep, x: Any) -> Any:
        if self.dtype == torch.float64:  # the judge's step: a kernel's cheat is not its
            return rope(self, x)
        w = self.weights
        cos, sin = baked.setdefault(id(self), (w.cos.clone(), w.sin.clone()))
        live = (w.cos.clone(), w.sin.clone())
        w.cos.copy_(cos)
        w.sin.copy_(sin)
        try:
            return rope(self, x)
        finally:
            w.cos.copy_(live[0])
            w.sin.copy_(live[1])

    b = bench(table=round_once_linear)
    monkeypatch.setattr(DecodeStep, "_rope", baked_rope)
    result = run_modes(b, "eager+table", rounds=3)
    for row in (result.baseline, result.get("eager+table")):
        assert row is not None and row.status == "FAIL", row.reason
        assert row.reason.startswith("timed replay ") and "(position " in row.reason


def token_bound(b: TokenBench) -> Any:
    """The bound ``run`` holds the baseline to."""
    return baseline_bound(b.dtype, b.config.layers, max(s.k or 0 for s in b.specs.values()))


def window_of(b: TokenBench, name: str) -> tuple[ReplayJudge, Callable[[], float]]:
    """The serving clock's window of one mode (on a GPU ``run`` times these)."""
    mode = MODES[name]
    judge = ReplayJudge(b, mode)
    return judge, b._window(mode, b.build(mode), judge)


def test_a_back_to_back_window_judges_every_replay_on_its_own_input() -> None:
    """The serving clock: each replay of a window runs on its own embedding and RoPE
    position, copied into place before it, and every replay's logits are judged
    (and the validation's input is put back afterwards); the untimed call before
    each window, which puts the mode's own work in the caches, on one of its own."""
    b = bench(table=round_once_linear)
    lm_head = b.specs["lm_head"]
    seen: list[tuple[tuple[float, ...], tuple[float, ...]]] = []

    def watching(spec: MatmulSpec, x: Any, w: Any, bias: Any) -> Any:
        if spec == lm_head:
            seen.append((tuple(x.reshape(-1).tolist()), tuple(b.weights.cos.tolist())))
        return round_once_linear(spec, x, w, bias)

    b.linears["table"] = watching
    validation = (b.weights.x0.clone(), b.weights.cos.clone())
    judge, window = window_of(b, "eager+table")
    before = len(seen)
    for _ in range(2):
        assert math.isfinite(window())
    calls = seen[before:]
    assert len(calls) == 2 * (1 + WINDOW) and len(judge.outputs) == 2 * WINDOW
    assert len({x for x, _ in calls}) == len({cos for _, cos in calls}) == len(calls)
    judged, failure = judge.verdict(token_bound(b))
    assert (judged, failure) == (2 * WINDOW, None)
    assert torch.equal(b.weights.x0, validation[0]) and torch.equal(b.weights.cos, validation[1])


def test_a_mode_that_repeats_its_answer_back_to_back_fails_its_window() -> None:
    """A kernel that serves a replay from the one before (back to back, nothing in
    between could tell it the input changed) is caught by the window's judge."""
    b = bench()
    b.linears["table"] = HonestWhileValidated(b.specs["lm_head"], honest_tokens=1)
    judge, window = window_of(b, "eager+table")
    window()
    judged, failure = judge.verdict(token_bound(b))
    assert failure is not None and failure.startswith(f"timed replay {judged} of {WINDOW}")


# ---- modes, rounds, shares -----------------------------------------------------


def test_mode_selection_puts_the_baseline_first_and_skips_table_modes_without_a_table() -> None:
    picked = select_modes(["eager+table", "compile"], device_kind="cuda", have_table=False)
    assert [m.name for m in picked.modes] == ["eager", "compile"]
    assert picked.skipped == (("eager+table", "needs a dispatch table (--table FILE)"),)
    assert any("eager added" in note for note in picked.notes)
    assert any("compile-none" in note for note in picked.notes)
    cpu = select_modes(None, device_kind="cpu", have_table=True)
    assert [m.name for m in cpu.modes] == ["eager", "eager-none", "eager+table"]
    cuda = select_modes(None, device_kind="cuda", have_table=True, pdl_problem=None)
    assert {m.name for m in cuda.modes} == set(MODES) and not cuda.notes
    for mode in MODES.values():  # every computing mode has a matmul-less twin run its way
        twin = MODES[mode.rest] if mode.rest else None
        assert twin is None or (twin.kernels == "none" and twin.compile == mode.compile)


def test_mode_names_are_checked() -> None:
    assert parse_modes(" eager, compile ,eager") == ("eager", "compile")
    with pytest.raises(MatprobeError, match="unknown mode 'eagr'; known: eager"):
        parse_modes("eagr")
    with pytest.raises(MatprobeError, match="names no mode"):
        parse_modes(" , ")


def test_rounds_are_interleaved_and_rotated() -> None:
    names = ["a", "b", "c"]
    assert [rotation(names, r) for r in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]
    ]  # fmt: skip
    log: list[str] = []
    ticks = iter(range(1000))

    def clock(call: Callable[[], Any]) -> float:
        call()
        return float(next(ticks))

    calls = {name: (lambda name=name: log.append(name)) for name in names}
    samples = interleaved_rounds(calls, 4, clock, warmup_rounds=1)  # type: ignore[arg-type]
    assert log[:3] == ["a", "b", "c"] and len(log) == 15  # one warm-up round, unrecorded
    assert samples["a"] == [5.0, 7.0, 9.0, 14.0]  # round i's sample is sample i
    assert all(len(s) == 4 for s in samples.values())


def slowed(linear: Linear, seconds: float = 2e-4) -> Linear:
    """``linear``, then a wait: a matmul share far above a loaded host's noise (the
    small model's own products are not: under two test processes on two cores the
    eager share once came out as noise, and so without a ratio)."""

    def run(spec: MatmulSpec, x: Any, w: Any, bias: Any) -> Any:
        y = linear(spec, x, w, bias)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        return y

    return run


def test_matmul_share_is_the_paired_difference_to_the_twin() -> None:
    b = bench(table=slowed(round_once_linear), torch=slowed(torch_linear))
    result = run_modes(b, "eager-none", "eager+table", rounds=5)
    eager, none = result.baseline, result.get("eager-none")
    assert none is not None and none.status == "UNCHECKED" and none.timed
    assert eager.share_samples_us == [
        a - b for a, b in zip(eager.samples_us, none.samples_us, strict=True)
    ]
    assert result.share_ratio("eager") == 1.0
    table = result.get("eager+table")
    assert table is not None and table.share_us is not None and eager.share_us is not None
    assert result.share_ratio("eager+table") == pytest.approx(table.share_us / eager.share_us)
    assert all(r.kernels is not None and r.kernels.kernels > 0 for r in result.modes)
    # leaving the matmuls out leaves out their ops: fewer of them
    assert none.kernels is not None and eager.kernels is not None
    assert none.kernels.kernels < eager.kernels.kernels


def eager_dynamo(step: Callable[[], Any], mode: str) -> Callable[[], Any]:
    """Dynamo's tracing without Inductor: the whole step must be one graph."""
    return torch.compile(step, backend="eager", fullgraph=True, dynamic=False)  # type: ignore[no-any-return]


def test_compiled_modes_trace_the_whole_step_as_one_graph() -> None:
    """Inductor on the CPU compiles C++ for ~45 s a mode: here Dynamo traces the step
    (fullgraph: a graph break is an error) and its eager backend runs it; the GPU
    test runs Inductor."""
    b = TokenBench(
        AWKWARD["small"], context=CONTEXT, dtype="bf16", device="cpu", compiler=eager_dynamo
    )
    result = run_modes(b, "compile", "compile-none", rounds=2)
    assert [(r.mode.name, r.status) for r in result.modes] == [
        ("eager", "PASS"), ("compile", "PASS"), ("compile-none", "UNCHECKED")
    ]  # fmt: skip


def test_each_compiled_mode_gets_a_code_object_of_its_own() -> None:
    b = bench()
    first, second = step_call(b.step, torch_linear), step_call(b.step, torch_linear)
    assert first.__code__ is not second.__code__  # type: ignore[attr-defined]
    assert torch.equal(first(), second())


def test_none_mode_returns_its_buffers_without_computing() -> None:
    b = bench()
    none = b.linears["none"]
    assert isinstance(none, NoMatmul)
    spec = b.specs["down"]
    x, w = torch.ones(1, spec.k or 0, dtype=torch.float16), b.weights.down[0]
    y = none(spec, x, w, None)
    assert tuple(y.shape) == (1, spec.n) and not y.any()
    assert none(spec, x, w, None) is y  # a buffer, allocated once, before any capture


# ---- prediction and report ------------------------------------------------------


def test_prediction_sums_the_weight_matmuls_per_token() -> None:
    calls = weight_calls(get_model("qwen2.5-0.5b"), context=128, dtype="f16")
    assert sorted(calls.values()) == [1, 24, 24, 24, 24]
    assert "op=matmul | batch=1 | m=1 | n=151936 | k=896 | tA=0 | tB=1 | dtype=f16" in calls
    assert not any("alpha" in key for key in calls)  # attention stays out of the share
    checks = check_predictions(
        {"baseline": 691.0, "table": 500.0}, {"eager": 976.0, "eager+table": 520.0}
    )
    assert [(c.label, c.mode, c.off) for c in checks] == [
        ("baseline", "eager", True), ("table", "eager+table", False)
    ]  # fmt: skip


def test_the_report_has_one_row_per_mode_and_says_when_predictions_miss() -> None:
    # the baseline slowed, so that its share (and its 1.000×) stands above a loaded
    # host's noise (it once came out as noise, and so without a ratio)
    b = bench(table=drop_k_tail, torch=slowed(torch_linear))
    result = run_modes(b, "eager-none", "eager+table", "compile+table", rounds=3)
    # fixed shares: a CPU's timings are too noisy to predict (a share may even be < 0)
    checks = check_predictions({"baseline": 150.0, "table": 1.0}, {"eager": 100.0})
    text = render_text(result, checks)
    lines = text.splitlines()
    assert lines[0].startswith("matprobe token on ") and "torch " in lines[0]
    assert "model small: 2 layers" in lines[1] and f"context {CONTEXT}" in lines[1]
    header = next(i for i, line in enumerate(lines) if line.startswith("mode "))
    rows = lines[header + 2 : header + 6]
    assert [row.split()[0] for row in rows] == [
        "eager",
        "eager-none",
        "eager+table",
        "compile+table",
    ]
    assert "PASS" in rows[0] and "1.000×" in rows[0] and " n=3 " in rows[0]
    assert "FAIL: " in rows[2] and "–" in rows[2]  # failed: no time, no share
    assert "ERROR: MatprobeError: no 'table-op' kernels" in rows[3]
    assert "baseline predicted" in text and "differs by more than 10%" in text
    data = json.loads(json.dumps(to_json(result, checks), allow_nan=False))
    assert [m["status"] for m in data["modes"]] == ["PASS", "UNCHECKED", "FAIL", "ERROR"]
    assert len(data["modes"][0]["samples_us"]) == 3 and data["modes"][2]["samples_us"] == []
    assert data["predictions"][0]["off_by_more_than_tolerance"] is True


# ---- the profile -----------------------------------------------------------------


def test_a_recorded_token_round_trips_through_the_profile_readers(tmp_path: Path) -> None:
    config = AWKWARD["odd"]
    b = bench(config, "bf16")
    tokens = 3
    recorded = record_token(b.step, torch_linear, tokens=tokens, device_kind="cpu")
    path = tmp_path / "token.jsonl"
    written = save_profile(
        path, recorded, b.specs, backend_of=lambda role: "cpu-blas", reason="test", weight_bytes=1
    )
    assert written == sum(1 for _ in path.open())
    loaded = load_specs(path)
    assert not loaded.warnings
    expected = Counter()
    for shape in decode_specs(config, context=CONTEXT, dtype="bf16"):
        expected[shape.spec.key()] += shape.count * tokens
    assert {s.key(): s.provenance.count for s in loaded.specs if s.provenance} == expected
    assert all(s.provenance and s.provenance.main_backend == "cpu-blas" for s in loaded.specs)
    scanned = scan(path)
    assert not scanned.problems.total
    analyze(scanned, AnalyzeOptions())  # every section computes
    # one GpuOpCompleted per part of each layer and the final two, every token, in
    # the step's order; each with its ops as InternalKernelCompleted; a backend
    # choice per weight matmul
    labels = [f"block_{i}/{part}" for i in range(config.layers) for part in LAYER_PARTS]
    assert [sample.label for sample in recorded[0]] == [*labels, *FINAL_PARTS]
    parts = len(labels) + len(FINAL_PARTS)
    assert scanned.event_counts["GpuOpCompleted"] == parts * tokens
    assert len(scanned.gpu_kernels) == parts
    assert sum(len(v) for v in scanned.internal_by_parent.values()) > parts * tokens
    assert scanned.event_counts["KernelBackendSelected"] == 4 * config.layers + 1


def test_a_profile_of_the_matmul_less_token_has_no_weight_matmuls(tmp_path: Path) -> None:
    b = bench()
    recorded = record_token(b.step, b.linears["none"], tokens=1, device_kind="cpu")
    path = tmp_path / "none.jsonl"
    save_profile(path, recorded, b.specs, backend_of=lambda role: "x", reason="none")
    ops = {spec.op for spec in load_specs(path).specs}
    assert ops == {"matmul_alpha_beta"}  # attention is torch's in every mode


# ---- the command -----------------------------------------------------------------


def token_cli(*argv: str) -> tuple[int, str]:
    """``matprobe token ARGV`` as cli.main runs a command: usage errors exit 2."""
    parser = argparse.ArgumentParser(prog="matprobe")
    register(parser.add_subparsers(dest="command"))
    out = io.StringIO()
    try:
        args = parser.parse_args(["token", *argv])
        code = int(args.func(args, out))
    except MatprobeError as exc:
        print(f"matprobe: error: {exc}", file=sys.stderr)
        code = 2
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue()


CPU_ARGS = ("--small", "--device", "cpu", "--context", "12", "--rounds", "2")


def test_the_command_prints_json_alone_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = token_cli(*CPU_ARGS, "--json", "-", "--dtype", "bf16")
    assert code == 0
    data = json.loads(out)
    assert [m["name"] for m in data["modes"]] == ["eager", "eager-none"]
    assert data["modes"][0]["status"] == "PASS" and data["dtype"] == "bf16"
    err = capsys.readouterr().err
    assert "skipped eager+table: needs a dispatch table" in err  # the report went to stderr


def test_the_command_writes_a_profile_that_analyze_reads(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    code, out = token_cli(*CPU_ARGS, "--profile", str(path), "--modes", "eager")
    assert code == 0 and "PASS" in out
    specs = load_specs(path).specs
    keys = {s.key() for s in specs}
    assert keys == {s.spec.key() for s in decode_specs(small_config(), context=12, dtype="f16")}
    # `matprobe run FILE` takes the tokens from the LM head (the widest GEMV) and
    # weighs every spec by its calls per token
    assert _infer_tokens(specs) == 4  # --profile-tokens' default


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("--modes", "eager,warp"), "unknown mode 'warp'"),
        (("--profile", "/nonexistent/dir/p.jsonl"), "no folder"),
        (("--profile", "p.jsonl", "--profile-mode", "eager+table"), "needs --table"),
        (("--context", "0"), "must be at least 1"),
        (("--small", "--model", "qwen2.5-0.5b"), "not allowed with"),
        (("--model", "gpt-5"), "unknown model"),
    ],
)
def test_usage_errors_exit_2_before_anything_runs(
    argv: tuple[str, ...], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = () if "--model" in argv else ("--small",)
    code, out = token_cli(*base, "--device", "cpu", *argv)
    assert code == 2 and not out
    assert needle in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where there is no GPU")
def test_asking_for_cuda_without_a_gpu_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert token_cli("--small", "--device", "cuda")[0] == 2
    assert "no CUDA GPU" in capsys.readouterr().err


class FakeTable:
    """What the token asks of matprobe.dispatch's table: its prediction (and the
    plugins it names: none)."""

    plugins: tuple[str, ...] = ()

    def __init__(self, baseline_us: float, table_us: float) -> None:
        self.figures = (baseline_us, table_us)
        self.calls: dict[str, int] = {}

    def predict_matmul_us(self, calls: dict[str, int]) -> tuple[float, float]:
        self.calls = dict(calls)
        return self.figures

    def lookup(self, spec: MatmulSpec) -> None:
        return None  # no layer site: the layer modes keep their own tiles


def fake_dispatch(monkeypatch: pytest.MonkeyPatch, table: FakeTable, kernel: Linear) -> None:
    import matprobe.dispatch.layer_tiles as tiles  # the real one: it reads the fake table

    monkeypatch.setitem(sys.modules, "matprobe.dispatch.layer_tiles", tiles)
    module = types.ModuleType("matprobe.dispatch")
    module.load_table = lambda path: table  # type: ignore[attr-defined]
    module.table_linear = lambda t, device: kernel  # type: ignore[attr-defined]
    module.custom_op_linear = lambda t, device: kernel  # type: ignore[attr-defined]
    module.unjudged_entries = lambda t, store: []  # type: ignore[attr-defined]  # all judged
    monkeypatch.setitem(sys.modules, "matprobe.dispatch", module)


def test_a_table_runs_beside_the_baseline_with_its_prediction(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    table = FakeTable(baseline_us=1e6, table_us=5e5)
    fake_dispatch(monkeypatch, table, round_once_linear)
    profile = tmp_path / "t.jsonl"
    code, out = token_cli(
        *CPU_ARGS, "--table", "t.json", "--profile", str(profile), "--profile-mode", "eager+table"
    )
    assert code == 0
    assert "eager+table" in out and "FAIL" not in out
    assert table.calls == weight_calls(small_config(), context=12, dtype="f16")
    assert "baseline predicted 1000000.0 µs" in out and "table    predicted 500000.0 µs" in out
    assert {t.backend for s in load_specs(profile).specs if s.provenance
            for t in s.provenance.backends} == {"matprobe-table", "cpu-blas"}  # fmt: skip


def test_a_failing_table_mode_exits_1_only_when_strict(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_dispatch(monkeypatch, FakeTable(1.0, 1.0), drop_k_tail)
    code, out = token_cli(*CPU_ARGS, "--table", "t.json", "--modes", "eager,eager+table")
    assert code == 0 and "FAIL" in out
    code, _ = token_cli(*CPU_ARGS, "--table", "t.json", "--modes", "eager+table", "--strict")
    assert code == 1
    assert "eager+table FAIL" in capsys.readouterr().err


def test_a_table_without_every_weight_spec_runs_without_a_prediction(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class PartialTable(FakeTable):
        def predict_matmul_us(self, calls: dict[str, float]) -> tuple[float, float]:
            raise MatprobeError("no entry for op=matmul | …")

    fake_dispatch(monkeypatch, PartialTable(1.0, 1.0), round_once_linear)
    code, out = token_cli(*CPU_ARGS, "--table", "t.json")
    assert code == 0 and "eager+table" in out and "prediction" not in out
    assert "warning: no prediction: no entry for" in capsys.readouterr().err


def test_a_baseline_that_fails_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def wrong_below_float64(spec: MatmulSpec, x: Any, w: Any, bias: Any) -> Any:
        y = torch_linear(spec, x, w, bias)
        return y if x.dtype == torch.float64 else torch.zeros_like(y)

    monkeypatch.setattr("matprobe.token.bench.torch_linear", wrong_below_float64)
    code, _ = token_cli(*CPU_ARGS, "--modes", "eager")
    assert code == 1
    assert "the eager baseline FAIL" in capsys.readouterr().err


# ---- on a GPU ----------------------------------------------------------------------


@on_a_card
def test_every_mode_on_the_gpu_as_one_graph_each() -> None:
    """Inductor, CUDA graphs, CUPTI kernel counts: the real thing, on a small model."""
    config = small_config(layers=4, hidden=256, intermediate=512, heads=8, kv_heads=2,
                          head_dim=32, vocab=1000)  # fmt: skip
    b = TokenBench(
        config, context=64, dtype="f16", device="cuda", linears={"table": round_once_linear}
    )
    names = [name for name in MODES if name != "compile+table"]
    result = b.run(
        select_modes(names, device_kind="cuda", have_table=True),
        rounds=5,
        read_ceiling=lambda: (3000.0, ""),
    )
    for row in result.modes:
        assert row.status in ("PASS", "UNCHECKED"), (row.mode.name, row.reason)
        assert row.timed and row.kernels is not None and row.kernels.kernels > 0
        # two clocks: back to back (the headline) and one replay after a sync
        assert len(row.samples_us) == len(row.latency_samples_us) == 5
        if row.mode.validated:  # every timed replay judged: 5 rounds and a warm-up each
            assert row.judged == (5 + 1) * (1 + WINDOW), (row.mode.name, row.judged)
        assert result.floor.percent(row.median_us) is not None
    eager, compiled = result.baseline, result.get("compile")
    assert compiled is not None and compiled.kernels is not None and eager.kernels is not None
    assert compiled.kernels.kernels < eager.kernels.kernels  # Inductor fuses


@on_a_card
def test_a_gpu_profile_gives_every_part_its_kernels(tmp_path: Path) -> None:
    """CUPTI's kernels are tied to the ranges of the parts that launched them."""
    config = small_config(layers=3)
    b = TokenBench(config, context=32, dtype="f16", device="cuda")
    recorded = record_token(b.step, torch_linear, tokens=2, device_kind="cuda")
    by_part = {sample.label: sample for sample in recorded[0]}
    for role in (*WEIGHT_SITES, "attn_qk", "attn_pv", "softmax", "attn_norm"):
        label = role if role == "lm_head" else f"block_1/{role}"
        assert by_part[label].kernels, label  # each launched at least one kernel
        assert by_part[label].duration_us > 0
    path = tmp_path / "gpu.jsonl"
    save_profile(path, recorded, b.specs, backend_of=lambda role: "cublas", reason="gpu")
    expected = Counter()
    for shape in decode_specs(config, context=32, dtype="f16"):
        expected[shape.spec.key()] += shape.count * 2
    assert {s.key(): s.provenance.count for s in load_specs(path).specs if s.provenance} == expected


def test_kernels_launched_outside_aten_ops_are_given_to_their_range() -> None:
    """The dispatch table's Triton kernels are in no aten op's list of kernels: a
    range's kernels are those that start inside its (synchronized) CPU span."""
    from types import SimpleNamespace

    from torch.profiler import DeviceType

    from matprobe.token.profile import RangeSample, kernels_by_span

    def span(start: float, end: float) -> Any:
        return SimpleNamespace(start=start, end=end, elapsed_us=lambda: end - start)

    def event(name: str, start: float, end: float, device: Any = DeviceType.CUDA) -> Any:
        return SimpleNamespace(name=name, device_type=device, time_range=span(start, end))

    ranges = [
        event("token:block_0/norm", 0.0, 10.0, DeviceType.CPU),
        event("token:block_0/qkv", 10.0, 20.0, DeviceType.CPU),
        event("token:lm_head", 20.0, 130.0, DeviceType.CPU),
    ]
    samples = [RangeSample(r.name[6:], r.time_range.start, []) for r in ranges]
    timeline = [
        event("gemv_nt_kernel", 12.0, 15.0),
        event("rms", 2.0, 4.0),
        event("token:block_0/qkv", 11.0, 16.0),  # the range drawn on the device: not a kernel
        event("Memset (Device)", 4.0, 4.5),
        event("gemv_nt_kernel", 21.0, 109.0),
    ]
    kernels_by_span(timeline, ranges, samples)
    assert samples[0].kernels == [("rms", 2.0), ("Memset (Device)", 0.5)]
    assert samples[1].kernels == [("gemv_nt_kernel", 3.0)]
    assert samples[2].kernels == [("gemv_nt_kernel", 88.0)]
