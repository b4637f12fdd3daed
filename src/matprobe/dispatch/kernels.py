"""What an engine calls: a loaded table turned into kernels.

``Dispatcher(table, device).kernel_for(spec)`` returns a callable with the
harness's ``(inputs, out)`` signature — the table's winner for the spec's
shape, built for this exact spec, or the baseline where the table has no entry,
names the baseline, or its family refuses this spec (another m, say). Built
kernels are kept per spec (a split-K kernel owns its workspace).

``linear(spec, x, w, bias)`` is the same dispatch in the form a model calls:
x ``[1, k]`` (or ``[m, k]``), w stored as the spec says, a new ``[m, n]``
output. :func:`register_custom_op` exposes it to ``torch.compile`` as
``torch.ops.matprobe.linear`` (``torch.library``): opaque to Inductor, which
fuses the elementwise work around it and keeps it inside the compiled graph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from matprobe.dispatch.table import (
    DispatchError,
    DispatchTable,
    load_table,
    table_problems,
    version_warnings,
)
from matprobe.measure.device import DeviceInfo
from matprobe.measure.variants import KernelFn, Registry, Variant, registry_with_plugins
from matprobe.spec import MatmulSpec

if TYPE_CHECKING:
    import torch

#: ``linear(spec, x, w, bias) -> y``: a weight matmul as a model calls it.
LinearFn = Callable[[MatmulSpec, "torch.Tensor", "torch.Tensor", "torch.Tensor | None"], Any]


@dataclass
class Dispatcher:
    """A table checked against this device and the installed families."""

    table: DispatchTable
    device: DeviceInfo
    registry: Registry
    warnings: list[str] = field(default_factory=list)
    _kernels: dict[str, tuple[str, KernelFn]] = field(default_factory=dict)
    _reasons: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(
        cls, path: str, device: DeviceInfo, *, plugins: Sequence[str] = (), check: bool = True
    ) -> Dispatcher:
        """Read, check and wrap a table; a one-line :class:`DispatchError` when it
        is for another card or names changed code (``check=False`` skips that)."""
        table = load_table(path)
        registry = registry_with_plugins(plugins=(*table.plugins, *plugins))
        return cls.checked(table, device, registry, check=check)

    @classmethod
    def checked(
        cls, table: DispatchTable, device: DeviceInfo, registry: Registry, *, check: bool = True
    ) -> Dispatcher:
        names = {f.name for f in registry.families()}
        fingerprints = {
            name: registry.family(name).source_fingerprint if name in names else None
            for name in {e.family for e in table.entries} - {table.baseline}
        }
        if check and (
            problems := table_problems(
                table,
                device_name=device.name,
                capability=device.capability,
                fingerprints=fingerprints,
            )
        ):
            raise DispatchError("; ".join(problems))
        warnings = version_warnings(table, {**device.versions, "driver": device.driver})
        return cls(table, device, registry, warnings)

    def choice(self, spec: MatmulSpec) -> tuple[str, str]:
        """(variant id, why) of what :meth:`kernel_for` runs for ``spec``."""
        return self._build(spec)[0], self._reasons.get(spec.key(), "")

    def kernel_for(self, spec: MatmulSpec) -> KernelFn:
        return self._build(spec)[1]

    def _baseline(self) -> Variant:
        return self.registry.family(self.table.baseline).variants()[0]

    def _build(self, spec: MatmulSpec) -> tuple[str, KernelFn]:
        key = spec.key()
        if key in self._kernels:
            return self._kernels[key]
        variant, why = self._baseline(), "no entry for this shape: the baseline"
        entry = self.table.lookup(spec)
        if entry is not None and entry.family == self.table.baseline:
            why = "the baseline won this shape"
        elif entry is not None:
            family = self.registry.family(entry.family)
            (chosen,) = family.variants({name: (value,) for name, value in entry.params.items()})
            reason = chosen.unsupported_reason(spec, self.device)
            if reason is None:
                variant, why = chosen, f"the table's winner ({entry.spec})"
            else:
                why = f"the table's {chosen.id} refuses this spec ({reason}): the baseline"
        built = (variant.id, variant.build(spec, self.device))
        self._kernels[key] = built
        self._reasons[key] = why
        return built

    def linear(
        self, spec: MatmulSpec, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        return run_linear(self.kernel_for(spec), spec, x, w, bias)


def run_linear(
    kernel: KernelFn,
    spec: MatmulSpec,
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None,
    gain: torch.Tensor | None = None,
) -> torch.Tensor:
    """``kernel`` on a model's operands: x ``[m, k]``, w ``[n, k]`` (tB) or ``[k, n]``;
    ``gain`` the RMSNorm's ``[k]`` for a spec with an RMSNorm prologue (x is then the
    residual stream, normalised by the kernel)."""
    import torch

    from matprobe.measure.inputs import MatmulInputs

    if spec.tA:
        raise DispatchError(f"{spec.key()}: a model's x is never stored transposed (tA=1)")
    if (spec.rmsnorm is None) != (gain is None):
        raise DispatchError(
            f"{spec.key()}: the norm's gain is given exactly when the spec has an "
            "RMSNorm prologue (rmsnorm=ε)"
        )
    m = x.shape[0]
    n = w.shape[0] if spec.tB else w.shape[1]
    out = torch.empty((1, m, n), dtype=x.dtype, device=x.device)
    inputs = MatmulInputs(
        x.reshape(1, m, x.shape[-1]),
        w.unsqueeze(0),
        bias,
        None,
        spec.alpha_value,
        spec.beta_value,
        ta=False,
        tb=bool(spec.tB),
        gain=gain,
        norm_eps=spec.rmsnorm,
    )
    kernel(inputs, out)
    return out.view(m, n)


# ---- torch.library: the table's kernels inside torch.compile --------------------------

#: Dispatchers the custom op serves, by name (one per loaded table in this process).
_ACTIVE: dict[str, Dispatcher] = {}
_OP_DEFINED = False


def _define_op() -> None:
    """``matprobe::linear(x, w, bias, spec, table) -> Tensor``, defined once a process."""
    global _OP_DEFINED
    if _OP_DEFINED:
        return
    import torch

    # The schema is spelled out: this module's annotations are strings that
    # torch.library would have to evaluate without torch in its globals.
    @torch.library.custom_op(
        "matprobe::linear",
        mutates_args=(),
        schema="(Tensor x, Tensor w, Tensor? bias, str spec, str table) -> Tensor",
    )
    def linear_op(
        x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, spec: str, table: str
    ) -> torch.Tensor:
        # A fresh output every call (never an input's alias, as custom ops require).
        return _ACTIVE[table].linear(MatmulSpec.parse(spec), x, w, bias)

    @linear_op.register_fake
    def _(
        x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, spec: str, table: str
    ) -> torch.Tensor:
        parsed = MatmulSpec.parse(spec)
        n = w.shape[0] if parsed.tB else w.shape[1]
        return x.new_empty((x.shape[0], n))

    _OP_DEFINED = True


def register_custom_op(dispatcher: Dispatcher, name: str = "default") -> LinearFn:
    """A :data:`LinearFn` that calls ``torch.ops.matprobe.linear`` with this
    dispatcher's kernels: what a ``torch.compile``d model calls for its weights."""
    import torch

    _define_op()
    _ACTIVE[name] = dispatcher

    def linear(
        spec: MatmulSpec, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        y: torch.Tensor = torch.ops.matprobe.linear(x, w, bias, spec.key(), name)
        return y

    return linear


def table_linear(table: DispatchTable | str, device: DeviceInfo) -> LinearFn:
    """The eager :data:`LinearFn` of a table (a path is loaded and checked)."""
    dispatcher = _dispatcher(table, device)
    return dispatcher.linear


def custom_op_linear(table: DispatchTable | str, device: DeviceInfo) -> LinearFn:
    """The ``torch.compile``-able :data:`LinearFn` of a table (custom op)."""
    return register_custom_op(_dispatcher(table, device))


def _dispatcher(table: DispatchTable | str, device: DeviceInfo) -> Dispatcher:
    if isinstance(table, str):
        return Dispatcher.load(table, device)
    registry = registry_with_plugins(plugins=table.plugins)
    return Dispatcher.checked(table, device, registry)
