"""matprobe's Triton families: each family module (``gemv``, ``splitk``, …)
beside the ``_…_kernels`` module it launches, and what they all share:
``_common`` (the family declaration, operand checks, launch arguments, the
split planner, grid limits) and ``_blocks`` (the row-block set-up, the epilogue,
the split-K finish). Each family's kernels live in a module of their own so
that importing the family never imports triton, and so that the family can
fingerprint that module's text."""
