"""The decode layer's GEMV tiles from a dispatch table: the way back for `layer` tokens.

``matprobe run --model M --layer`` measures the layer's sites as specs (norm+QKV,
o_proj+residual, norm+SwiGLU, down+residual, norm+LM head); ``matprobe dispatch``
exports each site's winner. Where ``triton.gemv_decode`` won a site, its grid
point is the tile the `layer` and `layer+pdl` tokens launch there
(``matprobe token --table``), in place of the token's own rule
(``token.fused.default_tile``), and the sites it lost keep that rule's tile.

Measured on an H100 (BENCHMARKS.md): fed back this way, Qwen2.5-0.5B's fp16
site winners gave a `layer+pdl` token of 538.5 µs against 539.0 and 539.5 with
the token's own tiles — the per-site ranking, each kernel timed alone and
without programmatic dependent launch, did not carry into the token, where
tiles chosen in a whole token gave 524.5 (``token.fused.MEASURED_TILES``).
The table is the way back for whatever a run crowns; it is not a speed-up by
itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from matprobe.dispatch.table import Entry
from matprobe.kernels.triton.decode import NAME as DECODE_FAMILY
from matprobe.kernels.triton.decode import DecodeTile, tile_problem
from matprobe.profile.models import ModelConfig, decode_specs
from matprobe.spec import MatmulSpec


class TableLookup(Protocol):
    """What the tiles need of a table (:class:`~matprobe.dispatch.table.DispatchTable`)."""

    def lookup(self, spec: MatmulSpec) -> Entry | None: ...


#: The token's GEMV sites (``token.fused.DecodeKernels``) and the layer spec each
#: one is (``decode_specs(..., layer=True)``'s roles).
LAYER_ROLES: Mapping[str, str] = {
    "qkv": "norm+qkv",
    "o_proj": "o_proj+res",
    "gate_up": "norm+swiglu",
    "down": "down+res",
    "lm_head": "norm+lm_head",
}


def layer_tiles(
    table: TableLookup, config: ModelConfig, *, context: int, dtype: str
) -> tuple[dict[str, DecodeTile], dict[str, str]]:
    """(the tile of every site whose layer spec ``triton.gemv_decode`` won in
    ``table``, why each other site keeps the token's own tile — by layer role)."""
    specs = {s.role: s.spec for s in decode_specs(config, context=context, dtype=dtype, layer=True)}
    tiles: dict[str, DecodeTile] = {}
    kept: dict[str, str] = {}
    for site, role in LAYER_ROLES.items():
        spec = specs[role]
        entry = table.lookup(spec)
        if entry is None:
            kept[role] = "no entry in the table"
            continue
        if entry.family != DECODE_FAMILY:
            kept[role] = f"won by {entry.family}"
            continue
        try:
            tile = DecodeTile(int(entry.params["bn"]), int(entry.params["bk"]),
                              int(entry.params["w"]))  # fmt: skip
        except (KeyError, TypeError, ValueError):
            kept[role] = f"its entry's parameters are not a tile: {dict(entry.params)}"
            continue
        problem = tile_problem(
            tile, k=spec.k or 0, swiglu=spec.kind == "matmul_swiglu", quantized=dtype == "q8_0"
        )
        if problem is not None:
            kept[role] = f"its tile cannot run here: {problem}"
            continue
        tiles[site] = tile
    return tiles, kept
