"""``triton.decode_attention``: a decode layer's RoPE, KV-cache append and
grouped-query attention in one kernel, checked against float64 on awkward
shapes (a group of 7 query heads as Qwen2.5's, a head_dim that is not a power of
two, contexts that end mid-tile, several chunks merged in one launch), and the
``layer`` token mode built on it, whose KV cache is judged as well as its
logits (Triton interpreter)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch", reason="the kernel's launcher needs torch")

from conftest import interpreting  # noqa: E402
from matprobe.token.bench import TokenBench  # noqa: E402
from matprobe.token.modes import select_modes  # noqa: E402
from matprobe.token.weights import rope_tables, small_config  # noqa: E402


def where_it_runs() -> list[object]:
    """The CPU in Triton's interpreter (fp32 products), or a CUDA GPU (tensor-core
    products: ``pytest -m gpu`` in a process of its own)."""
    if interpreting():
        return ["cpu"]
    if torch.cuda.is_available():
        return [pytest.param("cuda", marks=pytest.mark.gpu)]
    return [pytest.param("cpu", marks=pytest.mark.skip(reason="needs TRITON_INTERPRET=1 or a GPU"))]


DEVICES = where_it_runs()
needs_interpreter = pytest.mark.skipif(
    not interpreting(), reason="the token's kernels run here in the Triton interpreter"
)


def reference(qkv, k_cache, v_cache, cos, sin, heads, pos, scale):  # type: ignore[no-untyped-def]
    """float64: (the heads' outputs [1, heads·D], the new roped key, the new value)."""
    kv_heads, _, d = k_cache.shape
    q_width, kv_width = heads * d, kv_heads * d
    row = qkv[0].double()
    q, k, v = row[:q_width], row[q_width : q_width + kv_width], row[q_width + kv_width :]

    def rope(x):  # type: ignore[no-untyped-def]
        half = d // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos.double() + rotated * sin.double()

    q, k, v = rope(q.view(heads, d)), rope(k.view(kv_heads, d)), v.view(kv_heads, d)
    keys, values = k_cache.double().clone(), v_cache.double().clone()
    keys[:, pos], values[:, pos] = k, v
    grouped = q.view(kv_heads, heads // kv_heads, d)
    probs = torch.softmax(torch.einsum("hgd,hld->hgl", grouped, keys) * scale, dim=-1)
    out = torch.einsum("hgl,hld->hgd", probs, values).reshape(1, heads * d)
    return out, k, v


def problem(heads, kv_heads, d, context, dtype, device="cpu", seed=0):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(1, (heads + 2 * kv_heads) * d, generator=g).to(device, dtype)
    k_cache = torch.randn(kv_heads, context, d, generator=g).to(device, dtype)
    v_cache = torch.randn(kv_heads, context, d, generator=g).to(device, dtype)
    cos, sin = (t.to(device, dtype) for t in rope_tables(d, 1234))
    return qkv, k_cache, v_cache, cos, sin


#: (heads, kv_heads, head_dim, context, chunk): Qwen2.5's group of 7 in two chunks
#: by default and in three (300 ends mid-tile), in 18 (merged 16 at a time: a
#: ragged last step), head_dim 24 (padded to 32), MHA (group 1), a context shorter
#: than a tile.
SHAPES = [
    (14, 2, 64, 130, None),
    (14, 2, 64, 300, 128),
    (14, 2, 64, 2200, 128),
    (6, 3, 24, 70, 128),
    (8, 8, 16, 200, 128),
    (4, 2, 16, 5, None),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "h{}kv{}d{}L{}c{}".format(*s))
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("device", DEVICES)
def test_it_attends_appends_and_leaves_the_rest_of_the_cache(shape, dtype, device) -> None:  # type: ignore[no-untyped-def]
    from matprobe.kernels.triton._decode_attention import decode_attention

    heads, kv_heads, d, context, chunk = shape
    torch_dtype = torch.float16 if dtype == "f16" else torch.bfloat16
    qkv, k_cache, v_cache, cos, sin = problem(heads, kv_heads, d, context, torch_dtype, device)
    scale, pos = 1 / math.sqrt(d), context - 1
    want, k_new, v_new = reference(qkv, k_cache, v_cache, cos, sin, heads, pos, scale)
    keys, values = k_cache.clone(), v_cache.clone()
    got = decode_attention(qkv, keys, values, cos, sin, heads=heads, pos=pos, scale=scale,
                           chunk=chunk)  # fmt: skip
    u = 2.0**-11 if dtype == "f16" else 2.0**-8
    # roped q and p rounded once (on a GPU), the new key and the output once
    assert (got.double().cpu() - want.cpu()).abs().max() <= 8 * u * want.abs().max()
    assert (keys[:, pos].double() - k_new).abs().max() <= 2 * u * k_new.abs().max()
    assert torch.equal(values[:, pos], v_new.to(torch_dtype))
    assert torch.equal(keys[:, :pos], k_cache[:, :pos])
    assert torch.equal(values[:, :pos], v_cache[:, :pos])
    # the arrival counters reset themselves: a second launch merges again
    again = decode_attention(qkv, keys, values, cos, sin, heads=heads, pos=pos, scale=scale,
                             chunk=chunk)  # fmt: skip
    assert torch.equal(again, got)


@pytest.mark.parametrize("device", DEVICES)
def test_the_new_position_is_attended_from_the_new_key_not_the_stale_slot(device: str) -> None:
    """The slot at ``pos`` holds the previous token's key until the append: a kernel
    that read it back from the cache before appending would attend a stale key."""
    from matprobe.kernels.triton._decode_attention import decode_attention

    qkv, k_cache, v_cache, cos, sin = problem(4, 2, 16, 40, torch.float16, device, seed=3)
    pos = 17  # mid-cache: positions after it are attended too
    k_cache[:, pos] = 100.0  # a stale key that would dominate the softmax
    want, _, _ = reference(qkv, k_cache, v_cache, cos, sin, 4, pos, 0.25)
    got = decode_attention(qkv, k_cache, v_cache, cos, sin, heads=4, pos=pos, scale=0.25)
    assert (got.double() - want).abs().max().item() <= 8 * 2.0**-11 * want.abs().max().item()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"heads": 5}, "do not group"),
        ({"pos": 40}, "outside the cache"),
        ({"chunk": 96}, "multiple of 128"),
    ],
)
@needs_interpreter
def test_bad_input_is_refused_before_launch(change, message) -> None:  # type: ignore[no-untyped-def]
    from matprobe.kernels.triton._decode_attention import decode_attention

    qkv, k_cache, v_cache, cos, sin = problem(4, 2, 16, 40, torch.float16)
    args = {"heads": 4, "pos": 39, "scale": 0.25, "chunk": None} | change
    with pytest.raises(ValueError, match=message):
        decode_attention(qkv, k_cache, v_cache, cos, sin, **args)


