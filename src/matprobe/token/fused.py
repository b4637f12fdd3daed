"""The decode step's matmuls as ``triton.gemv_decode`` kernels: plain (one kernel
per weight matmul, as a :data:`~matprobe.token.linear.LinearFn`) and fused (the
RMSNorm prologue, SwiGLU and residual epilogues folded in, for
:meth:`~matprobe.token.step.DecodeStep.forward_fused`).

Every weight is read as rows ``[n, k]``: the fp16 QKV weight, which the step
stores ``[k, n]`` as the profiled engine does, is transposed once here (a copy
made before any timing, the layout a fused engine keeps). Q8_0 weights are
already rows (quants and block scales).

``as_op=True`` calls the kernel through ``torch.ops.matprobe.decode_gemv``
(``torch.library``), so a ``torch.compile``d step keeps it in one graph and
Inductor fuses the remaining elementwise work (RoPE, the KV append, softmax)
around it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import torch

from matprobe.errors import MatprobeError
from matprobe.kernels.triton.decode import DecodeTile, decode_gemv
from matprobe.spec import MatmulSpec
from matprobe.token.linear import LinearFn
from matprobe.token.step import RMS_EPS, AttentionFn
from matprobe.token.weights import Matrix, Q8Matrix, TokenWeights

#: K in tiles of 1024 (one tile covers hidden = 896; down's 4864 is five), four
#: warps — the shape of the winning GEMVs on an H100 (BENCHMARKS.md).
TILE_K = 1024
WARPS = 4
#: Below this many outputs one row a program wins (down, o_proj, QKV on an H100:
#: triton.gemv_decode/bn1 in the quantized profile's run, BENCHMARKS.md); above it
#: (gate/up, the LM head) 4 Q8_0 rows or 2 fp16 rows a program do.
WIDE = 2048
#: A model this narrow cannot fill a GPU either way: fewer, fuller programs (4 rows).
NARROW = 264


#: Tiles measured in a whole `layer+pdl` token on an H100, by (outputs, k,
#: quantized): Qwen2.5-0.5B's sites (benchmarks/layer_tiles.py, BENCHMARKS.md).
#: With the rule below its fp16 token took 540 µs, with these 524.5; the same
#: choices made a rule slowed Llama-3.2-1B's (919 → 965 µs), and the per-site
#: harness winners fed back as a table gave 538.5 — so they stay with the shapes
#: they were measured on. Q8_0's down: eight warps, 438 → 427 µs.
MEASURED_TILES = {
    (1152, 896, False): DecodeTile(4, 512, 4),  # QKV
    (896, 896, False): DecodeTile(2, 1024, 4),  # o_proj
    (4864, 896, False): DecodeTile(1, 512, 4),  # gate/up (outputs of each)
    (896, 4864, False): DecodeTile(1, 1024, 8),  # down
    (151936, 896, False): DecodeTile(4, 512, 4),  # LM head
    (896, 4864, True): DecodeTile(1, 1024, 8),  # down, Q8_0
}


#: Where another card's whole `layer+pdl` token chose otherwise, by a word of its
#: name (``torch.cuda.get_device_name``). On an H200 (twenty-first session,
#: benchmarks/layer_tiles.py, BENCHMARKS.md): the LM head with two warps — fp16
#: 459.3 → 449.0 µs, Q8_0 399.9 → 394.5 — and Q8_0's down with four, not the
#: H100's eight (with the LM head's: 381.6); Llama-3.2-1B's LM head did not move.
#: Twenty-eighth session (benchmarks/layer_tiles_s28.py): fp16 QKV and gate/up in
#: K tiles of 1024, so with PDL their whole 896-long rows are read before the wait
#: — 445.4/448.4 → 426.4/426.5 µs together, each alone −2 and −5 µs.
MEASURED_ON: dict[str, dict[tuple[int, int, bool], DecodeTile]] = {
    "H200": {
        (1152, 896, False): DecodeTile(4, 1024, 4),  # QKV
        (4864, 896, False): DecodeTile(2, 1024, 4),  # gate/up
        (151936, 896, False): DecodeTile(4, 512, 2),  # LM head
        (151936, 896, True): DecodeTile(4, 1024, 2),  # LM head, Q8_0
        (896, 4864, True): DecodeTile(1, 1024, 4),  # down, Q8_0
    },
}


def default_tile(n: int, k: int, *, quantized: bool, card: str = "") -> DecodeTile:
    """The tile for ``n`` outputs of ``k``-long rows, K tiles no wider than k needs
    (a shape measured in a whole token: :data:`MEASURED_TILES`, or on ``card``:
    :data:`MEASURED_ON`)."""
    for word, tiles in MEASURED_ON.items():
        if word in card and (on_card := tiles.get((n, k, quantized))) is not None:
            return on_card
    if (measured := MEASURED_TILES.get((n, k, quantized))) is not None:
        return measured
    if n < NARROW:
        bn = 4
    elif n < WIDE:
        bn = 1
    else:
        bn = 4 if quantized else 2
    bk = min(TILE_K, max(32, 1 << (k - 1).bit_length()))
    return DecodeTile(bn, bk, WARPS)


def _card_of(w: Matrix) -> str:
    """The name of the card ``w`` lives on ("" off a CUDA card)."""
    tensor = w.quants if isinstance(w, Q8Matrix) else w
    return torch.cuda.get_device_name(tensor.device) if tensor.is_cuda else ""


def _as_rows(w: Matrix, stored_kn: bool) -> Matrix:
    return w.T.contiguous() if stored_kn and isinstance(w, torch.Tensor) else w


class DecodeKernels:
    """The step's weights as rows and the kernel calls over them."""

    def __init__(
        self,
        weights: TokenWeights,
        specs: Mapping[str, MatmulSpec],
        *,
        as_op: bool = False,
        tiles: Mapping[str, DecodeTile] | None = None,
        pdl: bool = False,
    ) -> None:
        self.weights = weights
        self.specs = dict(specs)
        self.as_op = as_op
        # every kernel launched with programmatic dependent launch (eager only)
        self.pdl = pdl and not as_op
        stored: dict[str, list[Matrix]] = {
            "qkv": weights.qkv,
            "o_proj": weights.o_proj,
            "gate_up": weights.gate_up,
            "down": weights.down,
            "lm_head": [weights.lm_head],
        }
        self.rows = {
            site: [_as_rows(w, not self.specs[site].tB) for w in matrices]
            for site, matrices in stored.items()
        }
        # The plain LinearFn is handed the step's own weights: find their rows.
        self._rows_of = {
            id(w): rows
            for site, matrices in stored.items()
            for w, rows in zip(matrices, self.rows[site], strict=True)
        }
        card = _card_of(weights.lm_head)
        self.tiles = {
            site: default_tile(
                self._outputs(site),
                self.specs[site].k or 0,
                quantized=self.specs[site].dtype == "q8_0",
                card=card,
            )
            for site in self.rows
        }
        self.tiles.update(tiles or {})
        if as_op:
            define_op()

    def _outputs(self, site: str) -> int:
        n = self.specs[site].n_total or 0
        return n // 2 if site == "gate_up" else n

    def _gemv(
        self,
        site: str,
        x: torch.Tensor,
        w: Matrix,
        *,
        gain: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        c0: torch.Tensor | None = None,
        swiglu: bool = False,
    ) -> torch.Tensor:
        tile = self.tiles[site]
        q, scales = (w.quants, w.scales) if isinstance(w, Q8Matrix) else (w, None)
        if self.as_op:
            y: torch.Tensor = torch.ops.matprobe.decode_gemv(
                x, q, scales, gain, bias, c0, swiglu, tile.bn, tile.bk, tile.warps, RMS_EPS
            )
            return y
        return decode_gemv(
            x, q, tile=tile, scales=scales, gain=gain, eps=RMS_EPS, bias=bias, c0=c0,
            swiglu=swiglu, pdl=self.pdl,
        )  # fmt: skip

    def _layer_rows(self, site: str, layer: int | None) -> Matrix:
        return self.rows[site][0 if layer is None else layer]

    # ---- FusedOps (DecodeStep.forward_fused) ----------------------------------------

    def norm_linear(
        self,
        site: str,
        layer: int | None,
        h: torch.Tensor,
        gain: torch.Tensor,
        bias: torch.Tensor | None,
    ) -> torch.Tensor:
        return self._gemv(site, h, self._layer_rows(site, layer), gain=gain, bias=bias)

    def norm_swiglu(self, layer: int, h: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
        return self._gemv("gate_up", h, self._layer_rows("gate_up", layer), gain=gain, swiglu=True)

    def linear_residual(
        self, site: str, layer: int, x: torch.Tensor, residual: torch.Tensor
    ) -> torch.Tensor:
        return self._gemv(site, x, self._layer_rows(site, layer), c0=residual)

    # ---- the attention in one kernel (the ``layer`` mode) ------------------------------

    def attention(self) -> AttentionFn:
        """``triton.decode_attention`` over the step's caches at its position
        (``context - 1``) and RoPE tables: :meth:`DecodeStep.forward_fused`'s
        ``attention``. The tables are read at each call (a replayed graph sees
        what :meth:`~matprobe.token.bench.TokenBench.place` wrote)."""
        from matprobe.kernels.triton._decode_attention import decode_attention

        w = self.weights
        heads = self.specs["attn_qk"].batch or 1  # batch: the query heads
        scale = float(self.specs["attn_qk"].alpha_value)

        def attend(layer: int, qkv: torch.Tensor) -> torch.Tensor:
            k_cache = w.k_cache[layer]
            return decode_attention(
                qkv, k_cache, w.v_cache[layer], w.cos, w.sin, heads=heads,
                pos=k_cache.shape[1] - 1, scale=scale, pdl=self.pdl,
            )  # fmt: skip

        return attend

    # ---- the plain LinearFn ------------------------------------------------------------

    def linear(self) -> LinearFn:
        """One kernel per weight matmul, nothing folded in: the step's ``forward``
        with this is eager PyTorch with its matmuls swapped, so its matmul share
        is the kernels' alone."""
        site_of = {spec.key(): site for site, spec in self.specs.items()}

        def run(
            spec: MatmulSpec, x: torch.Tensor, w: Matrix, bias: torch.Tensor | None
        ) -> torch.Tensor:
            rows = self._rows_of.get(id(w))
            site = site_of.get(spec.key())
            if rows is None or site is None:
                raise MatprobeError(f"{spec.key()}: not one of the step's weights")
            return self._gemv(site, x, rows, bias=bias)

        return run


# ---- torch.library: the kernel inside torch.compile ------------------------------------

_OP_DEFINED = False


def _decode_gemv_op(
    x: torch.Tensor,
    w: torch.Tensor,
    scales: torch.Tensor | None,
    gain: torch.Tensor | None,
    bias: torch.Tensor | None,
    c0: torch.Tensor | None,
    swiglu: bool,
    bn: int,
    bk: int,
    warps: int,
    eps: float,
    *,
    shape_only: bool = False,
) -> torch.Tensor:
    """The op's body, and with ``shape_only`` its fake (what ``torch.compile``
    traces with): an empty output of the kernel's shape, nothing run."""
    if shape_only:
        rows = w.shape[0]
        return x.new_empty((1, rows // 2 if swiglu else rows))
    # A fresh output every call (never an input's alias, as custom ops require).
    return decode_gemv(
        x, w, tile=DecodeTile(bn, bk, warps), scales=scales, gain=gain, eps=eps,
        bias=bias, c0=c0, swiglu=swiglu,
    )  # fmt: skip


def define_op() -> None:
    """``matprobe::decode_gemv(...) -> Tensor``, defined once a process."""
    global _OP_DEFINED
    if _OP_DEFINED:
        return
    op = torch.library.custom_op(
        "matprobe::decode_gemv",
        _decode_gemv_op,
        mutates_args=(),
        schema="(Tensor x, Tensor w, Tensor? scales, Tensor? gain, Tensor? bias, Tensor? c0, "
        "bool swiglu, int bn, int bk, int warps, float eps) -> Tensor",
    )
    op.register_fake(functools.partial(_decode_gemv_op, shape_only=True))
    _OP_DEFINED = True
