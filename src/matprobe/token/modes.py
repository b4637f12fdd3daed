"""The ways a token can run, side by side in one process.

A mode is a choice of weight-matmul kernels (torch's, the dispatch table's, the
table's as ``torch.library`` custom ops, or none at all) and of how the step
runs (eager, or compiled by ``torch.compile`` in one of its modes). Every mode
that computes has a matmul-less twin (``…-none``) that runs the same way with
the weight matmuls left out: the difference of the two is the mode's matmul
share of the token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from matprobe.errors import MatprobeError

#: Kernels of the weight matmuls: torch ops (cuBLAS), the dispatch table's kernels
#: called eagerly, the same as custom ops (for torch.compile), or left out.
KERNELS: tuple[str, ...] = ("torch", "table", "table-op", "none")

#: torch.compile's modes as the token names them.
COMPILE_DEFAULT = "default"
COMPILE_MAX_AUTOTUNE = "max-autotune-no-cudagraphs"


@dataclass(frozen=True)
class Mode:
    name: str
    kernels: str  # one of KERNELS
    compile: str | None  # None: eager; else a torch.compile mode
    rest: str | None  # the matmul-less twin its matmul share is measured against
    description: str

    @property
    def validated(self) -> bool:
        """A mode that leaves the matmuls out computes nothing to check."""
        return self.kernels != "none"

    @property
    def needs_table(self) -> bool:
        return self.kernels in ("table", "table-op")


BASELINE = "eager"

MODES: dict[str, Mode] = {
    mode.name: mode
    for mode in (
        Mode(
            "eager",
            "torch",
            None,
            "eager-none",
            "eager PyTorch, weight matmuls by torch ops (cuBLAS on a GPU)",
        ),
        Mode("eager-none", "none", None, None, "eager, weight matmuls left out"),
        Mode("eager+table", "table", None, "eager-none", "eager, the dispatch table's kernels"),
        Mode(
            "compile",
            "torch",
            COMPILE_DEFAULT,
            "compile-none",
            "torch.compile, weight matmuls by torch ops",
        ),
        Mode("compile-none", "none", COMPILE_DEFAULT, None, "torch.compile, matmuls left out"),
        Mode(
            "compile-max-autotune",
            "torch",
            COMPILE_MAX_AUTOTUNE,
            "compile-max-autotune-none",
            "torch.compile max-autotune-no-cudagraphs (Triton templates vs cuBLAS)",
        ),
        Mode(
            "compile-max-autotune-none",
            "none",
            COMPILE_MAX_AUTOTUNE,
            None,
            "torch.compile max-autotune-no-cudagraphs, matmuls left out",
        ),
        Mode(
            "compile+table",
            "table-op",
            COMPILE_DEFAULT,
            "compile-none",
            "torch.compile, the table's kernels as custom ops",
        ),
    )
}

#: On a GPU every mode runs unless asked otherwise.
DEFAULT_CUDA_MODES: tuple[str, ...] = tuple(MODES)
#: On the CPU Inductor compiles C++ for tens of seconds a mode: eager modes only,
#: unless compiled ones are named.
DEFAULT_CPU_MODES: tuple[str, ...] = ("eager", "eager-none", "eager+table")


@dataclass(frozen=True)
class ModeSelection:
    modes: tuple[Mode, ...]  # to run, the baseline first
    skipped: tuple[tuple[str, str], ...]  # (mode, why)
    notes: tuple[str, ...]


def parse_modes(text: str) -> tuple[str, ...]:
    """``"eager,compile"`` → the names, checked (a usage error names the known ones)."""
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not names:
        raise MatprobeError("--modes names no mode")
    unknown = [name for name in names if name not in MODES]
    if unknown:
        raise MatprobeError(
            f"unknown mode{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(MODES)}"
        )
    return names


def select_modes(
    names: Sequence[str] | None, *, device_kind: str, have_table: bool
) -> ModeSelection:
    """The modes to run: ``names`` (default: the device's), the baseline always
    first (every other mode is validated and compared against it), those that need
    a dispatch table skipped with the reason when there is none."""
    if names is None:
        names = DEFAULT_CUDA_MODES if device_kind == "cuda" else DEFAULT_CPU_MODES
    names = tuple(dict.fromkeys(names))
    notes: list[str] = []
    if BASELINE not in names:
        notes.append(f"{BASELINE} added: the baseline every mode is validated and compared against")
    ordered = (BASELINE, *(name for name in names if name != BASELINE))
    run: list[Mode] = []
    skipped: list[tuple[str, str]] = []
    for name in ordered:
        mode = MODES[name]
        if mode.needs_table and not have_table:
            skipped.append((name, "needs a dispatch table (--table FILE)"))
            continue
        run.append(mode)
    names_run = {mode.name for mode in run}
    for mode in run:
        if mode.rest is not None and mode.rest not in names_run:
            notes.append(f"{mode.name}: no matmul share without {mode.rest} in the modes")
    return ModeSelection(tuple(run), tuple(skipped), tuple(notes))
