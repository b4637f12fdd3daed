"""The byte floor of a token: the bytes it must read ÷ the device's read ceiling.

A decode token reads every weight once (matrices, biases, norm gains) and the
whole KV cache of its context; nothing else it touches is of that size. At the
device's streaming-read ceiling — measured in the run, after its timed rounds, by
:func:`matprobe.measure.peaks.measure_peaks_cuda`, the same kernel ``matprobe
run`` measures with — those bytes take ``floor_us``: no token can be faster, and
``% floor`` says how close a mode comes (DESIGN.md §7: ≈ 988 MB, ≈ 330 µs for
Qwen2.5-0.5B in f16 on an H100).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from matprobe.profile.models import ModelConfig
from matprobe.spec import DTYPE_BYTES


@dataclass(frozen=True)
class ByteFloor:
    weight_bytes: int
    kv_bytes: int
    read_gbps: float | None  # None: no ceiling measured (the CPU)
    ceiling: str = ""  # how the ceiling was measured

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes

    @property
    def floor_us(self) -> float | None:
        if not self.read_gbps:
            return None
        return self.total_bytes / (self.read_gbps * 1e9) * 1e6

    def percent(self, us: float | None) -> float | None:
        """``floor_us`` as a percentage of a token that took ``us``."""
        floor = self.floor_us
        if floor is None or not us or us <= 0:
            return None
        return 100.0 * floor / us

    def to_dict(self) -> dict[str, Any]:
        return {
            "weight_bytes": self.weight_bytes,
            "kv_bytes": self.kv_bytes,
            "total_bytes": self.total_bytes,
            "read_gbps": self.read_gbps,
            "ceiling": self.ceiling,
            "floor_us": self.floor_us,
        }


def token_bytes(config: ModelConfig, *, context: int, dtype: str) -> tuple[int, int]:
    """(weight bytes, KV-cache bytes) one token reads, from the config alone: every
    layer's QKV (and its bias), o_proj, gate/up, down and two norm gains, the final
    norm and the LM head; K and V of ``context`` positions in every layer."""
    c = config
    n_qkv = (c.heads + 2 * c.kv_heads) * c.head_dim
    per_layer = (
        c.hidden * n_qkv
        + (n_qkv if c.qkv_bias else 0)
        + c.hidden * c.heads * c.head_dim
        + 2 * c.intermediate * c.hidden
        + c.hidden * c.intermediate
        + 2 * c.hidden
    )
    weights = c.layers * per_layer + c.hidden + c.vocab * c.hidden
    kv = 2 * c.layers * c.kv_heads * context * c.head_dim
    size = DTYPE_BYTES[dtype]
    return int(weights * size), int(kv * size)


def measure_read_ceiling() -> tuple[float, str]:
    """The CUDA device's streaming-read ceiling now (GB/s) and how it was reached."""
    from matprobe.measure.peaks import measure_peaks_cuda

    peaks = measure_peaks_cuda()
    label = (
        f"streaming read {float(peaks['read_gbps']):.0f} GB/s ({peaks['read_config']}, "
        f"{float(peaks['size_bytes']) / 2**20:.0f} MiB buffer), measured after this run's "
        "rounds"
    )
    return float(peaks["read_gbps"]), label
