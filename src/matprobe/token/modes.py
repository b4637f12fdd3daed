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
#: called eagerly, the same as custom ops (for torch.compile), left out, the
#: ``triton.gemv_decode`` kernel one matmul at a time, or the fused step
#: (:meth:`~matprobe.token.step.DecodeStep.forward_fused`: norms, SwiGLU and
#: residual adds folded into that kernel), eagerly or as custom ops, or the fused
#: step with its attention in one kernel too (``layer``: five kernels a layer),
#: those launched with programmatic dependent launch (``layer-pdl``).
KERNELS: tuple[str, ...] = (
    "torch", "table", "table-op", "none", "decode", "fused", "fused-op", "layer", "layer-pdl",
)  # fmt: skip

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

    @property
    def needs_triton(self) -> bool:
        return self.kernels in ("decode", "fused", "fused-op", "layer", "layer-pdl")

    @property
    def needs_pdl(self) -> bool:
        return self.kernels == "layer-pdl"

    @property
    def fused(self) -> bool:
        return self.kernels in ("fused", "fused-op", "layer", "layer-pdl")

    @property
    def peer(self) -> str | None:
        """The dtype of a peer mode (``f16:compile``: the same step in fp16 beside a
        Q8_0 token), None for the token's own."""
        dtype, sep, _ = self.name.partition(PEER_SEP)
        return dtype if sep else None

    @property
    def own(self) -> Mode:
        """This mode as its own token names it (``f16:compile`` → ``compile``)."""
        return MODES[self.name.partition(PEER_SEP)[2]] if self.peer else self


#: Why a ``layer+pdl`` token cannot run where the caller has not said it can.
NO_PDL = "programmatic dependent launch needs a CUDA GPU of compute capability ≥ 9.0"

BASELINE = "eager"
#: ``f16:compile`` names the peer token's compile mode.
PEER_SEP = ":"

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
        Mode(
            "eager+decode",
            "decode",
            None,
            "eager-none",
            "eager, each weight matmul by triton.gemv_decode (nothing folded in)",
        ),
        Mode(
            "fused",
            "fused",
            None,
            "eager-none",
            "eager, fused kernels: RMSNorm prologue, SwiGLU and residual epilogues",
        ),
        Mode(
            "compile+fused",
            "fused-op",
            COMPILE_DEFAULT,
            "compile-none",
            "torch.compile, the fused kernels as custom ops",
        ),
        Mode(
            "layer",
            "layer",
            None,
            "eager-none",
            "five Triton kernels a layer: norm+QKV, attention with RoPE and the KV "
            "append, o_proj+residual, norm+gate/up+SwiGLU, down+residual",
        ),
        Mode(
            "layer+pdl",
            "layer-pdl",
            None,
            "eager-none",
            "the layer mode's kernels, each launched early (programmatic dependent "
            "launch): weights and the KV cache read before waiting on the kernel before",
        ),
    )
}

#: On a GPU every mode runs unless asked otherwise.
DEFAULT_CUDA_MODES: tuple[str, ...] = tuple(MODES)
#: On the CPU Inductor compiles C++ for tens of seconds a mode: eager modes only,
#: unless compiled ones are named.
DEFAULT_CPU_MODES: tuple[str, ...] = ("eager", "eager-none", "eager+table")
#: A Q8_0 token's modes on a GPU: dequantize-then-cuBLAS (the baseline), its own
#: kernels, and its fp16 twin's eager and compiled modes (the peers its targets
#: are set against). Table modes need dense weights; max-autotune adds nothing
#: to dequantize-then-matmul but minutes.
DEFAULT_Q8_CUDA_MODES: tuple[str, ...] = (
    "eager",
    "eager-none",
    "eager+decode",
    "fused",
    "compile",
    "compile-none",
    "compile+fused",
    "layer",
    "layer+pdl",
    "f16:eager",
    "f16:eager-none",
    "f16:compile",
    "f16:compile-none",
)
#: The dtype a Q8_0 token's peers run in.
PEER_DTYPE = "f16"


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
    unknown = [name for name in names if mode_named(name) is None]
    if unknown:
        raise MatprobeError(
            f"unknown mode{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(MODES)}, and {PEER_DTYPE}{PEER_SEP}eager, "
            f"{PEER_DTYPE}{PEER_SEP}compile, … beside a q8_0 token"
        )
    return names