LAYER = small_config(layers=1, hidden=64, intermediate=96, heads=6, kv_heads=2, head_dim=16,
                     vocab=50)  # fmt: skip


def layer_result(dtype: str, **bench_args):  # type: ignore[no-untyped-def]
    pytest.importorskip("triton")
    b = TokenBench(LAYER, context=70, dtype=dtype, device="cpu", trials=1, **bench_args)
    selection = select_modes(["layer"], device_kind="cpu", have_table=False, dtype=dtype)
    return b, b.run(selection, rounds=1)


@needs_interpreter
@pytest.mark.parametrize("dtype", ["f16", "bf16", "q8_0"])
def test_the_layer_mode_passes_with_its_cache_judged(dtype: str) -> None:
    _, result = layer_result(dtype)
    row = result.get("layer")
    assert row is not None and row.status == "PASS", row and row.reason


@needs_interpreter
def test_an_attention_that_never_appends_fails_the_layer_mode(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Right logits this token, the next one wrong: the cache check fails it."""
    from matprobe.kernels.triton import _decode_attention as module

    honest = module.decode_attention

    def forgetful(qkv, k_cache, v_cache, *args, **kwargs):  # type: ignore[no-untyped-def]
        return honest(qkv, k_cache.clone(), v_cache.clone(), *args, **kwargs)

    monkeypatch.setattr(module, "decode_attention", forgetful)
    _, result = layer_result("f16")
    row = result.get("layer")
    assert row is not None and row.status == "FAIL"
    assert "new key in the KV cache" in row.reason


@pytest.mark.parametrize("context", [1, 64, 127, 128, 1024, 4097, 32768])
@pytest.mark.parametrize("kv_heads", [1, 2, 8])
def test_the_default_chunk_is_whole_tiles_and_few_chunks(context: int, kv_heads: int) -> None:
    from matprobe.kernels.triton._decode_attention import (
        BLOCK_L,
        MAX_CHUNKS,
        MIN_TILES,
        default_chunk,
    )

    chunk = default_chunk(context, kv_heads)
    assert chunk % BLOCK_L == 0 and chunk >= MIN_TILES * BLOCK_L
    assert -(-context // chunk) <= MAX_CHUNKS


def test_launching_early_is_skipped_with_the_reason_off_a_hopper_gpu() -> None:
    """``layer+pdl`` never reaches Triton's interpreter (which knows neither the
    launch option nor the griddepcontrol instructions) nor a card without them."""
    from matprobe.token.modes import NO_PDL, pdl_problem

    assert pdl_problem("cpu") == NO_PDL
    chosen = select_modes(["layer", "layer+pdl"], device_kind="cpu", have_table=False)
    assert [m.name for m in chosen.modes] == ["eager", "layer"]
    assert dict(chosen.skipped)["layer+pdl"] == NO_PDL


@needs_interpreter
def test_an_attention_appending_only_while_validated_fails_when_timed(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Honest while validated, then attending the new key from registers and leaving
    the cache stale: every timed token is right, the next one would not be. The
    slot each timed replay appends is judged, so the mode fails there."""
    from matprobe.kernels.triton import _decode_attention as module

    honest = module.decode_attention
    validated = {"modes": 0}  # the eager baseline's, then the layer mode's
    from matprobe.token import bench

    judge_cache = bench.cache_failure

    def after_validation(owner, tolerance):  # type: ignore[no-untyped-def]
        validated["modes"] += 1
        return judge_cache(owner, tolerance)

    def lazy(qkv, k_cache, v_cache, *args, **kwargs):  # type: ignore[no-untyped-def]
        if validated["modes"] >= 2:
            k_cache, v_cache = k_cache.clone(), v_cache.clone()
        return honest(qkv, k_cache, v_cache, *args, **kwargs)

    monkeypatch.setattr(bench, "cache_failure", after_validation)
    monkeypatch.setattr(module, "decode_attention", lazy)
    _, result = layer_result("f16")
    row = result.get("layer")
    assert row is not None and row.status == "FAIL", row and row.reason
    assert row.reason.startswith("timed replay 1 ") and "new key in the KV cache" in row.reason


def test_the_kernel_compiles_for_a_card() -> None:
    """Triton's interpreter runs the kernel as Python, which lets a variable change
    its shape inside an ``if``; the compiler does not (a merge over the group's
    real rows, reusing the running max's name, passed every interpreter test and
    failed on the first card). So the token's configurations — one chunk, eight,
    sixteen of two tiles, with and without early launch, Qwen's group of 7 and
    Llama's of 4 — are compiled for an H100 here, no GPU needed
    (``benchmarks/ptx_identity.py``, in a process without ``TRITON_INTERPRET``)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    triton = pytest.importorskip("triton", reason="compiling needs triton")
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not ptxas.exists():
        pytest.skip("triton's NVIDIA backend has no ptxas here")
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "ptx_identity.py"), "--only",
         "decode_attention_kernel", "--jobs", "1", "--out", os.devnull],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "8 PTX hashes written" in done.stderr
