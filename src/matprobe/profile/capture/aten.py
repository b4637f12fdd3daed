"""Which matmul a PyTorch call computes, read from the call's own tensors.

Two interception points, because neither alone sees everything as it is:

* a :class:`~torch.utils._python_dispatch.TorchDispatchMode` sees the aten ops
  that really run. ``linear`` and ``matmul`` are composite ops, so they arrive
  here already lowered to ``mm``/``addmm``/``bmm`` — with the weight as a
  transposed view, whose strides give tB=1 — and are recorded in that form;
* a :class:`~torch.overrides.TorchFunctionMode` sees
  ``scaled_dot_product_attention`` before PyTorch picks a backend. A fused
  backend is one opaque aten op and the math backend a scatter of scaled
  ``bmm`` calls, so attention is recorded here, as the two batched products
  every backend computes (Q·Kᵀ and P·V), and the aten calls inside it are not.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from matprobe.profile.capture.record import CapturedCall
from matprobe.spec import MatmulSpec

#: torch dtypes a spec can name; others are recorded without a dtype.
TORCH_DTYPES: dict[torch.dtype, str] = {
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
}

#: Op names that look like a matmul. One that no rule below handles is counted
#: as unhandled, so a new lowering (``mv``, ``_int_mm``, a fused attention called
#: directly) shows up in the report instead of vanishing from the counts.
_MATMUL_LIKE = re.compile(r"(mm|mv|dot)(_|$)|attention")


def layout_transposed(shape: Sequence[int], strides: Sequence[int]) -> bool | None:
    """Whether a 2-D operand ``[rows, cols]`` is stored transposed — as
    ``[cols, rows]`` row-major — judged from its strides.

    A dimension of size 1 has no meaningful stride, so it fits either layout; when
    both fit (a vector) row-major wins, so a decode activation ``[1, K]`` is tA=0
    whatever its strides. None for a view that is neither (a BLAS call copies it).
    """
    rows, cols = shape[-2], shape[-1]
    row_stride, col_stride = strides[-2], strides[-1]
    if (cols == 1 or col_stride == 1) and (rows == 1 or row_stride >= cols):
        return False
    if (rows == 1 or row_stride == 1) and (cols == 1 or col_stride >= rows):
        return True
    return None


def _transposed(tensor: torch.Tensor) -> bool | None:
    return layout_transposed(tensor.shape, tensor.stride())


def _product(op: str, a: torch.Tensor, b: torch.Tensor, **fields: Any) -> MatmulSpec:
    """The spec of ``op(a) · op(b)`` over the last two dimensions."""
    return MatmulSpec(
        op=op,
        m=a.shape[-2],
        n=b.shape[-1],
        k=a.shape[-1],
        tA=_transposed(a),
        tB=_transposed(b),
        dtype=TORCH_DTYPES.get(a.dtype),
        **fields,
    )


def _scalars(kwargs: Mapping[str, Any]) -> tuple[float, float]:
    """``alpha`` and ``beta`` of addmm/baddbmm (keyword-only in aten, default 1)."""
    return float(kwargs.get("alpha", 1)), float(kwargs.get("beta", 1))


def _mm(args: Sequence[Any], kwargs: Mapping[str, Any]) -> MatmulSpec:
    return _product("matmul", args[0], args[1])


def _addmm(args: Sequence[Any], kwargs: Mapping[str, Any]) -> MatmulSpec:
    c0, a, b = args[0], args[1], args[2]
    alpha, beta = _scalars(kwargs)
    n = b.shape[-1]
    # F.linear with a bias lowers to addmm(bias, x, Wᵀ): a bias row, α = β = 1.
    if alpha == beta == 1.0 and c0.numel() == n and c0.shape[-1] == n:
        return _product("matmul_bias_add", a, b)
    return _alpha_beta(a, b, alpha=alpha, beta=beta)


def _bmm(args: Sequence[Any], kwargs: Mapping[str, Any]) -> MatmulSpec:
    a, b = args[0], args[1]
    return _product("matmul", a, b, batch=a.shape[0], strided_batch=True)


def _baddbmm(args: Sequence[Any], kwargs: Mapping[str, Any]) -> MatmulSpec:
    a, b = args[1], args[2]
    alpha, beta = _scalars(kwargs)
    return _alpha_beta(a, b, alpha=alpha, beta=beta, batch=a.shape[0], strided_batch=True)


def _alpha_beta(
    a: torch.Tensor, b: torch.Tensor, *, alpha: float, beta: float, **fields: Any
) -> MatmulSpec:
    # β = 0 never reads C₀ (BLAS convention), so only then is accumulate left unsaid,
    # as in decode_specs' attention shapes.
    accumulate = True if beta != 0.0 else None
    return _product(
        "matmul_alpha_beta", a, b, alpha=alpha, beta=beta, accumulate=accumulate, **fields
    )


_Rule = Callable[[Sequence[Any], Mapping[str, Any]], MatmulSpec]

#: aten op (in-place forms included) → the spec of one call.
_RULES: dict[str, _Rule] = {
    "mm": _mm,
    "addmm": _addmm,
    "addmm_": _addmm,
    "bmm": _bmm,
    "baddbmm": _baddbmm,
    "baddbmm_": _baddbmm,
}


def aten_spec(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> MatmulSpec | None:
    """The spec of one aten call (``name`` without overload: ``addmm``), or None
    when the op is not one of the matmul family."""
    rule = _RULES.get(name)
    return rule(args, kwargs) if rule is not None else None


#: ``scaled_dot_product_attention``'s positional parameters (``scale`` and
#: ``enable_gqa`` are keyword-only).
_SDPA_PARAMETERS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")


def attention_specs(
    args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[MatmulSpec, MatmulSpec]:
    """The two products of one ``scaled_dot_product_attention`` call.

    Scores S = α·Q·Kᵀ (m = query rows, n = keys, k = head dim, Kᵀ read from K
    stored [keys, head dim]: tB=1), then O = P·V (k = keys, V read as stored:
    tB=0), each batched over the query's leading dimensions — with
    ``enable_gqa`` the query heads, each reading its group's K and V, as
    decode_specs counts them. α is the call's ``scale``, by default 1/√(head dim).
    The mask, softmax and dropout are elementwise work between the two products.
    """
    bound = {**dict(zip(_SDPA_PARAMETERS, args, strict=False)), **kwargs}
    query, key, value = bound["query"], bound["key"], bound["value"]
    head_dim = query.shape[-1]
    scale = bound.get("scale")
    alpha = float(scale) if scale is not None else 1.0 / math.sqrt(head_dim)
    if bound.get("enable_gqa"):
        batch_shape = tuple(query.shape[:-2])
    else:
        batch_shape = np.broadcast_shapes(tuple(query.shape[:-2]), tuple(key.shape[:-2]))
    batch = math.prod(batch_shape)
    rows, keys = query.shape[-2], key.shape[-2]
    dtype = TORCH_DTYPES.get(query.dtype)
    common: dict[str, Any] = {
        "op": "matmul_alpha_beta",
        "batch": batch,
        "m": rows,
        "beta": 0.0,
        "strided_batch": True,
        "dtype": dtype,
    }
    # Kᵀ as a view: shape [head dim, keys] with K's last two strides swapped.
    keys_transposed = layout_transposed((head_dim, keys), (key.stride(-1), key.stride(-2)))
    scores = MatmulSpec(
        n=keys, k=head_dim, tA=_transposed(query), tB=keys_transposed, alpha=alpha, **common
    )
    # P is the softmax's fresh [rows, keys] output: row-major.
    output = MatmulSpec(
        n=value.shape[-1], k=keys, tA=False, tB=_transposed(value), alpha=1.0, **common
    )
    return scores, output


@dataclass
class CallLog:
    """What :func:`recording` saw: the matmul calls and the unhandled look-alikes."""

    calls: list[CapturedCall] = field(default_factory=list)
    unhandled: Counter[str] = field(default_factory=Counter)
    #: the modules whose forward is running, outermost first
    sites: list[str] = field(default_factory=list)
    #: inside scaled_dot_product_attention: its own aten calls are not recorded
    in_attention: int = 0

    @property
    def site(self) -> str:
        return self.sites[-1] if self.sites else ""

    def op_call(
        self, namespace: str, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> None:
        if self.in_attention:
            return
        spec = aten_spec(name, args, kwargs) if namespace == "aten" else None
        if spec is not None:
            self.calls.append(CapturedCall(spec, self.site, name))
        elif _MATMUL_LIKE.search(name):
            self.unhandled[f"{namespace}::{name}"] += 1

    def attention_call(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        scores, output = attention_specs(args, kwargs)
        self.calls.append(CapturedCall(scores, self.site, "sdpa_qk"))
        self.calls.append(CapturedCall(output, self.site, "sdpa_pv"))


# torch leaves TorchDispatchMode's __init__ and __init_subclass__ untyped.
class _AtenMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(self, log: CallLog) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.log = log

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        self.log.op_call(func.namespace, func.overloadpacket.__name__, args, kwargs)
        return func(*args, **kwargs)


class _AttentionMode(TorchFunctionMode):
    def __init__(self, log: CallLog) -> None:
        super().__init__()
        self.log = log

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is not torch.nn.functional.scaled_dot_product_attention:
            return func(*args, **kwargs)
        self.log.attention_call(args, kwargs)
        self.log.in_attention += 1
        try:
            return func(*args, **kwargs)
        finally:
            self.log.in_attention -= 1


@contextmanager
def recording(model: torch.nn.Module) -> Iterator[CallLog]:
    """Record the matmul calls run inside the block, each with the path of the
    innermost ``model`` submodule running it (forward hooks keep that stack)."""
    log = CallLog()

    # A hook that returns a value replaces the module's input or output: these
    # return None.
    def enter(name: str) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            log.sites.append(name)

        return hook

    def leave(*_: Any) -> None:
        log.sites.pop()

    handles = []
    for name, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(enter(name)))
        # always_call: the stack stays right when a forward raises.
        handles.append(module.register_forward_hook(leave, always_call=True))
    try:
        with _AttentionMode(log), _AtenMode(log):
            yield log
    finally:
        for handle in handles:
            handle.remove()