def mode_named(name: str) -> Mode | None:
    """The mode called ``name``: one of :data:`MODES`, or a peer's torch/none mode
    (``f16:compile``); None if there is none."""
    if name in MODES:
        return MODES[name]
    dtype, sep, own = name.partition(PEER_SEP)
    mode = MODES.get(own)
    if not sep or dtype != PEER_DTYPE or mode is None or mode.kernels not in ("torch", "none"):
        return None
    rest = None if mode.rest is None else f"{dtype}{PEER_SEP}{mode.rest}"
    return Mode(name, mode.kernels, mode.compile, rest, f"{dtype} peer: {mode.description}")


def select_modes(
    names: Sequence[str] | None,
    *,
    device_kind: str,
    have_table: bool,
    dtype: str = "f16",
    triton_problem: str | None = None,
    pdl_problem: str | None = NO_PDL,
) -> ModeSelection:
    """The modes to run: ``names`` (default: the device's and dtype's), the baseline
    always first (every other mode is validated and compared against it), a peer
    baseline (``f16:eager``) first of the peers; those that cannot run here
    skipped with the reason (``triton_problem``: why Triton kernels cannot run here,
    None when they can; ``pdl_problem`` the same for launching them early, which
    takes a caller's word, :func:`pdl_problem`)."""
    if names is None:
        if device_kind != "cuda":
            names = DEFAULT_CPU_MODES
        else:
            names = DEFAULT_Q8_CUDA_MODES if dtype == "q8_0" else DEFAULT_CUDA_MODES
    names = tuple(dict.fromkeys(names))
    notes: list[str] = []
    if BASELINE not in names:
        notes.append(f"{BASELINE} added: the baseline every mode is validated and compared against")
    peer_base = f"{PEER_DTYPE}{PEER_SEP}{BASELINE}"
    own = [name for name in names if name != BASELINE and PEER_SEP not in name]
    peers = [name for name in names if PEER_SEP in name and name != peer_base]
    if peers and peer_base not in names:
        notes.append(f"{peer_base} added: the baseline the peers are validated against")
    if peers or peer_base in names:
        peers.insert(0, peer_base)
    run: list[Mode] = []
    skipped: list[tuple[str, str]] = []
    for name in (BASELINE, *own, *peers):
        mode = mode_named(name)
        if mode is None:
            raise MatprobeError(f"unknown mode {name!r}")
        why = _cannot_run(mode, dtype=dtype, have_table=have_table, triton_problem=triton_problem,
                          pdl_problem=pdl_problem)  # fmt: skip
        if why is not None:
            skipped.append((name, why))
            continue
        run.append(mode)
    names_run = {mode.name for mode in run}
    for mode in run:
        if mode.rest is not None and mode.rest not in names_run:
            notes.append(f"{mode.name}: no matmul share without {mode.rest} in the modes")
    return ModeSelection(tuple(run), tuple(skipped), tuple(notes))


def triton_problem(device_kind: str) -> str | None:
    """Why Triton kernels cannot run on ``device_kind`` in this process, or None: they
    need triton, and off a CUDA GPU its interpreter (``TRITON_INTERPRET=1`` before
    triton is first imported) — without it a Triton launch on the CPU fails with
    "0 active drivers" mid-token."""
    import importlib.util
    import os

    if importlib.util.find_spec("triton") is None:
        return "needs triton (pip install matprobe[gpu])"
    if device_kind != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return (
            "Triton kernels need a CUDA GPU (on the CPU, TRITON_INTERPRET=1 runs them in "
            "Triton's interpreter: validated, slowly, never a speed figure)"
        )
    return None


def pdl_problem(device_kind: str) -> str | None:
    """Why kernels cannot be launched early on ``device_kind`` here, or None."""
    if device_kind != "cuda":
        return NO_PDL
    import torch

    return None if torch.cuda.get_device_capability() >= (9, 0) else NO_PDL


def _cannot_run(
    mode: Mode,
    *,
    dtype: str,
    have_table: bool,
    triton_problem: str | None,
    pdl_problem: str | None,
) -> str | None:
    if mode.peer is not None and dtype != "q8_0":
        return f"a peer runs beside a q8_0 token (this token is {dtype})"
    if mode.needs_table and dtype == "q8_0":
        return "a dispatch table's kernels take dense weights, not Q8_0"
    if mode.needs_table and not have_table:
        return "needs a dispatch table (--table FILE)"
    if mode.needs_triton and triton_problem is not None:
        return triton_problem
    if mode.needs_pdl and pdl_problem is not None:
        return pdl_problem
    if mode.needs_triton and dtype == "f32":
        return "triton.gemv_decode takes f16, bf16 and Q8_0 weights"
    return None
