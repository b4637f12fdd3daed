"""The matmul shape spec: what one profiled matmul call computes.

A :class:`MatmulSpec` is immutable and hashable. Its identity is the shape and
semantics (op, dims, layouts, epilogue, dtype, fused parts); where it came from
(call counts, production timings, the source file) rides along in
:class:`Provenance` and takes no part in equality, so the same shape read from
two profiles compares equal.

The canonical text key is the profile's own form
(``op=matmul | batch=1 | m=1 | n=896 | k=896 | tA=0 | tB=1``): the seven base
keys always, ``?`` where a value is unknown, then every other key that is set,
sorted by name — exactly how metallic's ``analyze_jsonl.py`` prints a shape, so
keys copied from a profile parse, and keys we print can be pasted back.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from matprobe.errors import SpecError

# Where a spec came from lives beside it; every user imports it from here (the
# profile side, the runner and the reports see the spec module, not its parts).
from matprobe.spec_provenance import BackendTiming as BackendTiming
from matprobe.spec_provenance import Provenance as Provenance

UNKNOWN = "?"

#: Keys printed first, in this order, always (``?`` when unknown).
BASE_KEYS: tuple[str, ...] = ("op", "batch", "m", "n", "k", "tA", "tB")

#: The computation each op performs (DESIGN.md §2); ``*_cache`` ops are
#: metallic's cached-pipeline flavour of the same computation. ``matmul_swiglu``
#: is the gate/up matmul with its SwiGLU activation folded in (see
#: :meth:`MatmulSpec.swiglu_problem`): never read from a profile, asked for by key.
OP_KINDS: tuple[str, ...] = ("matmul", "matmul_bias_add", "matmul_alpha_beta", "matmul_swiglu")

#: The SwiGLU op: W is gate and up stacked ``[n0 + n1, k]`` (tB = 1), the output
#: ``y = silu(x·W_gateᵀ) ⊙ (x·W_upᵀ)`` is ``[batch, m, n0]``.
SWIGLU = "matmul_swiglu"
#: fp32 operations per SwiGLU output counted in :meth:`MatmulSpec.flops`:
#: silu's g·σ(g) and the product with up (σ's exp and reciprocal are not FLOPs).
SWIGLU_EPILOGUE_FLOPS = 2
#: fp32 operations per element of x counted for an RMSNorm prologue: its square
#: and sum, and the products with the gain and the scale (rsqrt is not a FLOP).
RMSNORM_FLOPS_PER_X = 4

#: Bytes per element of activations/outputs (and of weights unless quantized).
DTYPE_BYTES: dict[str, float] = {"f32": 4.0, "f16": 2.0, "bf16": 2.0}

#: Q8_0: 32 weights per block, an fp16 scale + 32 int8 → 34 bytes a block.
Q8_0_BLOCK = 32
Q8_0_BLOCK_BYTES = 34
#: Activations, bias and output of a Q8_0 matmul are fp16 (as in metallic).
Q8_0_ACTIVATION_DTYPE = "f16"

DTYPES: tuple[str, ...] = ("f32", "f16", "bf16", "q8_0")

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_VALUE = re.compile(r"^[^\s|=:]+$")


def _fmt_float(value: float) -> str:
    """The profile prints scalars with 4 decimals; keep that look when exact."""
    short = f"{value:.4f}"
    return short if float(short) == value else repr(value)


@dataclass(frozen=True)
class MatmulSpec:
    """One matmul shape and its semantics (DESIGN.md §2).

    ``None`` means "the profile does not say": base keys print it as ``?``,
    other keys are then left out of the text key. The key is the profile's
    own, not a normal form: ``matmul_bias_add`` with and without ``bias=1`` are
    different keys for the same computation (``has_bias`` is true for both).
    Constructed in code, ``batch``, ``tA`` and ``tB`` default to 1/0/0; parsed,
    a base key the profile leaves out is unknown.
    """

    op: str
    batch: int | None = 1
    m: int | None = None
    n: int | None = None
    k: int | None = None
    tA: bool | None = False  # noqa: N815 - the profile's own key names
    tB: bool | None = False  # noqa: N815
    bias: bool | None = None
    alpha: float | None = None
    beta: float | None = None
    accumulate: bool | None = None
    strided_batch: bool | None = None
    cache: bool | None = None
    dtype: str | None = None
    loader: str | None = None
    # Fused kernels: gate/up (n0, n1) and QKV (nq, nk, nv) outputs of one pass.
    n0: int | None = None
    n1: int | None = None
    nq: int | None = None
    nk: int | None = None
    nv: int | None = None
    #: RMSNorm prologue: the op's A is ``x̂ = x / √(mean(x²) + ε) ⊙ g`` (each row of
    #: x normalised over K, g a gain of K values), this field being ε. A decode
    #: layer's QKV, gate/up and LM head read the residual stream so: a fused
    #: kernel normalises on the way instead of writing and re-reading x̂.
    rmsnorm: float | None = None
    #: Keys this version does not model, kept verbatim so nothing is lost.
    extras: tuple[tuple[str, str], ...] = ()
    provenance: Provenance | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not _IDENT.match(self.op):
            raise SpecError(f"bad op name {self.op!r}")
        for name in ("batch", "m", "n", "k", "n0", "n1", "nq", "nk", "nv"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise SpecError(f"{name} must be an integer or unknown, got {value!r}")
            if value is not None and value < (1 if name == "batch" else 0):
                raise SpecError(f"{name} must not be negative, got {value}")
        for name in _BOOL_FIELDS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise SpecError(f"{name} must be true, false or unknown, got {value!r}")
        for name in ("alpha", "beta"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise SpecError(f"{name} must be finite, got {value!r}")
        if self.rmsnorm is not None and not (math.isfinite(self.rmsnorm) and self.rmsnorm > 0):
            raise SpecError(f"rmsnorm (the norm's ε) must be finite and > 0, got {self.rmsnorm!r}")
        if self.dtype is not None and self.dtype not in DTYPES:
            raise SpecError(f"unknown dtype {self.dtype!r}; known: {', '.join(DTYPES)}")
        if self.loader is not None and not _VALUE.match(self.loader):
            raise SpecError(f"bad loader value {self.loader!r}")
        known = {f.name for f in fields(self)}
        seen: set[str] = set()
        for key, value in self.extras:
            if key in known or key == "backend" or not _IDENT.match(key) or key in seen:
                raise SpecError(f"bad or duplicate extra key {key!r}")
            if not _VALUE.match(value):
                raise SpecError(f"bad value {value!r} for key {key!r}")
            seen.add(key)
        object.__setattr__(self, "extras", tuple(sorted(self.extras)))

    # ---- semantics ---------------------------------------------------------

    @property
    def kind(self) -> str:
        """The computation: the op without metallic's ``_cache`` suffix."""
        return self.op.removesuffix("_cache")

    @property
    def has_bias(self) -> bool:
        return bool(self.bias) or self.kind == "matmul_bias_add"

    @property
    def alpha_value(self) -> float:
        return 1.0 if self.alpha is None else self.alpha

    @property
    def beta_value(self) -> float:
        return 0.0 if self.beta is None else self.beta

    @property
    def reads_c0(self) -> bool:
        """C₀ contributes to the result.

        BLAS convention: β = 0 never reads C₀, even with ``accumulate=1`` (the
        profile's attention shapes say ``accumulate=1 | beta=0.0000``), so a
        perfect kernel moves no C₀ bytes there.
        """
        return self.beta_value != 0.0

    @property
    def fused_parts(self) -> tuple[int, ...]:
        """Output widths of a fused kernel (gate/up or Q/K/V), else ()."""
        for group in (("n0", "n1"), ("nq", "nk", "nv")):
            values = [getattr(self, name) for name in group]
            if any(v is not None for v in values):
                return tuple(v for v in values if v is not None)
        return ()

    @property
    def is_swiglu(self) -> bool:
        return self.kind == SWIGLU

    def swiglu_problem(self) -> str | None:
        """Why this ``matmul_swiglu`` spec cannot run, or None (always None for
        another op). The op is defined for equal gate and up widths (one up
        column per gate column), W stored ``[n0 + n1, k]`` (tB = 1) and no epilogue
        of its own: a bias, α or β would make it another computation."""
        if not self.is_swiglu:
            return None
        if self.n0 is None or self.n1 is None:
            return "matmul_swiglu needs the gate and up widths n0 and n1"
        if self.n0 != self.n1:
            return (
                "matmul_swiglu needs n0 == n1 (one up column per gate column), "
                f"got n0={self.n0}, n1={self.n1}"
            )
        if self.n is not None and self.n != self.n0 + self.n1:
            return f"matmul_swiglu: n={self.n} is not n0 + n1 = {self.n0 + self.n1}"
        if self.tB is not None and not self.tB:
            return "matmul_swiglu needs tB=1: gate and up stacked as W [n0 + n1, k]"
        for name in ("bias", "alpha", "beta", "accumulate"):
            if getattr(self, name) is not None:
                return f"matmul_swiglu has no epilogue but silu·mul: {name} must not be set"
        return None

    def norm_problem(self) -> str | None:
        """Why this spec's RMSNorm prologue cannot be computed, or None (always None
        without one): the norm runs along each row of A, so A must be stored with K
        contiguous (tA = 0)."""
        if self.rmsnorm is not None and self.tA:
            return "an RMSNorm prologue needs A stored [batch, m, k] (tA=0)"
        return None

    @property
    def n_out(self) -> int | None:
        """Output columns: n0 for ``matmul_swiglu`` (gate ⊙ up), else :attr:`n_total`."""
        return self.n0 if self.is_swiglu else self.n_total

    @property
    def n_total(self) -> int | None:
        """All output columns: n, or the sum of the fused parts when n is unknown."""
        if self.n is not None:
            return self.n
        parts = self.fused_parts
        return sum(parts) if parts else None

    @property
    def is_complete(self) -> bool:
        """Every dimension needed to run or cost this spec is known."""
        return None not in (self.batch, self.m, self.n_total, self.k)

    def _dims(self) -> tuple[int, int, int, int]:
        batch, m, n, k = self.batch, self.m, self.n_total, self.k
        if batch is None or m is None or n is None or k is None:
            raise SpecError(f"spec has unknown dimensions: {self.key()}")
        return batch, m, n, k

    def flops(self) -> int:
        """Floating-point operations of one call.

        2·b·m·n·k for the products, plus one per output element for each
        epilogue step that is not the identity: bias add, α scaling (α ≠ 1),
        and 2 for β·C₀ accumulation (multiply and add) when β ≠ 0. SwiGLU: the
        products of both halves (n = n0 + n1) and
        :data:`SWIGLU_EPILOGUE_FLOPS` per output (n0 of them). An RMSNorm
        prologue: :data:`RMSNORM_FLOPS_PER_X` per element of A.
        """
        batch, m, n, k = self._dims()
        norm = RMSNORM_FLOPS_PER_X * batch * m * k if self.rmsnorm is not None else 0
        if self.is_swiglu:
            outputs = batch * m * (self.n0 or 0)
            return 2 * batch * m * n * k + SWIGLU_EPILOGUE_FLOPS * outputs + norm
        outputs = batch * m * n
        epilogue = 0
        if self.has_bias:
            epilogue += 1
        if self.alpha_value != 1.0:
            epilogue += 1
        if self.reads_c0:
            epilogue += 2
        return 2 * outputs * k + epilogue * outputs + norm

    def min_bytes(self, dtype: str | None = None) -> int:
        """Bytes a perfect kernel moves: each input read once, the output written once.

        A is b·m·k, B (the weight) is b·k·n — for Q8_0 34 bytes per 32-weight
        block, blocks running along K — the bias n, C₀ b·m·n when β ≠ 0 and the
        output b·m·n (b·m·n0 for SwiGLU: gate ⊙ up is what is written), and an
        RMSNorm prologue's gain k (x̂ is never written: it is A's own read). ``dtype``
        fills in when the spec's own is unknown.
        """
        batch, m, n, k = self._dims()
        fmt = self.dtype or dtype
        if fmt is None:
            raise SpecError(f"spec has no dtype; pass one: {self.key()}")
        if fmt not in DTYPES:
            raise SpecError(f"unknown dtype {fmt!r}; known: {', '.join(DTYPES)}")
        if fmt == "q8_0":
            act = DTYPE_BYTES[Q8_0_ACTIVATION_DTYPE]
            weight_bytes = batch * n * math.ceil(k / Q8_0_BLOCK) * Q8_0_BLOCK_BYTES
        else:
            act = DTYPE_BYTES[fmt]
            weight_bytes = int(batch * k * n * act)
        n_out = (self.n0 or 0) if self.is_swiglu else n
        total = weight_bytes + batch * m * k * act + batch * m * n_out * act
        if self.has_bias:
            total += n * act
        if self.reads_c0:
            total += batch * m * n * act
        if self.rmsnorm is not None:
            total += k * act  # the gain
        return int(total)

    def arithmetic_intensity(self, dtype: str | None = None) -> float:
        return self.flops() / self.min_bytes(dtype)

    # ---- text key ----------------------------------------------------------

    def items(self) -> list[tuple[str, str]]:
        """The key's ``(name, value)`` pairs in canonical order."""
        pairs = [(name, _render(name, getattr(self, name))) for name in BASE_KEYS]
        rest: list[tuple[str, str]] = list(self.extras)
        for f in fields(self):
            if f.name in BASE_KEYS or f.name in ("extras", "provenance"):
                continue
            value = getattr(self, f.name)
            if value is not None:
                rest.append((f.name, _render(f.name, value)))
        pairs.extend(sorted(rest))
        return pairs

    def key(self) -> str:
        return " | ".join(f"{name}={value}" for name, value in self.items())

    def __str__(self) -> str:
        return self.key()

    @classmethod
    def parse(cls, key: str) -> MatmulSpec:
        """Parse a key in the profile's form (a trailing ``:`` is allowed)."""
        text = key.strip().removesuffix(":").strip()
        if not text:
            raise SpecError("empty shape key")
        pairs: dict[str, str] = {}
        for part in text.split("|"):
            token = part.strip()
            name, sep, value = token.partition("=")
            name, value = name.strip(), value.strip()
            if not sep or not _IDENT.match(name) or not _VALUE.match(value):
                raise SpecError(f"not a key=value pair: {token!r} in {key!r}")
            if name in pairs:
                raise SpecError(f"key {name!r} given twice in {key!r}")
            pairs[name] = value
        return cls.from_mapping(pairs)

    @classmethod
    def from_mapping(
        cls, values: Mapping[str, Any], provenance: Provenance | None = None
    ) -> MatmulSpec:
        """Build from string (or native) values keyed as in a profile.

        ``backend`` is not part of a shape and is ignored; unknown keys are kept
        in ``extras``.
        """
        if "op" not in values or values["op"] in (None, UNKNOWN):
            raise SpecError(f"shape has no op: {dict(values)}")
        known = {f.name for f in fields(cls)} - {"extras", "provenance"}
        kwargs: dict[str, Any] = {}
        extras: list[tuple[str, str]] = []
        for name, raw in values.items():
            if name == "backend":
                continue
            if name not in known:
                extras.append((name, str(raw)))
                continue
            kwargs[name] = _convert(name, raw)
        # Base keys a profile leaves out are unknown, not defaulted.
        for name in BASE_KEYS:
            kwargs.setdefault(name, None)
        return cls(**kwargs, extras=tuple(extras), provenance=provenance)

    # ---- JSON --------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON form: every field (unknown → null), the key, and derived figures."""
        data = asdict(self)
        data.pop("provenance")
        data["extras"] = dict(self.extras)
        out: dict[str, Any] = {"key": self.key(), **data}
        if self.is_complete:
            out["flops"] = self.flops()
            if self.dtype is not None:
                out["min_bytes"] = self.min_bytes()
        if self.provenance is not None:
            out["provenance"] = self.provenance.to_dict()
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MatmulSpec:
        known = {f.name for f in fields(cls)} - {"provenance"}
        kwargs = {name: data[name] for name in known if name in data}
        kwargs["extras"] = tuple(dict(data.get("extras", {})).items())
        prov = data.get("provenance")
        return cls(
            **kwargs,
            provenance=Provenance.from_dict(prov) if prov is not None else None,
        )

    @classmethod
    def from_json(cls, text: str) -> MatmulSpec:
        return cls.from_dict(json.loads(text))

    def with_provenance(self, provenance: Provenance | None) -> MatmulSpec:
        return replace(self, provenance=provenance)

    def with_dtype(self, dtype: str) -> MatmulSpec:
        return replace(self, dtype=dtype)


