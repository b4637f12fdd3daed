"""matprobe: a lab for the matmul kernels of LLM decode.

A plugin's families need one import: ``from matprobe import variant_family``
(the family contract lives in ``matprobe.measure.variants``; it is loaded on
first use, so importing ``matprobe`` stays as light as the spec).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from matprobe.spec import BackendTiming, MatmulSpec, Provenance
from matprobe.stats import Stats

if TYPE_CHECKING:
    from matprobe.measure.variants import KernelFn, VariantFamily, variant_family

__version__ = "0.1.0"

#: The plugin API (see the README's "Your own kernels"), from the family contract.
_PLUGIN_API = ("KernelFn", "VariantFamily", "variant_family")

__all__ = [
    "BackendTiming",
    "KernelFn",
    "MatmulSpec",
    "Provenance",
    "Stats",
    "VariantFamily",
    "__version__",
    "variant_family",
]


def __getattr__(name: str) -> Any:
    if name in _PLUGIN_API:
        from matprobe.measure import variants

        return getattr(variants, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
