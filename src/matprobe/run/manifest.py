"""The manifest: a TOML file that selects and configures variants.

::

    plugins = ["mykernels"]          # the user's family modules (each exposes FAMILIES)

    [baseline]                       # op kind → family name or variant id
    matmul = "torch.matmul"

    [families."triton.gemv_nt"]
    enabled = true                   # false: the family does not run
    grid = { bn = [64, 128], bk = [128] }   # override parameter values
    exclude = ["triton.gemv_nt/bn128_bk128_w4"]

A default manifest ships in the package (``data/manifest.toml``). Any key the
schema does not know is an error naming the key, so a typo never silently
runs the default grid.

``plugins`` add the user's own families to the registry before the rest is
read, so ``families`` and ``baseline`` may name them:
:func:`load_manifest_and_registry` reads the file, builds the registry with
its plugins (and the command line's) and then checks the tables against it.
"""

from __future__ import annotations

import fnmatch
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from matprobe.errors import MatprobeError
from matprobe.measure.variants import (
    SHIPPED_FACTORY,
    Registry,
    Variant,
    VariantLookupError,
)
from matprobe.run.plugin_process import described_registry
from matprobe.spec import OP_KINDS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_FAMILY_KEYS = {"enabled", "grid", "exclude"}
_TOP_KEYS = ("families", "baseline", "plugins")


