"""A capture against decode_specs: the same shapes and counts, or why not.

decode_specs models one decode step from a config's numbers; a capture records
what a real implementation ran. The two are compared spec by spec, calls per
token, against decode_specs with Q/K/V and gate/up unfused — transformers runs
them as separate linears, where ``shapes --model`` fuses them by default (the
notes say how the fused form differs). What is left over on either side is a
difference; the rules below explain the differences known to be harmless, and
anything else is reported unexplained.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from matprobe.profile.capture.record import Capture
from matprobe.profile.models import MODELS, ModelConfig, decode_specs
from matprobe.spec import MatmulSpec


@dataclass(frozen=True)
class Difference:
    """Calls per token one side has and the other lacks; a pair when a rule
    matched a captured spec to the expected spec it stands for."""

    captured: MatmulSpec | None
    captured_count: int
    expected: MatmulSpec | None
    expected_count: int
    why: str | None = None


@dataclass(frozen=True)
class Comparison:
    """``same``: specs with the calls both sides agree on; ``differences``: the rest."""

    command: str
    notes: tuple[str, ...]
    same: tuple[tuple[MatmulSpec, int], ...]
    differences: tuple[Difference, ...]
    unhandled: tuple[tuple[str, int], ...] = ()

    @property
    def ok(self) -> bool:
        """Every difference is explained and no matmul-like call went unrecorded."""
        return all(d.why for d in self.differences) and not self.unhandled


def comparable(spec: MatmulSpec) -> MatmulSpec:
    """The spec as compared: α to 12 significant digits, since transformers
    scales by ``head_dim ** -0.5`` and decode_specs by ``1 / sqrt(head_dim)``,
    which differ in the last bit for some head sizes (128)."""
    if spec.alpha is None:
        return spec
    return replace(spec, alpha=float(f"{spec.alpha:.12g}"))


def _tally(pairs: Mapping[MatmulSpec, int] | list[tuple[MatmulSpec, int]]) -> Counter[MatmulSpec]:
    tally: Counter[MatmulSpec] = Counter()
    # Equal specs add up: with hidden = heads·head_dim and no bias, q_proj and
    # o_proj are the same matmul.
    for spec, count in pairs.items() if isinstance(pairs, Mapping) else pairs:
        tally[comparable(spec)] += count
    return tally


# ---- the rules -----------------------------------------------------------------

#: A rule looks at one captured-only spec (and the expected-only ones) and returns
#: the expected spec it stands for (or None for an extra call) and why.
_Rule = Callable[
    [MatmulSpec, int, Counter[MatmulSpec], ModelConfig], tuple[MatmulSpec | None, str] | None
]


def _bias_rule(
    spec: MatmulSpec, count: int, missing: Counter[MatmulSpec], config: ModelConfig
) -> tuple[MatmulSpec | None, str] | None:
    plain = replace(spec, op="matmul")
    if spec.op == "matmul_bias_add" and missing[plain] >= count:
        return plain, (
            "a bias on this projection, added in the same addmm (e.g. Llama's "
            "attention_bias on o_proj, mlp_bias); decode_specs models one on Q, K, V only"
        )
    return None


def _rotary_rule(
    spec: MatmulSpec, count: int, missing: Counter[MatmulSpec], config: ModelConfig
) -> tuple[MatmulSpec | None, str] | None:
    if spec.k == 1 and spec.m == config.head_dim // 2 and spec.dtype == "f32":
        return None, (
            "the rotary embedding's f32 outer product of head_dim/2 inverse frequencies "
            "and the position (k = 1; older transformers run it as a matmul): a table, "
            "not a weight matmul"
        )
    return None


RULES: tuple[_Rule, ...] = (_bias_rule, _rotary_rule)


def compare_counts(
    captured: Mapping[MatmulSpec, int],
    config: ModelConfig,
    *,
    context: int,
    dtype: str,
    notes: tuple[str, ...] = (),
    command: str = "",
) -> Comparison:
    """``captured`` (spec → calls per token) against decode_specs of ``config``
    unfused, attention over ``context`` keys."""
    expected_shapes = decode_specs(
        config, context=context, dtype=dtype, fuse_qkv=False, fuse_gate_up=False
    )
    got = _tally(captured)
    want = _tally([(shape.spec, shape.count) for shape in expected_shapes])
    same = tuple((spec, min(got[spec], want[spec])) for spec in got if spec in want)
    extra = got - want
    missing = want - got
    differences: list[Difference] = []
    for spec, count in extra.items():
        for rule in RULES:
            found = rule(spec, count, missing, config)
            if found is not None:
                stands_for, why = found
                if stands_for is not None:
                    missing[stands_for] -= count
                differences.append(
                    Difference(spec, count, stands_for, count if stands_for else 0, why)
                )
                break
        else:
            differences.append(Difference(spec, count, None, 0))
    differences.extend(Difference(None, 0, spec, count) for spec, count in (+missing).items())
    return Comparison(command, notes, same, tuple(differences))


def _notes(capture: Capture) -> tuple[str, ...]:
    c = capture.model
    kv = c.kv_heads * c.head_dim
    q = c.heads * c.head_dim
    notes = [
        f"attention spans {capture.context} keys: the {capture.cached} cached tokens "
        "and the new one",
        f"q, k, v run as three linears (n = {q}, {kv}, {kv}) with weights stored [N, K] "
        f"(tB=1); `shapes --model` fuses them into one qkv (n = {q + 2 * kv}) stored "
        "[K, N] (tB=0), as the profiled engine does",
        f"gate and up run as two linears (n = {c.intermediate} each); `shapes --model` "
        f"fuses them into one gate_up (n = {2 * c.intermediate})",
    ]
    known = MODELS.get(c.name)
    if known is not None and known.layers != c.layers:
        notes.append(
            f"{c.layers} of the model's {known.layers} layers (--layers): per-layer counts "
            f"are {c.layers}, not {known.layers}"
        )
    return tuple(notes)


def compare_capture(capture: Capture) -> Comparison:
    """A capture against ``shapes --model`` for the same model, context and dtype."""
    c = capture.model
    if capture.known_name:
        command = (
            f"matprobe shapes --model {c.name} --context {capture.context} --dtype "
            f"{capture.dtype} --no-fuse-qkv --no-fuse-gate-up"
        )
    else:
        command = f"decode_specs of {c.name}, context {capture.context}, unfused"
    comparison = compare_counts(
        capture.counts(),
        c,
        context=capture.context,
        dtype=capture.dtype,
        notes=_notes(capture),
        command=command,
    )
    return replace(comparison, unhandled=capture.unhandled)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def render_comparison(comparison: Comparison) -> str:
    """The comparison as text lines (names in it are already escaped)."""
    lines = [f"check against {comparison.command}:"]
    lines += [f"  note: {note}" for note in comparison.notes]
    calls = sum(count for _, count in comparison.same)
    lines.append(f"  same: {_plural(len(comparison.same), 'shape')}, {calls} calls per token")
    if comparison.differences:
        lines.append("  differences, calls per token (+ captured only, - decode_specs only):")
    for difference in comparison.differences:
        if difference.captured is not None:
            lines.append(f"  + {difference.captured_count:4d}×  {difference.captured.key()}")
        if difference.expected is not None:
            lines.append(f"  - {difference.expected_count:4d}×  {difference.expected.key()}")
        lines.append(f"      why: {difference.why or 'NOT EXPLAINED'}")
    for name, count in comparison.unhandled:
        lines.append(f"  ! {count:4d}×  {name}: looks like a matmul, not recorded")
    unexplained = sum(1 for d in comparison.differences if not d.why)
    if comparison.ok and comparison.differences:
        explained = _plural(len(comparison.differences), "explained difference")
        verdict = f"the same shapes and counts but for {explained}"
    elif comparison.ok:
        verdict = "the same shapes and counts"
    else:
        verdict = f"{_plural(unexplained, 'difference')} not explained"
        if comparison.unhandled:
            verdict += f", {_plural(len(comparison.unhandled), 'matmul-like op')} not recorded"
    lines.append(f"result: {verdict}")
    return "\n".join(lines) + "\n"
