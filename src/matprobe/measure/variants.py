"""Kernel variants: families registered by a decorator, expanded over parameter grids.

A *family* is one kernel implementation with knobs (``triton.gemv_nt``); a
*variant* is the family at one point of its grid (``triton.gemv_nt/bn64_bk128_w4``).
The decorator only builds a frozen :class:`VariantFamily`; nothing is
registered behind the user's back — a :class:`Registry` is filled explicitly,
so tests can build their own registry of fake and cheating kernels. Which
families matprobe ships is the families' own business
(``matprobe.kernels.catalogue``); this module never imports one. A run names
its registry by a factory string (:data:`SHIPPED_FACTORY`) resolved where it is
needed — in the worker processes too — plus the user's *plugins*: modules
exposing ``FAMILIES`` as the shipped family modules do
(:func:`registry_with_plugins`).

Capability checks are pure predicates returning ``None`` (supported) or the
reason it is not, so the plan can say *why* a pair is skipped.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import itertools
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from matprobe.errors import MatprobeError
from matprobe.measure.fingerprint import module_fingerprint
from matprobe.measure.validate import ACTIVATION_QUANTS, PROLOGUES
from matprobe.spec import Q8_0_BLOCK, MatmulSpec

if TYPE_CHECKING:
    from matprobe.measure.device import DeviceInfo
    from matprobe.measure.inputs import MatmulInputs

#: The registry of the families matprobe ships, as a factory string
#: (``module:function``): resolved by :func:`resolve_factory`, never imported here.
SHIPPED_FACTORY = "matprobe.kernels.catalogue:shipped_registry"

#: ``VariantFamily.origin`` of the families matprobe ships.
SHIPPED_ORIGIN = "matprobe"


class KernelFn(Protocol):
    """A built kernel: computes the spec's op from ``inputs`` into ``out``.

    ``out`` is ``[batch, m, n]`` in the spec's dtype; a kernel must write every
    element (the harness fills it with fresh values first) and must enqueue its work on
    the current stream (graph capture and timing rely on it).
    """

    def __call__(self, inputs: MatmulInputs, out: Any) -> None: ...


Builder = Callable[[MatmulSpec, Mapping[str, Any], "DeviceInfo"], KernelFn]
Supports = Callable[[MatmulSpec, Mapping[str, Any], "DeviceInfo"], "str | None"]


class VariantLookupError(MatprobeError, LookupError):
    """A family or variant name that is not registered; the message names the known ones."""


#: ``variant_family(early_launch_param=...)`` left out: a ``pdl`` grid parameter means it.
_INFER = "\0infer"


def _always(_spec: MatmulSpec, _params: Mapping[str, Any], _device: DeviceInfo) -> str | None:
    return None


def _source_text(obj: Any) -> str:
    """Source of a function, a Triton JIT function (``.fn``/``.src``), a class, or a
    string that already is source text (a kernel module read without importing it)."""
    if isinstance(obj, str):
        return obj
    src = getattr(obj, "src", None)
    if isinstance(src, str):
        return src
    target = getattr(obj, "fn", obj)
    try:
        return inspect.getsource(target)
    except (OSError, TypeError):
        # Not repr(): a function's repr holds its address, which differs per process.
        name = getattr(target, "__qualname__", None)
        return f"{getattr(target, '__module__', '')}.{name}" if name else repr(target)


def _family_fingerprint(build: Builder, supports: Supports, sources: Sequence[Any]) -> str:
    """The builder's whole module with the package modules it imports (see
    :mod:`matprobe.measure.fingerprint`), the predicate's source (it may live
    elsewhere) and the extra ``sources``."""
    module = getattr(build, "__module__", None)
    whole = module_fingerprint(module) if isinstance(module, str) else ""
    parts = [whole or _source_text(build), _source_text(supports)]
    parts += (_source_text(obj) for obj in sources)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


@dataclass(frozen=True)
class VariantFamily:
    name: str
    ops: frozenset[str]  # spec kinds: matmul, matmul_bias_add, matmul_alpha_beta, matmul_swiglu
    devices: frozenset[str]  # "cuda", "cpu"
    build: Builder
    supports: Supports = _always
    grid: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    dtypes: frozenset[str] = frozenset({"f32", "f16", "bf16"})
    baseline: bool = False
    #: a peer's code (the vendor library, torch.compile): reported, never "ours"
    peer: bool = False
    requires: tuple[str, ...] = ()  # importable modules the family needs
    #: a Triton family on the CPU runs in the interpreter: validated, never timed as speed
    interpreted_on_cpu: bool = False
    description: str = ""
    source_fingerprint: str = ""
    #: the grid parameter that, when truthy, makes a variant launch early
    #: (programmatic dependent launch): see :attr:`Variant.launches_early`
    early_launch_param: str | None = None
    #: who wrote the family: "matprobe", or the plugin module that brought it
    origin: str = SHIPPED_ORIGIN
    #: the kernels quantize the activations on the fly, as this key of
    #: :data:`~matprobe.measure.validate.ACTIVATION_QUANTS` says (``"int8_block32"``:
    #: llama.cpp's int8 x per 32-block); its kernels are judged against a reference
    #: that applies exactly that rounding to x, within the plain bound
    activation_quant: str | None = None
    #: work the kernels do on x before the matmul (``validate.PROLOGUES``): a spec
    #: asking for one the family lacks is unsupported, never run as a plain matmul
    prologues: frozenset[str] = frozenset()

    @property
    def is_plugin(self) -> bool:
        """The user's own family (from a plugin module), not one matprobe ships."""
        return self.origin != SHIPPED_ORIGIN

    def variants(self, grid: Mapping[str, Sequence[Any]] | None = None) -> list[Variant]:
        """One variant per point of the grid (the family's own unless overridden)."""
        grid = dict(self.grid if grid is None else grid)
        unknown = set(grid) - set(self.grid)
        if unknown:
            raise MatprobeError(
                f"{self.name}: unknown grid parameter(s) {', '.join(sorted(unknown))}; "
                f"known: {', '.join(self.grid) or '(none)'}"
            )
        names = list(self.grid)  # keep the family's parameter order in ids
        values = [tuple(grid.get(name, self.grid[name])) for name in names]
        return [
            Variant(self, tuple(zip(names, point, strict=True)))
            for point in itertools.product(*values)
        ]


