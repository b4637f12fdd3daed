"""How the decode step calls its weight matmuls: a pluggable :data:`LinearFn`.

The step hands every weight matmul to one function, ``linear(spec, x, w, bias)``:

* ``spec`` is exactly the :class:`~matprobe.spec.MatmulSpec` that
  :func:`~matprobe.profile.models.decode_specs` gives for that site (at the step's context
  and dtype), so a dispatch table finds its kernel by ``spec.key()``;
* ``x`` is ``[1, k]``; ``w`` is stored as the spec says (tB = 1: ``[n, k]``,
  tB = 0: ``[k, n]``), or is a :class:`~matprobe.token.weights.Q8Matrix`
  (``[n, k]`` quants and block scales) in a Q8_0 token; ``bias`` is ``[n]`` or None;
* it returns a *new* ``[1, n]`` tensor in the spec's dtype. The step never
  writes into what it gets back, so a function may also return a buffer of its
  own (the ``none`` mode does).

The attention products are not weight matmuls: they stay torch ops in every mode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from matprobe.errors import MatprobeError
from matprobe.spec import MatmulSpec
from matprobe.token.weights import Matrix, Q8Matrix

LinearFn = Callable[[MatmulSpec, torch.Tensor, Matrix, "torch.Tensor | None"], torch.Tensor]


def torch_linear(
    spec: MatmulSpec, x: torch.Tensor, w: Matrix, bias: torch.Tensor | None
) -> torch.Tensor:
    """The baseline: plain torch ops, as a PyTorch model calls them (cuBLAS on a
    GPU, the CPU BLAS on the CPU). A Q8_0 matrix is dequantized to x's dtype
    first and then multiplied — what a PyTorch user without a Q8_0 kernel does."""
    if isinstance(w, Q8Matrix):
        w = w.dense(x.dtype)
    if spec.tB:
        return torch.nn.functional.linear(x, w, bias)
    if bias is None:
        return torch.mm(x, w)
    return torch.addmm(bias, x, w)


#: How much of x a compiled ``none`` twin adds to its buffer: small, and never 0
#: (a multiplication by 0 could be folded away with everything after it).
TIE = 2.0**-24


class NoMatmul:
    """The ``none`` LinearFn: the matmul left out. It returns a preallocated
    ``[1, n]`` buffer (zeros, never written), so a token built with it costs
    everything but its weight matmuls; its logits mean nothing.

    ``tied``: for a compiled step. A constant buffer would let the compiler
    drop everything downstream of it as constant (a whole 24-layer token in
    28 µs on an H100), so the buffer is tied to x by a pointwise term
    (``x[:, :1]·2⁻²⁴``) that the compiler fuses into the next kernel's loads:
    the elementwise work stays, no matmul is added."""

    def __init__(self, *, tied: bool = False) -> None:
        self._buffers: dict[int, torch.Tensor] = {}
        self.tied = tied

    def prepare(self, specs: Mapping[str, MatmulSpec], dtype: torch.dtype, device: str) -> None:
        """Allocate the buffers before any call (outside a graph capture, where an
        allocation would be part of the graph)."""
        for spec in specs.values():
            n = spec.n_total
            if n is not None and n not in self._buffers:
                self._buffers[n] = torch.zeros(1, n, dtype=dtype, device=device)

    def __call__(
        self, spec: MatmulSpec, x: torch.Tensor, w: Matrix, bias: torch.Tensor | None
    ) -> torch.Tensor:
        buffer = self._buffers.get(spec.n or 0)
        if buffer is None:
            raise MatprobeError(f"no buffer prepared for {spec.key()}")
        if self.tied:
            return buffer + x[:, :1] * TIE
        return buffer


def check_output(spec: MatmulSpec, y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``y`` if it is what a LinearFn must return for ``spec``, else a one-line error
    (a kernel that returns the wrong shape or dtype must not be timed)."""
    n = spec.n_total
    if tuple(y.shape) != (1, n) or y.dtype != dtype:
        raise MatprobeError(
            f"linear for {spec.key()} returned {tuple(y.shape)} {y.dtype}, "
            f"expected (1, {n}) {dtype}"
        )
    return y
