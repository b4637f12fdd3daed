"""One decode step of a model as one CUDA graph, in several modes side by side.

Where per-shape figures say what a kernel does alone, a token says what it does
among the rest of a decode step: the elementwise kernels between the matmuls,
the attention, the launch gaps. Modules, from the bottom up:

* ``weights`` — the step's random, seeded state (every layer its own weights,
  the KV cache, RoPE tables); ``small_config`` for the CPU;
* ``linear`` — the :data:`LinearFn` the weight matmuls go through: torch's, or
  none at all (another module supplies a dispatch table's);
* ``step`` — the decode step itself, in the real op order;
* ``validate`` — logits against float64, the tolerance and why;
* ``modes`` — eager, table, torch.compile… and their matmul-less twins;
* ``timing`` — CUDA graphs, interleaved rounds, kernel counts;
* ``floor`` — bytes per token ÷ the measured read ceiling;
* ``bench`` — all of it for one model: build, validate, time;
* ``predict`` — per-shape predictions beside the measured matmul share;
* ``report`` — the table and the JSON; ``profile`` — a metallic JSONL profile.

Importing this package imports torch.
"""

from __future__ import annotations

from matprobe.token.bench import TokenBench
from matprobe.token.linear import LinearFn, NoMatmul, torch_linear
from matprobe.token.modes import MODES, Mode, parse_modes, select_modes
from matprobe.token.result import ModeResult, TokenResult
from matprobe.token.step import DecodeStep, site_specs
from matprobe.token.weights import TokenWeights, make_weights, small_config

__all__ = [
    "MODES",
    "DecodeStep",
    "LinearFn",
    "Mode",
    "ModeResult",
    "NoMatmul",
    "TokenBench",
    "TokenResult",
    "TokenWeights",
    "make_weights",
    "parse_modes",
    "select_modes",
    "site_specs",
    "small_config",
    "torch_linear",
]