@dataclass(frozen=True)
class Variant:
    family: VariantFamily
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def tag(self) -> str:
        return "_".join(f"{k}{v}" for k, v in self.params) or "default"

    @property
    def id(self) -> str:
        return f"{self.family.name}/{self.tag}"

    @property
    def param_dict(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def launches_early(self) -> bool:
        """Launched early (programmatic dependent launch: a truthy value of the
        family's :attr:`~VariantFamily.early_launch_param`, ``pdl`` in the shipped
        families): it may start before the kernel that writes its input has
        finished, so the harness checks it in a chain of dependent calls."""
        param = self.family.early_launch_param
        return param is not None and bool(self.param_dict.get(param))

    @property
    def fingerprint(self) -> str:
        """Changes when the family's source or this variant's parameters change."""
        text = self.family.source_fingerprint + json.dumps(self.params, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def unsupported_reason(self, spec: MatmulSpec, device: DeviceInfo) -> str | None:
        """None when this variant can run ``spec`` on ``device``, else why not."""
        fam = self.family
        if device.kind not in fam.devices:
            return f"runs on {'/'.join(sorted(fam.devices))}, not {device.kind}"
        if spec.kind not in fam.ops:
            return f"op {spec.kind} not implemented (does {', '.join(sorted(fam.ops))})"
        if not spec.is_complete:
            return "the profile leaves a dimension unknown (?)"
        zero = [name for name in ("batch", "m", "n", "k") if getattr(spec, name) == 0]
        if zero or spec.n_total == 0:
            dims = ", ".join(f"{z}=0" for z in zero or ["n"])
            return f"a zero dimension ({dims}): nothing to compute"
        if spec.tA is None or spec.tB is None:
            return "the profile leaves the layout (tA/tB) unknown"
        if spec.dtype is None:
            return "no dtype (pass --dtype)"
        if spec.dtype not in fam.dtypes:
            return f"dtype {spec.dtype} not supported (does {', '.join(sorted(fam.dtypes))})"
        for module in fam.requires:
            if importlib.util.find_spec(module) is None:
                return f"needs {module}, which is not installed"
        if spec.rmsnorm is not None and "rmsnorm" not in fam.prologues:
            return "no RMSNorm prologue (rmsnorm=…): the family multiplies x as given"
        # Checked for every family: the op is only defined for these specs.
        for problem in (spec.swiglu_problem(), spec.norm_problem()):
            if problem is not None:
                return problem
        if spec.dtype == "q8_0" and (spec.k or 0) % Q8_0_BLOCK:
            return f"Q8_0 stores K in blocks of {Q8_0_BLOCK}: k={spec.k} is not a multiple"
        return fam.supports(spec, self.param_dict, device)

    def build(self, spec: MatmulSpec, device: DeviceInfo) -> KernelFn:
        return self.family.build(spec, self.param_dict, device)


def _early_launch(
    name: str,
    grid: Mapping[str, Sequence[Any]],
    early_launch_param: str | None,
    activation_quant: str | None,
    prologues: frozenset[str],
) -> str | None:
    """The family's early-launch parameter (inferred: ``pdl`` when the grid has
    one); a declaration naming no grid parameter, a rounding of x or a prologue the
    harness cannot apply is an error when the family is defined."""
    if activation_quant is not None and activation_quant not in ACTIVATION_QUANTS:
        raise MatprobeError(
            f"{name}: activation_quant {activation_quant!r} is not one the harness "
            f"knows how to apply (known: {', '.join(ACTIVATION_QUANTS)})"
        )
    if unknown := sorted(prologues - set(PROLOGUES)):
        raise MatprobeError(
            f"{name}: unknown prologue(s) {', '.join(unknown)} (known: {', '.join(PROLOGUES)})"
        )
    if prologues and activation_quant is not None:
        # The declared rounding is applied to x as given; where it falls in a
        # prologue (before or after the norm) is not modelled, so not judged.
        raise MatprobeError(f"{name}: a family with a prologue cannot declare activation_quant")
    if early_launch_param == _INFER:
        return "pdl" if "pdl" in grid else None
    if early_launch_param is not None and early_launch_param not in grid:
        raise MatprobeError(
            f"{name}: early_launch_param {early_launch_param!r} is not a grid "
            f"parameter (grid: {', '.join(grid) or 'none'})"
        )
    return early_launch_param


def variant_family(
    *,
    name: str,
    ops: Iterable[str],
    devices: Iterable[str] = ("cuda", "cpu"),
    supports: Supports = _always,
    grid: Mapping[str, Sequence[Any]] | None = None,
    dtypes: Iterable[str] = ("f32", "f16", "bf16"),
    baseline: bool = False,
    peer: bool = False,
    requires: Iterable[str] = (),
    interpreted_on_cpu: bool = False,
    sources: Sequence[Any] = (),
    description: str = "",
    early_launch_param: str | None = _INFER,
    activation_quant: str | None = None,
    prologues: Iterable[str] = (),
) -> Callable[[Builder], VariantFamily]:
    """Decorate a builder ``(spec, params, device) -> KernelFn`` into a family.

    ``early_launch_param`` names the grid parameter that, when truthy, launches
    the kernel early (programmatic dependent launch); such variants are checked
    in a chain of dependent calls and the report explains their figures. Left
    out, a grid parameter named ``pdl`` is taken to mean it (the safe reading:
    an extra check, never a missing one); ``None`` says no parameter does.

    The family's fingerprint hashes the whole module that defines ``build`` and
    every module of its package directory that it imports (found by parsing,
    transitively, function-local imports included), so editing a wrapper's
    constant, a shared helper or a kernel re-runs exactly the families that use
    it. ``sources`` are further objects or source strings to hash: what the
    parse cannot see (a file read by path and never imported, a helper outside
    the package directory).

    ``activation_quant`` declares that the kernels quantize x on the fly (a key of
    :data:`~matprobe.measure.validate.ACTIVATION_QUANTS`): its calls are then judged
    against a reference that applies exactly that rounding to x, within the plain
    bound — no more error is allowed, and the report tags its rows.

    ``prologues`` names the work the kernels do on x before the matmul (a key of
    :data:`PROLOGUES`: ``"rmsnorm"``); specs asking for one the family does not
    name are unsupported.
    """

    grid_params = {key: tuple(values) for key, values in (grid or {}).items()}
    prologue_set = frozenset(prologues)
    early_launch_param = _early_launch(
        name, grid_params, early_launch_param, activation_quant, prologue_set
    )

    def wrap(build: Builder) -> VariantFamily:
        @functools.wraps(build)
        def checked_build(spec: MatmulSpec, params: Mapping[str, Any], device: DeviceInfo) -> Any:
            # Every family's builder refuses what its supports check refuses, with
            # the same reason: checked here once, never re-written per family.
            reason = supports(spec, params, device)
            if reason is not None:
                raise MatprobeError(f"{name}: {reason}")
            return build(spec, params, device)

        return VariantFamily(
            name=name,
            ops=frozenset(ops),
            devices=frozenset(devices),
            build=checked_build,
            supports=supports,
            grid=grid_params,
            dtypes=frozenset(dtypes),
            baseline=baseline,
            peer=peer,
            requires=tuple(requires),
            interpreted_on_cpu=interpreted_on_cpu,
            description=description or (inspect.getdoc(build) or "").split("\n")[0],
            source_fingerprint=_family_fingerprint(build, supports, sources),
            early_launch_param=early_launch_param,
            activation_quant=activation_quant,
            prologues=prologue_set,
        )

    return wrap


def _unknown(kind: str, name: str, known: Iterable[str]) -> VariantLookupError:
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return VariantLookupError(
        f"unknown {kind} {name!r}{hint} (known: {', '.join(known) or 'none'})"
    )


class Registry:
    """The families a run may use, by name. Filled explicitly, never by import side effects."""

    def __init__(self, families: Iterable[VariantFamily] = ()) -> None:
        self._families: dict[str, VariantFamily] = {}
        for family in families:
            self.add(family)

    def add(self, family: VariantFamily) -> VariantFamily:
        if family.name in self._families:
            raise MatprobeError(f"variant family {family.name!r} registered twice")
        self._families[family.name] = family
        return family

    def family(self, name: str) -> VariantFamily:
        try:
            return self._families[name]
        except KeyError:
            raise _unknown("variant family", name, self._families) from None

    def families(self) -> list[VariantFamily]:
        return list(self._families.values())

    def names(self) -> list[str]:
        return list(self._families)

    def __contains__(self, name: object) -> bool:
        return name in self._families

    def variant(self, variant_id: str) -> Variant:
        """Look a variant up by id (``family/tag``) among the families' default grids."""
        family_name = variant_id.split("/", 1)[0]
        family = self.family(family_name)
        for variant in family.variants():
            if variant.id == variant_id:
                return variant
        raise _unknown("variant", variant_id, (v.id for v in family.variants()))


def import_ref(ref: str, default: str = "") -> Any:
    """``"package.module:name"`` → that object of the module (``default`` when the
    reference names none)."""
    module_name, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module_name), attr or default)


