"""matprobe: a lab for the matmul kernels of LLM decode."""

from __future__ import annotations

from matprobe.spec import BackendTiming, MatmulSpec, Provenance
from matprobe.stats import Stats

__version__ = "0.1.0"

__all__ = ["BackendTiming", "MatmulSpec", "Provenance", "Stats", "__version__"]
