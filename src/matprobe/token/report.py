"""The token report: a header, one row per mode, the prediction lines; and JSON.

Every name that came from outside matprobe (the device's name, an error
message, a table's path) goes through :func:`~matprobe.safetext.term_safe`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from matprobe.report.tables import ruled_table
from matprobe.safetext import term_safe
from matprobe.token.predict import TOLERANCE, PredictionCheck
from matprobe.token.result import ModeResult, TokenResult

HEADERS = (
    "mode",
    "µs/token [p10–p90] n",
    "after sync",
    "tok/s",
    "kernels",
    "matmul µs",
    "vs eager",
    "% floor",
    "validation",
)
RIGHT = {2, 3, 4, 5, 6, 7}


def _num(value: float | None, fmt: str, suffix: str = "") -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:{fmt}}{suffix}"


def _validation(result: ModeResult) -> str:
    if result.status == "UNCHECKED":
        return "– (matmuls left out)"
    figures = ""
    if result.error is not None and not result.error.nonfinite:
        figures = f" (norm {result.error.norm_rel:.1e}, max {result.error.max_rel:.1e})"
    if result.status == "PASS":
        return "PASS" + figures
    return f"{result.status}: {term_safe(result.reason)}{figures}"


def _row(token: TokenResult, result: ModeResult) -> list[str]:
    median = result.median_us
    spread = (
        f"{median:.1f} [{result.percentile(10):.1f}–{result.percentile(90):.1f}] "
        f"n={len(result.samples_us)}"
        if median is not None
        else "–"
    )
    kernels = "–"
    if result.kernels is not None:
        kernels = str(result.kernels.kernels)
        if result.kernels.copies:
            kernels += f"+{result.kernels.copies}"
    return [
        result.mode.name,
        spread,
        _num(result.latency_us, ".1f"),
        _num(result.tokens_per_s, ".1f"),
        kernels,
        "noise" if result.share_is_noise else _num(result.share_us, ".1f"),
        _num(token.share_ratio(result.mode.name), ".3f", "×"),
        _num(token.floor.percent(median), ".1f", " %"),
        _validation(result),
    ]


def _header(token: TokenResult) -> list[str]:
    c = token.config
    versions = ", ".join(f"{k} {term_safe(v)}" for k, v in sorted(token.versions.items()))
    floor = token.floor
    lines = [
        f"matprobe token on {term_safe(token.device_name)}; {versions}",
        f"model {term_safe(c.name)}: {c.layers} layers, hidden {c.hidden}, intermediate "
        f"{c.intermediate}, heads {c.heads}/{c.kv_heads} KV, head_dim {c.head_dim}, vocab "
        f"{c.vocab}; context {token.context}; dtype {token.dtype}",
        f"timing: {token.rounds} interleaved rounds (order rotated each round), {token.clock}",
    ]
    mb = floor.total_bytes / 1e6
    parts = f"{floor.weight_bytes / 1e6:.1f} MB weights + {floor.kv_bytes / 1e6:.2f} MB KV cache"
    if floor.floor_us is not None:
        lines.append(
            f"byte floor: {mb:.1f} MB read per token ({parts}) at {term_safe(floor.ceiling)}"
            f" = {floor.floor_us:.1f} µs"
        )
    else:
        lines.append(f"byte floor: {mb:.1f} MB read per token ({parts}); no read ceiling here")
    tol = token.tolerance
    check = (
        f"validation: logits vs float64 over {token.trials} trials and every timed replay "
        f"(each on a fresh input embedding); baseline within "
        f"{token.baseline_bound.norm_rel:.1e} norm-wise / {token.baseline_bound.max_rel:.1e} "
        f"worst logit"
    )
    if tol is not None:
        check += f"; other modes within {tol.norm_rel:.1e} / {tol.max_rel:.1e} ({tol.basis})"
    else:
        check += "; other modes held to the same bound (the baseline did not pass)"
    lines.append(check)
    return lines


def prediction_lines(token: TokenResult, checks: Sequence[PredictionCheck]) -> list[str]:
    """Predicted beside measured matmul shares, and the ratio table/baseline."""
    if not checks:
        return []
    lines = ["prediction (Σ calls per token × per-shape µs) beside the measured matmul share:"]
    for check in checks:
        measured = (
            f"measured {check.measured_us:.1f} µs ({check.mode})"
            if check.measured_us is not None
            else f"not measured ({check.mode} has no share)"
        )
        gap = check.gap
        line = f"  {check.label:8s} predicted {check.predicted_us:.1f} µs, {measured}"
        if check.measured_us is not None and check.measured_us <= 0:
            line += ": a share ≤ 0 is noise, nothing to compare"
        elif gap is not None:
            line += f": {gap:+.1%}"
            if check.off:
                line += f" — differs by more than {TOLERANCE:.0%}"
        lines.append(line)
    predicted = {c.label: c.predicted_us for c in checks}
    if predicted.get("baseline") and "table" in predicted:
        ratio = predicted["table"] / predicted["baseline"]
        measured_ratio = token.share_ratio("eager+table")
        lines.append(
            f"  table/baseline predicted {ratio:.3f}×, measured "
            f"{_num(measured_ratio, '.3f', '×')} (eager+table vs eager)"
        )
    return lines


#: What each mode's whole token is compared with, first present wins: the compiled
#: cuBLAS token (a Q8_0 token's fp16 peer first), and whose matmul share it is set
#: against (the eager cuBLAS token's).
TIME_REFERENCES = ("f16:compile", "compile")
SHARE_REFERENCES = ("f16:eager", "eager")


def comparison_lines(token: TokenResult) -> list[str]:
    """Each validated mode of the token's own against the compiled cuBLAS token
    (per-round ratio of whole-token times) and the eager cuBLAS token's matmul share."""
    names = {r.mode.name for r in token.modes if r.timed}
    time_ref = next((n for n in TIME_REFERENCES if n in names), None)
    share_ref = next((n for n in SHARE_REFERENCES if n in names), None)
    lines = []
    for r in token.modes:
        if not r.timed or r.status != "PASS" or r.mode.peer or r.mode.name in (time_ref, share_ref):
            continue
        parts = []
        if time_ref and (ratio := token.time_ratio(r.mode.name, time_ref)):
            parts.append(f"token {ratio[0]:.3f}× [{ratio[1]:.3f}–{ratio[2]:.3f}] {time_ref}'s time")
        if share_ref and (share := token.share_ratio(r.mode.name, share_ref)) is not None:
            parts.append(f"matmul share {share:.3f}× {share_ref}'s")
        if parts:
            lines.append(f"  {r.mode.name}: {'; '.join(parts)}")
    if not lines:
        return []
    return ["per-round ratios (median [p10–p90]):", *lines]


