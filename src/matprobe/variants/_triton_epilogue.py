"""The epilogue every Triton GEMV family shares (imported by their kernel modules).

``out = alpha·acc + beta·C0 + bias`` in fp32 (the order
``matprobe.harness.inputs.reference`` documents), one cast on store. Its text
is part of each using family's fingerprint (the kernels import it; see
``matprobe.harness.fingerprint``).
"""

import triton  # type: ignore[import-untyped, import-not-found, unused-ignore]
import triton.language as tl  # type: ignore[import-untyped, import-not-found, unused-ignore]


@triton.jit  # type: ignore[misc, untyped-decorator, unused-ignore]
def epilogue_store(  # type: ignore[no-untyped-def]
    acc,  # [BLOCK_N] fp32 sums of x·W
    pid_b,  # int64 batch index
    offs_n,
    mask_n,
    c0_ptr,
    bias_ptr,
    out_ptr,
    stride_cb,
    stride_cn,
    stride_bias,
    stride_ob,
    stride_on,
    alpha,
    beta,
    HAS_C0: tl.constexpr,  # noqa: N803
    HAS_BIAS: tl.constexpr,  # noqa: N803
) -> None:
    # All in fp32: alpha scaling, then beta * C0, then the bias (the order
    # matprobe.harness.inputs.reference documents); one cast on store.
    acc = acc * alpha
    if HAS_C0:
        c0 = tl.load(c0_ptr + pid_b * stride_cb + offs_n * stride_cn, mask=mask_n, other=0.0)
        acc += beta * c0.to(tl.float32)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_n * stride_bias, mask=mask_n, other=0.0)
        acc += bias.to(tl.float32)
    out = acc.to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + pid_b * stride_ob + offs_n * stride_on, out, mask=mask_n)
