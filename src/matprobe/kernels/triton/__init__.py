"""matprobe's Triton families: each family module (``gemv``, ``splitk``, …)
beside the ``_…_kernels`` module it launches, and what they all share:
``_common`` (operand checks, the split planner, grid limits) and ``_blocks``
(the epilogue, the split-K finish)."""