def render_text(token: TokenResult, checks: Sequence[PredictionCheck] = ()) -> str:
    lines = _header(token)
    lines.append("")
    lines += ruled_table(HEADERS, [_row(token, r) for r in token.modes], RIGHT).split("\n")
    lines += comparison_lines(token)
    for name, why in token.skipped:
        lines.append(f"skipped {name}: {why}")
    for note in token.notes:
        lines.append(f"note: {note}")
    counted = [r.kernels for r in token.modes if r.kernels is not None]
    if counted:
        line = f"kernels: {counted[0].what}"
        if any(k.copies for k in counted):
            line += "; +N: memcpy/memset nodes"
        lines.append(line)
    lines += prediction_lines(token, checks)
    return "\n".join(lines) + "\n"


def to_json(token: TokenResult, checks: Sequence[PredictionCheck] = ()) -> dict[str, Any]:
    c = token.config
    return {
        "model": {
            "name": c.name,
            "layers": c.layers,
            "hidden": c.hidden,
            "intermediate": c.intermediate,
            "heads": c.heads,
            "kv_heads": c.kv_heads,
            "head_dim": c.head_dim,
            "vocab": c.vocab,
            "qkv_bias": c.qkv_bias,
        },
        "context": token.context,
        "dtype": token.dtype,
        "device": {"kind": token.device_kind, "name": token.device_name},
        "versions": token.versions,
        "rounds": token.rounds,
        "trials": token.trials,
        "clock": token.clock,
        "floor": token.floor.to_dict(),
        "baseline_bound": token.baseline_bound.to_dict(),
        "tolerance": token.tolerance.to_dict() if token.tolerance else None,
        "modes": [
            {
                "name": r.mode.name,
                "description": r.mode.description,
                "kernels_kind": r.mode.kernels,
                "compile": r.mode.compile,
                "rest": r.mode.rest,
                "status": r.status,
                "reason": r.reason,
                "error": r.error.to_dict() if r.error else None,
                "judged_replays": r.judged,
                "kernels": r.kernels.to_dict() if r.kernels else None,
                "median_us": r.median_us,
                "p10_us": r.percentile(10),
                "p90_us": r.percentile(90),
                "tokens_per_s": r.tokens_per_s,
                "share_us": r.share_us,
                "share_is_noise": r.share_is_noise,
                "share_vs_eager": token.share_ratio(r.mode.name),
                "peer": r.mode.peer,
                "floor_percent": token.floor.percent(r.median_us),
                "samples_us": r.samples_us,
                "latency_us": r.latency_us,
                "latency_samples_us": r.latency_samples_us,
                "share_samples_us": r.share_samples_us,
            }
            for r in token.modes
        ],
        "skipped": [{"mode": name, "reason": why} for name, why in token.skipped],
        "notes": token.notes,
        "predictions": [check.to_dict() for check in checks],
    }