def resolve_factory(factory: str) -> Registry:
    """``"package.module:function"`` → the Registry that function returns (or the
    Registry object the module holds under that name; ``registry`` by default)."""
    found = import_ref(factory, "registry")
    registry = found() if callable(found) else found
    if not isinstance(registry, Registry):
        raise MatprobeError(
            f"registry factory {factory!r} gave a {type(registry).__name__}, not a Registry"
        )
    return registry


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _importable_from_cwd() -> None:
    """A plugin may live in the current directory (a kernel engineer's own repo),
    as ``python -m`` would find it."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    importlib.invalidate_caches()  # a module written since the last import looked


def plugin_families(module_name: str) -> tuple[VariantFamily, ...]:
    """The families a plugin module exposes as ``FAMILIES`` (as matprobe's own
    family modules do), each marked as that module's (``origin``). Every problem
    is one :class:`MatprobeError` line that names the module."""
    where = f"plugin {module_name!r}"
    hint = ""
    if module_name.endswith(".py"):  # a file name given for the module's
        hint = f"; did you mean {module_name[:-3].replace('/', '.')!r}?"
    if not all(part.isidentifier() for part in module_name.split(".")):
        raise MatprobeError(
            f"{where}: not a module name (a dotted Python name importable "
            f"from the current directory or sys.path){hint}"
        )
    _importable_from_cwd()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (
            module_name == exc.name or module_name.startswith(exc.name + ".")
        ):
            raise MatprobeError(
                f"{where}: no module named {module_name!r} in the current "
                f"directory ({os.getcwd()}) or on sys.path{hint}"
            ) from None
        raise MatprobeError(f"{where}: cannot import: {_first_line(exc)}") from None
    except Exception as exc:  # anything a user's module may raise on import
        raise MatprobeError(f"{where}: cannot import: {_first_line(exc)}") from None
    families = getattr(module, "FAMILIES", None)
    if families is None:
        raise MatprobeError(
            f"{where}: defines no FAMILIES (a tuple of families made with "
            "matprobe.measure.variants.variant_family)"
        )
    if isinstance(families, VariantFamily):
        families = (families,)
    if isinstance(families, (str, bytes)) or not isinstance(families, Iterable):
        raise MatprobeError(
            f"{where}: FAMILIES must be a tuple of VariantFamily, not a {type(families).__name__}"
        )
    found = tuple(families)
    for index, family in enumerate(found):
        if not isinstance(family, VariantFamily):
            raise MatprobeError(
                f"{where}: FAMILIES[{index}] is a {type(family).__name__}, "
                "not a VariantFamily (decorate the builder with "
                "@variant_family)"
            )
    if not found:
        raise MatprobeError(f"{where}: FAMILIES is empty")
    return tuple(replace(family, origin=module_name) for family in found)


def with_plugins(registry: Registry, plugins: Iterable[str], families_of: Any = None) -> Registry:
    """A new registry: ``registry``'s families, then each plugin's (``families_of`` a
    module name: :func:`plugin_families`, or ``run.plugin_process``'s descriptions),
    in order. A family name taken twice is an error that names both."""
    families_of = families_of or plugin_families
    combined = Registry(registry.families())
    for module_name in dict.fromkeys(plugins):  # once each, in the order given
        for family in families_of(module_name):
            if family.name in combined:
                taken = combined.family(family.name).origin
                by = "a family matprobe ships" if taken == SHIPPED_ORIGIN else f"plugin {taken!r}"
                raise MatprobeError(
                    f"plugin {module_name!r}: family {family.name!r} is already "
                    f"registered by {by}; rename it"
                )
            combined.add(family)
    return combined


def registry_with_plugins(factory: str = SHIPPED_FACTORY, plugins: Iterable[str] = ()) -> Registry:
    """The registry of a run: the factory's families plus the plugins'. Built the
    same way in the parent and in every worker process, from the same factory
    string and plugin list, so a variant id means the same family on both sides."""
    return with_plugins(resolve_factory(factory), plugins)
