"""The catalogue: which family modules matprobe ships.

The list lives with the families (``kernels/triton/``: matprobe's own Triton
families, each beside its ``_…_kernels`` module and the shared building blocks;
``kernels/peers/``: the libraries they are measured against, the cuBLAS
baseline ``torch_ref`` first), not in the harness: the harness knows a
registry only as a factory string (``"matprobe.kernels.catalogue:shipped_registry"``,
``measure.variants.SHIPPED_FACTORY``) resolved where it is needed, worker
processes included, so nothing of the measurement core, the run side or the
report side imports a family module. Each module lists its own families as
``FAMILIES`` — the contract a user's plugin module meets too — and imports
without torch, triton or mlx: a missing library is a capability reason, not an
ImportError.
"""

from __future__ import annotations

from types import ModuleType

from matprobe.kernels.peers import gemlite_ref, mlx_ref, numpy_ref, torch_compile, torch_ref
from matprobe.kernels.triton import (
    attention,
    decode,
    gemm,
    gemv,
    gemv_q8,
    gemv_q8_int8dot,
    gemv_stream,
    gemv_swiglu,
    gemv_tn,
    splitk,
)
from matprobe.measure.variants import Registry, VariantFamily

#: The shipped family modules, in listing order: the peers (the baseline first),
#: then matprobe's Triton families.
MODULES: tuple[ModuleType, ...] = (
    torch_ref,
    numpy_ref,
    torch_compile,
    mlx_ref,
    gemlite_ref,
    gemv,
    gemv_stream,
    splitk,
    gemv_tn,
    attention,
    gemm,
    gemv_q8,
    gemv_q8_int8dot,
    gemv_swiglu,
    decode,
)

#: Their names under ``matprobe.kernels`` (``"peers.torch_ref"``, ``"triton.gemv"``, …).
SHIPPED_MODULES: tuple[str, ...] = tuple(
    m.__name__.removeprefix(f"{__package__}.") for m in MODULES
)


def shipped_families() -> list[VariantFamily]:
    """Every shipped module's ``FAMILIES``, in :data:`MODULES` order."""
    return [family for module in MODULES for family in module.FAMILIES]


def shipped_registry() -> Registry:
    """The families matprobe ships, in a fresh registry."""
    return Registry(shipped_families())
