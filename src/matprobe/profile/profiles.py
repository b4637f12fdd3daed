"""Turn a profile — JSONL events or an analyzer text summary — into matmul specs.

Both forms end up as :class:`MatmulSpec` objects whose provenance carries the
production backends' timings, so everything downstream (the shapes table, the
harness, impact estimates) works the same whatever the input was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from matprobe.errors import ProfileError, SpecError
from matprobe.profile.events import ProfileScan
from matprobe.profile.jsonl import open_text, scan
from matprobe.profile.models import ATTENTION_DTYPE_Q8_0
from matprobe.profile.textsummary import read_summary
from matprobe.safetext import term_safe
from matprobe.spec import BackendTiming, MatmulSpec, Provenance, merge_specs
from matprobe.stats import Stats

BUILTIN_NAME = "qwen2.5-0.5b-decode"
#: The built-in profile was recorded with fp16 weights (metallic on an M1).
BUILTIN_DTYPE = "f16"


def builtin_profile_path() -> Path:
    """The Qwen2.5-0.5B decode profile shipped as package data."""
    ref = resources.files("matprobe") / "data" / f"{BUILTIN_NAME}.txt"
    return Path(str(ref))


@dataclass
class LoadedSpecs:
    """Specs of one profile, largest production time first, with read warnings."""

    source: str
    specs: list[MatmulSpec]
    warnings: list[str] = field(default_factory=list)


def detect_format(path: str | Path) -> str:
    """``"jsonl"`` when the first non-blank line is a JSON object, else ``"text"``."""
    with open_text(path) as handle:
        try:
            for line in handle:
                if line.strip():
                    return "jsonl" if line.lstrip().startswith("{") else "text"
        except (OSError, EOFError) as exc:
            raise ProfileError(f"cannot read {path}: {exc}") from None
    raise ProfileError(f"{path} is empty")


def specs_from_scan(result: ProfileScan) -> tuple[list[MatmulSpec], list[str]]:
    """One spec per shape key of a JSONL scan, with per-backend timings."""
    specs: list[MatmulSpec] = []
    warnings: list[str] = []
    source = Path(result.path).name
    for key, backends in result.matmul_shapes.items():
        try:
            spec = MatmulSpec.parse(key)
        except SpecError as exc:
            warnings.append(f"shape {key!r} skipped: {exc}")
            continue
        timings = tuple(
            BackendTiming(backend, Stats.from_us(samples)) for backend, samples in backends.items()
        )
        specs.append(spec.with_provenance(Provenance(backends=timings, source=source)))
    return specs, warnings


def _by_total_time(spec: MatmulSpec) -> tuple[float, str]:
    prov = spec.provenance
    return (-(prov.total_ms if prov else 0.0), spec.key())


def _dtype_for(spec: MatmulSpec, default: str) -> str:
    """The default dtype, except that Q8_0 quantizes weights only: attention (a batched
    matmul over the KV cache, ``loader=dense``) stays in fp16."""
    if default == "q8_0" and (spec.kind == "matmul_alpha_beta" or spec.loader == "dense"):
        return ATTENTION_DTYPE_Q8_0
    return default


def _fused_layout(spec: MatmulSpec) -> MatmulSpec:
    if not spec.fused_parts:
        return spec
    return replace(
        spec,
        tA=False if spec.tA is None else spec.tA,
        tB=True if spec.tB is None else spec.tB,
    )


def inferred_dtype(specs: Sequence[MatmulSpec]) -> tuple[str, str]:
    """The dtype of a profile that names none, and the line that says how it was
    decided: Q8_0 where its Q8_0 loaders or kernels say so (``loader=q8nk_split``,
    backends like ``gemv_q8_fused2``), else f16, as the built-in profile."""
    signs = sorted(
        {s.loader for s in specs if s.loader and "q8" in s.loader.lower()}
        | {
            t.backend
            for s in specs
            if s.provenance
            for t in s.provenance.backends
            if "q8" in t.backend.lower()
        }
    )
    if signs:
        named = ", ".join(term_safe(name) for name in signs[:3])
        return "q8_0", (
            f"no dtype in the profile: Q8_0 weights taken from its Q8_0 loaders and "
            f"kernels ({named}); --dtype chooses another"
        )
    return "f16", "no dtype in the profile: f16 taken (as the built-in profile); --dtype chooses"


def load_specs(path: str | Path | None = None, default_dtype: str | None = None) -> LoadedSpecs:
    """Read the matmul specs of a profile (the built-in one when ``path`` is None).

    ``default_dtype`` fills in the dtype of specs whose profile does not say; without
    it the profile's own signs decide (:func:`inferred_dtype`, said in a warning):
    a run never records a plan of "no dtype" pairs.
    """
    source = None
    if path is None:
        path = builtin_profile_path()
        source = f"built-in profile {BUILTIN_NAME}"
        default_dtype = default_dtype or BUILTIN_DTYPE
    path = Path(path)
    warnings: list[str] = []
    if detect_format(path) == "jsonl":
        result = scan(path)
        specs, warnings = specs_from_scan(result)
        if result.problems.total:
            warnings.append(
                f"{path.name}: {result.problems.total} lines skipped as unreadable "
                f"(`matprobe analyze {path}` lists them)"
            )
    else:
        read = read_summary(path)
        specs = read.specs
        warnings = [f"{path.name}: {w}" for w in read.warnings]
    dtype = default_dtype
    if dtype is None and any(not s.dtype for s in specs):
        dtype, said = inferred_dtype(specs)
        warnings.append(f"{path.name}: {said}")
    if dtype is not None:
        specs = [s if s.dtype else s.with_dtype(_dtype_for(s, dtype)) for s in specs]
    fused = [s for s in specs if s.fused_parts and (s.tA is None or s.tB is None)]
    if fused:
        warnings.append(
            f"{len(fused)} fused spec(s) leave the layout unknown (tA=? tB=?): taken as "
            "x times the parts' weights stacked [n0+n1(+…), k] (tA=0, tB=1), as a fused "
            "kernel reads them"
        )
        specs = [_fused_layout(s) for s in specs]
    specs = sorted(merge_specs(specs), key=_by_total_time)
    return LoadedSpecs(source=source or str(path), specs=specs, warnings=warnings)
