"""The device a run measures on, and its fingerprint.

Results are only comparable on the same device with the same software, so the
fingerprint names the card, its compute capability, the driver and the
torch/triton/CUDA versions. Detection happens when a run starts, never at
install time.

Kinds: ``cuda``, ``cpu`` and ``mps`` (Apple's Metal GPU through PyTorch's MPS
backend). An MPS device is described (:func:`mps_info`) but not handed to a
run yet: the measurement code has CUDA and CPU recorders only, and would time
an MPS tensor as if it were on the CPU (see :data:`MPS_MEASURABLE`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import platform
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from matprobe.errors import MatprobeError


@dataclass(frozen=True)
class DeviceInfo:
    kind: str  # "cuda", "cpu" or "mps"
    name: str
    index: int = 0
    capability: tuple[int, int] | None = None
    sm_count: int = 0
    l2_bytes: int = 0
    memory_bytes: int = 0
    driver: str = ""
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def interpreter(self) -> bool:
        """Triton kernels run in the interpreter here (no GPU): never a speed figure."""
        return self.kind == "cpu"

    @property
    def early_launch(self) -> bool:
        """Kernels can launch before the one they depend on ends here (programmatic
        dependent launch: CUDA, compute capability 9.0 and up)."""
        return self.kind == "cuda" and self.capability is not None and self.capability >= (9, 0)

    @property
    def fingerprint(self) -> str:
        parts = [
            self.kind,
            self.name,
            str(self.capability),
            self.driver,
            *(f"{k}={v}" for k, v in sorted(self.versions.items())),
        ]
        digest = hashlib.sha256("|".join(parts).encode()).hexdigest()[:12]
        return f"{self.kind}:{self.name}:{digest}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["fingerprint"] = self.fingerprint
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeviceInfo:
        """A device from its :meth:`to_dict` form, as a store, a report or a worker's
        pipe carries it (unknown keys ignored, missing ones defaulted)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if values.get("capability") is not None:
            values["capability"] = tuple(values["capability"])
        values.setdefault("kind", "?")
        values.setdefault("name", "unknown device")
        values["versions"] = {str(k): str(v) for k, v in (values.get("versions") or {}).items()}
        return cls(**values)


def _versions() -> dict[str, str]:
    out: dict[str, str] = {"python": platform.python_version()}
    for module in ("torch", "triton", "numpy"):
        if importlib.util.find_spec(module) is None:
            continue
        try:
            mod = __import__(module)
            out[module] = str(getattr(mod, "__version__", "?"))
        except Exception:
            out[module] = "broken"
    return out


def command_line(args: list[str]) -> str:
    """The first line a read-only system command prints, or "" when it is missing,
    fails or hangs (nvidia-smi, sysctl: facts worth having, never worth an error)."""
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = proc.stdout.strip().splitlines() if proc.returncode == 0 else []
    return lines[0].strip() if lines else ""


@functools.cache
def nvidia_smi_id(index: int) -> str:
    """What nvidia-smi calls the card CUDA numbers ``index``: its UUID where torch
    gives it (CUDA_VISIBLE_DEVICES and CUDA's own ordering renumber cards,
    nvidia-smi does not), else the index itself."""
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(index).uuid)
    except Exception:  # no torch, no CUDA
        return str(index)
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def _driver_version() -> str:
    return command_line(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])


def cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


#: Whether a run may measure on MPS: the harness has an MPS recorder
#: (``sampling.MpsRecorder``: MPS events around eager replays) and computes MPS
#: references in float64 on the CPU (``inputs.float64_device``).
MPS_MEASURABLE = True

#: The cache an MPS run rotates its inputs past: the largest system-level cache
#: of an Apple GPU (M-series Ultra, 96 MB); smaller chips are covered by it.
MPS_CACHE_BYTES = 96 * 2**20

NO_MPS = "no MPS device: needs Apple silicon with PyTorch's MPS backend"


def mps_available() -> bool:
    """PyTorch's MPS backend is built and sees a Metal device (Apple silicon, macOS)."""
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def _apple_chip() -> str:
    """The chip's marketing name (``Apple M2 Max``) from sysctl, else the machine type."""
    name = command_line(["sysctl", "-n", "machdep.cpu.brand_string"])
    return name or platform.machine() or "Apple GPU"


def mps_info() -> DeviceInfo:
    """The MPS device (Apple's GPU through PyTorch), or a one-line error where there is none."""
    if not mps_available():
        raise MatprobeError(NO_MPS)
    import torch

    versions = _versions()
    versions["macos"] = platform.mac_ver()[0]
    recommended = getattr(torch.mps, "recommended_max_memory", None)
    return DeviceInfo(
        kind="mps",
        name=f"{_apple_chip()} (MPS)",
        memory_bytes=int(recommended()) if callable(recommended) else 0,
        l2_bytes=MPS_CACHE_BYTES,
        versions=versions,
    )


def detect(kind: str | None = None, index: int = 0) -> DeviceInfo:
    """The device to run on: ``kind`` "cuda", "cpu", "mps", or None for the CUDA GPU
    if any, else the CPU (never MPS unasked)."""
    if kind is None:
        kind = "cuda" if cuda_available() else "cpu"
    if kind == "mps":
        info = mps_info()
        if not MPS_MEASURABLE:
            raise MatprobeError(
                f"--device mps: {info.name} found, but matprobe cannot time on MPS yet "
                "(the harness has CUDA and CPU recorders only)"
            )
        return info
    versions = _versions()
    if kind == "cpu":
        return DeviceInfo(
            kind="cpu", name=platform.processor() or platform.machine(), versions=versions
        )
    if kind != "cuda":
        raise MatprobeError(f"unknown device {kind!r}; use cuda, cpu or mps")
    if not cuda_available():
        raise MatprobeError("--device cuda asked for, but torch sees no CUDA GPU")
    import torch

    props = torch.cuda.get_device_properties(index)
    versions["cuda"] = str(torch.version.cuda)
    return DeviceInfo(
        kind="cuda",
        name=props.name,
        index=index,
        capability=(props.major, props.minor),
        sm_count=props.multi_processor_count,
        l2_bytes=int(getattr(props, "L2_cache_size", 0)),
        memory_bytes=int(props.total_memory),
        driver=_driver_version(),
        versions=versions,
    )
