"""The device a run measures on, and its fingerprint.

Results are only comparable on the same device with the same software, so the
fingerprint names the card, its compute capability, the driver and the
torch/triton/CUDA versions. Detection happens when a run starts, never at
install time.
"""

from __future__ import annotations

import hashlib
import importlib.util
import platform
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any

from matprobe.errors import MatprobeError


@dataclass(frozen=True)
class DeviceInfo:
    kind: str  # "cuda" or "cpu"
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
    def fingerprint(self) -> str:
        parts = [self.kind, self.name, str(self.capability), self.driver,
                 *(f"{k}={v}" for k, v in sorted(self.versions.items()))]
        digest = hashlib.sha256("|".join(parts).encode()).hexdigest()[:12]
        return f"{self.kind}:{self.name}:{digest}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["fingerprint"] = self.fingerprint
        return data


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


def _driver_version() -> str:
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip().splitlines()[0] if proc.returncode == 0 and proc.stdout else ""


def cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def detect(kind: str | None = None, index: int = 0) -> DeviceInfo:
    """The device to run on: ``kind`` "cuda", "cpu", or None for the GPU if any."""
    if kind is None:
        kind = "cuda" if cuda_available() else "cpu"
    versions = _versions()
    if kind == "cpu":
        return DeviceInfo(kind="cpu", name=platform.processor() or platform.machine(),
                          versions=versions)
    if kind != "cuda":
        raise MatprobeError(f"unknown device {kind!r}; use cuda or cpu")
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