class ManifestError(MatprobeError):
    """A manifest that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class FamilyConfig:
    enabled: bool = True
    grid: Mapping[str, tuple[Any, ...]] | None = None
    exclude: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Manifest:
    source: str
    families: Mapping[str, FamilyConfig] = field(default_factory=dict)
    baselines: Mapping[str, str] = field(default_factory=dict)
    #: the user's family modules the manifest asks for (``plugins = [...]``)
    plugins: tuple[str, ...] = ()

    def variants(self, registry: Registry, patterns: Sequence[str] | None = None) -> list[Variant]:
        """Every enabled variant, optionally only those whose id or family name
        matches one of the glob ``patterns``. One rule for a family the manifest turns
        off (:data:`OFF_FAMILY_RULE`): a pattern reaches it only when the pattern
        matches no enabled family — ``--variants torch.compile``, ``'mlx*'`` with mlx
        off, never ``'*'`` or ``'mani.*'`` where ``mani.exact`` is on."""
        kept: list[tuple[bool, Variant]] = []  # (enabled, variant), in registry order
        for family in registry.families():
            config = self.families.get(family.name, FamilyConfig())
            for variant in family.variants(config.grid):
                if variant.id not in config.exclude:
                    kept.append((config.enabled, variant))
        if not patterns:
            return [v for on, v in kept if on]
        reaching_off = [p for p in patterns if not any(on and _matches(v, p) for on, v in kept)]
        return [
            v for on, v in kept if any(_matches(v, p) for p in (patterns if on else reaching_off))
        ]

    def baseline_for(self, op_kind: str, registry: Registry) -> str | None:
        """Family name or variant id of the baseline of an op (manifest first, then
        the family flagged ``baseline`` by its author)."""
        if op_kind in self.baselines:
            return self.baselines[op_kind]
        for family in registry.families():
            if family.baseline and op_kind in family.ops:
                return family.name
        return None


#: How ``--variants`` reaches a family the manifest turns off, said in messages.
OFF_FAMILY_RULE = (
    "a family the manifest turns off runs for a --variants pattern that matches no "
    "enabled family ('torch.compile', 'mlx*' with mlx off; never '*')"
)


def _matches(variant: Variant, pattern: str) -> bool:
    return fnmatch.fnmatchcase(variant.id, pattern) or fnmatch.fnmatchcase(
        variant.family.name, pattern
    )


def _grid_value_problem(value: Any, defaults: Sequence[Any]) -> str | None:
    """Checked when the manifest is read, not when a kernel is built: a value of
    another type than the family's own grid values, a negative size, or a string
    with control characters (it would become part of a variant id shown in
    reports) is refused."""
    kinds = {type(v) for v in defaults}
    if type(value) not in kinds and not (type(value) is int and float in kinds):
        wanted = " or ".join(sorted(k.__name__ for k in kinds))
        return f"expected {wanted}, like the default grid {list(defaults)}"
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        return "must not be negative"
    if isinstance(value, str) and (not value or any(ord(c) < 32 or ord(c) == 127 for c in value)):
        return "must be a non-empty name without control characters"
    return None


def _fail(source: str, key: str, problem: str) -> ManifestError:
    return ManifestError(f"{source}: {key}: {problem}")


def manifest_plugins(data: Mapping[str, Any], source: str) -> tuple[str, ...]:
    """The ``plugins`` list of a parsed manifest: module names, checked."""
    raw = data.get("plugins", [])
    if not isinstance(raw, list) or not all(isinstance(v, str) and v for v in raw):
        raise _fail(source, "plugins", 'must be a list of module names (["mykernels"])')
    return tuple(dict.fromkeys(raw))


def parse_manifest(data: Mapping[str, Any], source: str, registry: Registry) -> Manifest:
    """Check a manifest's tables against ``registry`` (which must already hold the
    manifest's plugins' families: see :func:`load_manifest_and_registry`)."""
    unknown = set(data) - set(_TOP_KEYS)
    if unknown:
        raise _fail(source, sorted(unknown)[0], f"unknown key (known: {', '.join(_TOP_KEYS)})")
    plugins = manifest_plugins(data, source)
    families: dict[str, FamilyConfig] = {}
    raw_families = data.get("families", {})
    if not isinstance(raw_families, dict):
        raise _fail(source, "families", "must be a table")
    for name, raw in raw_families.items():
        where = f"families.{name}"
        try:
            family = registry.family(name)
        except VariantLookupError as exc:
            raise _fail(source, where, str(exc)) from None
        if not isinstance(raw, dict):
            raise _fail(source, where, "must be a table")
        bad = set(raw) - _FAMILY_KEYS
        if bad:
            key = sorted(bad)[0]
            raise _fail(
                source, f"{where}.{key}", f"unknown key (known: {', '.join(sorted(_FAMILY_KEYS))})"
            )
        enabled = raw.get("enabled", True)
        if not isinstance(enabled, bool):
            raise _fail(source, f"{where}.enabled", "must be true or false")
        grid = None
        if "grid" in raw:
            if not isinstance(raw["grid"], dict):
                raise _fail(source, f"{where}.grid", "must be a table of lists")
            grid = {}
            for param, values in raw["grid"].items():
                if param not in family.grid:
                    known = ", ".join(family.grid) or "none"
                    raise _fail(
                        source,
                        f"{where}.grid.{param}",
                        f"unknown parameter of {name} (known: {known})",
                    )
                values = values if isinstance(values, list) else [values]
                if not values:
                    raise _fail(source, f"{where}.grid.{param}", "empty list")
                for value in values:
                    if problem := _grid_value_problem(value, family.grid[param]):
                        raise _fail(source, f"{where}.grid.{param}", f"{value!r}: {problem}")
                grid[param] = tuple(values)
        exclude = raw.get("exclude", [])
        if not isinstance(exclude, list) or not all(isinstance(v, str) for v in exclude):
            raise _fail(source, f"{where}.exclude", "must be a list of variant ids")
        families[name] = FamilyConfig(enabled, grid, frozenset(exclude))
    baselines: dict[str, str] = {}
    raw_baselines = data.get("baseline", {})
    if not isinstance(raw_baselines, dict):
        raise _fail(source, "baseline", "must be a table")
    for op, target in raw_baselines.items():
        if op not in OP_KINDS:
            raise _fail(source, f"baseline.{op}", f"unknown op (known: {', '.join(OP_KINDS)})")
        if not isinstance(target, str):
            raise _fail(source, f"baseline.{op}", "must be a family name or variant id")
        try:
            if "/" in target:
                registry.variant(target)
            else:
                registry.family(target)
        except VariantLookupError as exc:
            raise _fail(source, f"baseline.{op}", str(exc)) from None
        baselines[op] = target
    return Manifest(source, families, baselines, plugins)


def read_manifest(path: str | Path | None) -> tuple[dict[str, Any], str]:
    """A manifest file's TOML data and its name for messages (the shipped default
    when ``path`` is None); nothing checked yet beyond the TOML syntax."""
    if path is None:
        ref = resources.files("matprobe") / "data" / "manifest.toml"
        text, source = ref.read_text(encoding="utf-8"), "default manifest"
    else:
        try:
            text, source = Path(path).read_text(encoding="utf-8"), str(path)
        except OSError as exc:
            raise ManifestError(f"cannot read manifest {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:  # TOML is UTF-8 by definition
            raise ManifestError(
                f"manifest {path} is not UTF-8 text (byte {exc.start}: {exc.reason})"
            ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{source}: not valid TOML: {exc}") from None
    return data, source


def load_manifest(path: str | Path | None, registry: Registry) -> Manifest:
    """Read a manifest file, or the shipped default when ``path`` is None, and
    check it against ``registry`` (its plugins are not loaded: see
    :func:`load_manifest_and_registry`)."""
    data, source = read_manifest(path)
    return parse_manifest(data, source, registry)


def load_manifest_and_registry(
    path: str | Path | None,
    plugins: Sequence[str] = (),
    factory: str = SHIPPED_FACTORY,
) -> tuple[Manifest, Registry]:
    """The manifest and the registry it selects from: the factory's families, then
    those of ``plugins`` (the command line's) and of the manifest's ``plugins``."""
    data, source = read_manifest(path)
    wanted = [*plugins, *manifest_plugins(data, source)]
    registry = described_registry(factory, wanted)  # plugins imported in a child only
    return parse_manifest(data, source, registry), registry
