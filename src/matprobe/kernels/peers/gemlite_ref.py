"""``gemlite.a16w8``: gemlite's Triton GEMV on our Q8_0 weights — a peer, not ours.

`gemlite <https://github.com/mobiusml/gemlite>`_ (Mobius Labs, pure Triton) runs
fp16 activations against 8-bit weights with a scale per group of weights along
K ("A16W8" / ``A16Wn`` with ``W_nbits=8``). Q8_0 is that format at group size 32,
symmetric: ``w = d·q`` with an int8 q, no zero point. This family hands our split
layout to gemlite 0.6's own entry point (``gemlite.core.forward_functional``, what
a ``GemLiteLinearTriton`` layer's forward calls), for m = 1: its GEMV_SPLITK kernel
(SPLIT_K = 1 in every config it autotunes over; BLOCK_SIZE_K pruned to the group,
32) dequantizes ``q·d`` in fp16 — one rounding a weight, as the baseline's — and
accumulates in fp32.

**The packing.** A ``GemLiteLinearTriton(W_nbits=8, group_size=32,
in_features=k, out_features=n)`` is packed once, at build time, with
``pack(W_q=int8 [n, k], scales=fp16 [n, k/32], zeros=None)`` — gemlite's own
code deciding the layout and its meta arguments: int8 weights are not bit-packed
(``elements_per_sample = 1``), stored as ``W_q.t()`` — ``[k, n]``, a view of
our quants as they are — with the scales ``[k/32, n]`` and "symmetric, no shift"
dequantization (``W_group_mode = 2``: ``w = q·d``; ``zeros=None`` is Q8_0's zero
point of 0 without the subtraction a ``zeros=0`` would add). The weights
themselves are inputs of every call here (the harness refills them in place
between calls: a pack cached from one call's weights would compute with stale
ones), so each call passes gemlite views of that call's tensors
(:func:`gemlite_layout`); the grid's ``sc`` picks what happens to the scales:

* ``sc=0`` — a transposed *view* of our ``[n, k/32]`` scales (gemlite reads
  them through their strides, one fp16 every k/32 along n). gemlite loads the
  scales of a whole BLOCK_N without a mask, so a ragged last block would read
  up to BLOCK_N − 1 rows' worth (× k/32) past our tensor: refused unless n is
  a multiple of :data:`MAX_BLOCK_N`;
* ``sc=1`` — copied each call into a ``[k/32, n]`` buffer allocated at build,
  the layout ``pack`` makes (one more small kernel in this family's time),
  padded so that the same unmasked loads stay inside it.

``forward_functional`` returns a fresh tensor (and adds the bias after the
matmul, in fp16: a second rounding the tolerance allows an addend); ``run``
copies it into ``out`` — one more small kernel, counted in this family's time,
as ``torch.compile``'s copy is.

CUDA only: gemlite queries the GPU when it is imported (and needs triton ≥ 3.6).
Refused, with the reason, where gemlite is not installed (``pip install
'matprobe[gemlite]'``), on any other device, under ``TRITON_INTERPRET=1``, for a
gemlite other than 0.6 (the meta-argument list is that version's) or an older
triton — all without importing it. The first call (compile, gemlite's autotune)
is made at build time, outside any graph capture.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from matprobe.errors import MatprobeError
from matprobe.kernels.triton import _common as common
from matprobe.measure.variants import KernelFn, VariantFamily, variant_family
from matprobe.spec import Q8_0_BLOCK, MatmulSpec

if TYPE_CHECKING:
    from matprobe.measure.device import DeviceInfo
    from matprobe.measure.inputs import MatmulInputs

NAME = "gemlite.a16w8"

#: The gemlite release whose entry point and meta arguments this family calls.
GEMLITE_SERIES = (0, 6)
#: gemlite 0.6 requires triton >= 3.6 (its setup.py).
MIN_TRITON = (3, 6)

#: What ``GemLiteLinearTriton.pack`` must choose for Q8_0: int8 weights unpacked
#: (one a sample), "symmetric, no shift" groups (w = q·d), no channel-wise scale.
#: At k = 32 a group is a whole row and gemlite scales per channel after the sum
#: instead (W_group_mode 0, channel_scale_mode 1): the same q·d.
EXPECTED_MODES = {(1, 2, 0), (1, 0, 1)}  # (elements_per_sample, W_group_mode, channel_scale_mode)

#: The largest BLOCK_SIZE_N gemlite 0.6's GEMV configs use ("max" autotune; "fast": 16).
MAX_BLOCK_N = 64


def _version(distribution: str) -> tuple[int, ...] | None:
    """The installed version of ``distribution`` as integers (``"3.6.0+git"`` →
    (3, 6, 0)), None when it is not installed — read from its metadata, not imported."""
    from importlib import metadata

    try:
        text = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
    parts = []
    for piece in text.split("."):
        leading = re.match(r"\d+", piece)
        if leading is None:
            break
        parts.append(int(leading.group()))
    return tuple(parts)


def _supports(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> str | None:
    if device.kind != "cuda":
        return "gemlite runs on CUDA GPUs only (it queries the GPU when imported)"
    if spec.batch != 1:
        return "one weight matrix a call (batch=1), as gemlite's linear layer is"
    if spec.m != 1:
        return "needs m=1 (decode: gemlite's GEMV)"
    if spec.tA:
        return "needs x stored [m, k] (tA=0)"
    if params.get("sc") not in (0, 1) or isinstance(params.get("sc"), bool):
        return f"sc={params.get('sc')!r}: 0 (scales as a view) or 1 (copied per call)"
    if params["sc"] == 0 and (spec.n_total or 0) % MAX_BLOCK_N:
        return (
            f"sc=0 with n={spec.n_total}: gemlite loads a block's scales unmasked, and through "
            f"a view a ragged last block reads past them (n a multiple of {MAX_BLOCK_N}, or sc=1)"
        )
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "TRITON_INTERPRET=1 is set: gemlite's kernels would run in the interpreter; unset it"
    gemlite_version = _version("gemlite")
    if gemlite_version is not None and gemlite_version[:2] != GEMLITE_SERIES:
        found = ".".join(map(str, gemlite_version))
        return f"written against gemlite 0.6 (its forward's meta arguments), found {found}"
    triton_version = _version("triton")
    if triton_version is not None and triton_version[:2] < MIN_TRITON:
        found = ".".join(map(str, triton_version))
        return f"gemlite 0.6 needs triton >= 3.6, found {found}"
    return None


def gemlite_layout(quants: Any, scales: Any) -> tuple[Any, Any]:
    """gemlite's operands for one Q8_0 matrix, as views (no copy): ``W_q`` ``[k, n]``
    int8 — ``pack`` stores int8 weights as ``W_q.t()`` — and the scales ``[k/32, n]``
    (``pack`` makes them contiguous; grid point ``sc=1`` copies them so). gemlite reads
    ``w[i, j] = W_q[i, j]·scales[i // 32, j]`` (``W_group_mode`` 2)."""
    return quants.transpose(-1, -2), scales.transpose(-1, -2)


@variant_family(
    name=NAME,
    ops=("matmul", "matmul_bias_add"),
    devices=("cuda",),
    supports=_supports,
    grid={"sc": (0, 1)},
    dtypes=("q8_0",),
    peer=True,
    requires=("torch", "triton", "gemlite"),
    # The operand checks it shares with the Triton families live in their folder,
    # outside this module's package: named, so that an edit there re-measures it.
    sources=(common,),
)
def GEMLITE_A16W8(  # noqa: N802 - the family is a module constant
    spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo
) -> KernelFn:
    """gemlite 0.6's A16W8 GEMV (group size 32, symmetric) on the Q8_0 split layout."""
    import torch
    from gemlite.core import (  # type: ignore[import-not-found, import-untyped, unused-ignore]
        DType,
        GemLiteLinearTriton,
        forward_functional,
    )

    n, k = spec.n_total or 0, spec.k or 0
    groups = k // Q8_0_BLOCK
    where = common.target(device)
    has_bias = spec.has_bias
    copy_scales = bool(params["sc"])
    with torch.cuda.device(where):
        layer = GemLiteLinearTriton(
            W_nbits=8, group_size=Q8_0_BLOCK, in_features=k, out_features=n,
            input_dtype=DType.FP16, output_dtype=DType.FP16,
        )  # fmt: skip
        layer.pack(
            torch.zeros((n, k), dtype=torch.int8, device=where),
            torch.ones((n, groups), dtype=torch.float16, device=where),
            zeros=None,
        )
    modes = (layer.elements_per_sample, layer.W_group_mode, layer.channel_scale_mode)
    if modes not in EXPECTED_MODES:
        raise MatprobeError(
            f"{NAME}: gemlite packed Q8_0 as (elements_per_sample, W_group_mode, "
            f"channel_scale_mode) = {modes}, not unpacked int8 with symmetric group scales"
        )
    meta_args = layer.get_meta_args()
    _, _, zeros, meta_scale = layer.get_tensor_args()
    buffer = None
    if copy_scales:  # padded: gemlite's unmasked scale loads of a ragged last block stay inside
        padded = torch.zeros(groups * n + MAX_BLOCK_N, dtype=torch.float16, device=where)
        buffer = padded[: groups * n].view(groups, n)

    def matmul(x: Any, quants: Any, scales: Any, bias: Any) -> Any:
        w_q, d = gemlite_layout(quants, scales)
        if buffer is not None:
            buffer.copy_(d)
            d = buffer
        return forward_functional(x.reshape(1, k), bias, [w_q, d, zeros, meta_scale], meta_args)

    # Compile and autotune now (the first call), never inside a graph capture.
    with torch.cuda.device(where):
        matmul(
            torch.zeros((1, 1, k), dtype=torch.float16, device=where),
            torch.zeros((n, k), dtype=torch.int8, device=where),
            torch.ones((n, groups), dtype=torch.float16, device=where),
            torch.zeros(n, dtype=torch.float16, device=where) if has_bias else None,
        )
        torch.cuda.synchronize(where)

    def run(inputs: MatmulInputs, out: Any) -> None:
        x, q, _, bias = common.row_gemv_operands(
            NAME, inputs, out, batch=1, n=n, k=k, dtype=torch.float16, where=where,
            has_c0=False, has_bias=has_bias, weight_dtype=torch.int8,
        )  # fmt: skip
        d: Any = inputs.scales
        common.check_tensor(NAME, d, "scales", (1, n, groups), torch.float16, where)
        if q.stride(2) != 1 or d.stride(2) != 1:
            raise ValueError(f"{NAME}: quants and scales must be contiguous along K")
        y = matmul(x, q[0], d[0], bias if has_bias else None)
        out[0].copy_(y)

    return run


FAMILIES: tuple[VariantFamily, ...] = (GEMLITE_A16W8,)