_BOOL_TRUE = {"1", "true"}
_BOOL_FALSE = {"0", "false"}
_INT_FIELDS = {"batch", "m", "n", "k", "n0", "n1", "nq", "nk", "nv"}
_BOOL_FIELDS = {"tA", "tB", "bias", "accumulate", "strided_batch", "cache"}
_FLOAT_FIELDS = {"alpha", "beta", "rmsnorm"}


def _render(name: str, value: Any) -> str:
    if value is None:
        return UNKNOWN
    if name in _BOOL_FIELDS:
        # The profile prints strided_batch as true/false and the rest as 0/1.
        if name == "strided_batch":
            return "true" if value else "false"
        return "1" if value else "0"
    if name in _FLOAT_FIELDS:
        return _fmt_float(float(value))
    return str(value)


def _convert(name: str, raw: Any) -> Any:
    if raw is None:
        return None
    text = str(raw).strip()
    if text == UNKNOWN:
        return None
    try:
        if name in _INT_FIELDS:
            if isinstance(raw, bool):
                raise ValueError
            return int(text)
        if name in _BOOL_FIELDS:
            low = text.lower()
            if low in _BOOL_TRUE:
                return True
            if low in _BOOL_FALSE:
                return False
            raise ValueError
        if name in _FLOAT_FIELDS:
            value = float(text)
            if not math.isfinite(value):
                raise ValueError
            return value
    except ValueError:
        raise SpecError(f"bad value {text!r} for {name}") from None
    return text


def merge_specs(specs: Iterable[MatmulSpec]) -> list[MatmulSpec]:
    """Combine equal specs (e.g. ``alpha=0.125`` and ``alpha=0.1250``) into one,
    merging their provenance; first-seen order is kept."""
    merged: dict[MatmulSpec, MatmulSpec] = {}
    for spec in specs:
        prior = merged.get(spec)
        if prior is None:
            merged[spec] = spec
        elif spec.provenance is not None:
            prov = (
                spec.provenance
                if prior.provenance is None
                else prior.provenance.merged(spec.provenance)
            )
            merged[spec] = prior.with_provenance(prov)
    return list(merged.values())
