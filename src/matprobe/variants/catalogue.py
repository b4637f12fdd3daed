"""The catalogue: which family modules matprobe ships.

The list lives with the families, not in the harness: the harness knows a
registry only as a factory string (``"matprobe.variants.catalogue:shipped_registry"``,
``measure.variants.SHIPPED_FACTORY``) resolved where it is needed, worker
processes included, so nothing under ``matprobe.measure`` imports a family
module. Each module lists its own families as ``FAMILIES`` — the contract a
user's plugin module meets too — and imports without torch, triton or mlx: a
missing library is a capability reason, not an ImportError.
"""

from __future__ import annotations

from types import ModuleType

from matprobe.measure.variants import Registry, VariantFamily
from matprobe.variants import (
    gemlite_ref,
    mlx_ref,
    numpy_ref,
    torch_compile,
    torch_ref,
    triton_attention,
    triton_decode,
    triton_gemm,
    triton_gemv,
    triton_gemv_q8,
    triton_gemv_q8_int8dot,
    triton_gemv_stream,
    triton_gemv_swiglu,
    triton_gemv_tn,
    triton_splitk,
)

#: The shipped family modules, in listing order.
MODULES: tuple[ModuleType, ...] = (
    torch_ref,
    numpy_ref,
    torch_compile,
    mlx_ref,
    gemlite_ref,
    triton_gemv,
    triton_gemv_stream,
    triton_splitk,
    triton_gemv_tn,
    triton_attention,
    triton_gemm,
    triton_gemv_q8,
    triton_gemv_q8_int8dot,
    triton_gemv_swiglu,
    triton_decode,
)

#: Their names under ``matprobe.variants`` (``"triton_gemv"``, …).
SHIPPED_MODULES: tuple[str, ...] = tuple(m.__name__.rpartition(".")[2] for m in MODULES)


def shipped_families() -> list[VariantFamily]:
    """Every shipped module's ``FAMILIES``, in :data:`MODULES` order."""
    return [family for module in MODULES for family in module.FAMILIES]


def shipped_registry() -> Registry:
    """The families matprobe ships, in a fresh registry."""
    return Registry(shipped_families())
