"""``matprobe token``: one decode step of a model as one CUDA graph, several modes
side by side — parsing and printing only; the work is :mod:`matprobe.token`'s.

Exit status as the rest of the command: 0 all good; 1 when the eager baseline
fails validation or no mode was timed (with ``--strict``, also on any FAIL or
ERROR); 2 for a usage error, said in one line before anything runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from matprobe.cli.args import _add_store, positive
from matprobe.errors import MatprobeError
from matprobe.safetext import term_safe

if TYPE_CHECKING:
    from matprobe.dispatch.apart import TableApart
    from matprobe.dispatch.table import DispatchTable as Table
    from matprobe.kernels.triton.decode import DecodeTile
    from matprobe.profile.models import ModelConfig
    from matprobe.token.bench import TokenBench
    from matprobe.token.linear import LinearFn
    from matprobe.token.modes import Mode, ModeSelection
    from matprobe.token.result import TokenResult

EXIT_FAILED = 1

#: Modes a profile can be recorded in: eager ones (Inductor fuses across the
#: step's parts, so a compiled kernel belongs to no one part).
PROFILE_MODES = ("eager", "eager+table", "eager-none")


#: ``--fused``: the cuBLAS modes and the triton.gemv_decode ones.
FUSED_MODES = (
    "eager",
    "eager-none",
    "compile",
    "compile-none",
    "eager+decode",
    "fused",
    "compile+fused",
    "layer",
    "layer+pdl",
)
#: … and beside a q8_0 token, its fp16 peer's cuBLAS modes.
Q8_PEER_MODES = ("f16:eager", "f16:eager-none", "f16:compile", "f16:compile-none")


class DispatchTable(Protocol):
    """What the token needs of :mod:`matprobe.dispatch`'s table (a protocol: the
    tests hand it a fake)."""

    def predict_matmul_us(self, calls: Mapping[str, float]) -> tuple[float, float]: ...

    def lookup(self, spec: Any) -> Any: ...


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``token`` subcommand to ``matprobe``'s subparsers."""
    p = subparsers.add_parser(
        "token",
        help="one decode step of a model as one CUDA graph: eager, table, torch.compile modes",
        description="Build one decode step of a model config (every layer with its own "
        "weights, the real elementwise work between the matmuls), capture each mode's step "
        "as one CUDA graph, validate its logits against float64 and time the graphs in "
        "interleaved rounds: µs per token, kernels, matmul share (the same step with the "
        "weight matmuls left out gives the rest) and % of the byte floor. On the CPU: no "
        "graphs, host clock; use --small there.",
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--model",
        metavar="NAME",
        default="qwen2.5-0.5b",
        help="model config (default qwen2.5-0.5b; 'matprobe shapes --model list' names them)",
    )
    source.add_argument(
        "--small",
        action="store_true",
        help="a small Qwen2-shaped config (2 layers, hidden 64, 4/2 heads, vocab 320) for the CPU",
    )
    p.add_argument("--context", type=positive, default=128, metavar="L", help="default 128")
    p.add_argument(
        "--dtype",
        choices=("f16", "bf16", "f32", "q8_0"),
        default="f16",
        help="default f16; q8_0: Q8_0 weight matrices, fp16 elsewhere, beside its fp16 peer "
        "(f16:eager, f16:compile modes)",
    )
    p.add_argument(
        "--fused",
        action="store_true",
        help="only the cuBLAS modes (eager, compile and their matmul-less twins; a q8_0 "
        "token's fp16 peers) and the Triton ones: eager+decode, fused, compile+fused, "
        "layer, layer+pdl",
    )
    p.add_argument(
        "--modes",
        metavar="A,B,…",
        help="modes to run, comma-separated (default: all on CUDA, the eager ones on the CPU): "
        "eager, eager-none, eager+table, compile, compile-none, compile-max-autotune, "
        "compile-max-autotune-none, compile+table, eager+decode, fused, compile+fused, "
        "layer, layer+pdl; "
        "beside a q8_0 token also f16:eager, f16:compile, …",
    )
    p.add_argument(
        "--rounds", type=positive, default=30, metavar="N", help="timed rounds (default 30)"
    )
    p.add_argument(
        "--table", metavar="FILE", help="a dispatch table (matprobe dispatch) for the table modes"
    )
    _add_store(p, "the result store whose verdicts --table's winners must match")
    p.add_argument(
        "--profile",
        metavar="FILE",
        help="also write the token's kernels as a metallic JSONL profile (for analyze/shapes/run)",
    )
    p.add_argument(
        "--profile-mode",
        choices=PROFILE_MODES,
        default="eager",
        help="the mode --profile records (default eager)",
    )
    p.add_argument(
        "--profile-tokens",
        type=positive,
        default=4,
        metavar="N",
        help="tokens --profile records (default 4)",
    )
    p.add_argument("--json", metavar="FILE", help="JSON with every sample ('-': stdout)")
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda if present")
    p.add_argument("--seed", type=int, default=0, help="weights' random seed (default 0)")
    p.add_argument(
        "--strict", action="store_true", help="exit 1 on any FAIL or ERROR, not only the baseline's"
    )
    p.set_defaults(func=cmd_token)


def _check_writable(path: Path) -> None:
    """Before the token runs: an output that cannot be written costs nothing measured."""
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise MatprobeError(f"cannot write {term_safe(str(path))}: it is a directory")
    if not folder.is_dir():
        raise MatprobeError(
            f"cannot write {term_safe(str(path))}: no folder {term_safe(str(folder))}"
        )
    if not os.access(folder, os.W_OK):
        raise MatprobeError(
            f"cannot write {term_safe(str(path))}: {term_safe(str(folder))} is not writable"
        )


def _device(requested: str | None) -> str:
    from matprobe.measure.device import cuda_available

    if requested == "cuda" and not cuda_available():
        raise MatprobeError("--device cuda asked for, but torch sees no CUDA GPU")
    return requested or ("cuda" if cuda_available() else "cpu")


def _load_table(
    path: str, device: str, modes: tuple[str, ...] | None, db: Path | None
) -> tuple[Table, dict[str, LinearFn]]:
    """The table and its kernels, eager and as custom ops, checked against this
    device (a table from another card or of changed kernels is a usage error) and
    against the verdicts in the store ``db``: a table is a file anyone can write,
    so a winner without a stored PASS, from the code installed now, never runs.
    A table that names plugins gets no kernels here: this process never imports
    a plugin, and its modes run in a process of their own (:func:`_apart`)."""
    from matprobe.dispatch import custom_op_linear, load_table, table_linear, unjudged_entries
    from matprobe.measure.device import detect
    from matprobe.run.store import default_store_path

    table = load_table(path)
    store = db or default_store_path()
    if problems := unjudged_entries(table, store):
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise MatprobeError(
            f"--table {term_safe(path)}: {len(problems)} winner(s) without a verdict in "
            f"{term_safe(str(store))}: " + "; ".join(term_safe(p) for p in problems[:3]) + more
        )
    if table.plugins:
        return table, {}
    info = detect(device)
    linears: dict[str, LinearFn] = {"table": table_linear(table, info)}
    if modes is None or "compile+table" in modes:
        linears["table-op"] = custom_op_linear(table, info)
    return table, linears


def _from_table(
    args: argparse.Namespace, config: ModelConfig, device: str, names: tuple[str, ...] | None
) -> tuple[dict[str, LinearFn], dict[str, float], dict[str, DecodeTile], Table | None]:
    """With ``--table``: its kernels (checked; none where they run apart), its
    predicted matmul shares, the GEMV tiles of the layer sites
    ``triton.gemv_decode`` won there (said on stderr), and the table; without:
    nothing of each."""
    if not args.table:
        return {}, {}, {}, None
    from matprobe.dispatch.layer_tiles import layer_tiles

    db = Path(args.db) if args.db else None
    table, linears = _load_table(args.table, device, names, db)
    predicted, why_not = _predict(table, config, args.context, args.dtype)
    if why_not:
        print(f"matprobe: warning: {term_safe(why_not)}", file=sys.stderr)
    tiles, kept = layer_tiles(table, config, context=args.context, dtype=args.dtype)
    if tiles:
        chosen = ", ".join(
            f"{site} {tile.bn}/{tile.bk}/{tile.warps}" for site, tile in tiles.items()
        )
        print(f"matprobe: token: the table's triton.gemv_decode tiles (bn/bk/warps) for the "
              f"layer modes: {chosen}", file=sys.stderr)  # fmt: skip
        for role, why in kept.items():
            print(f"matprobe: token: {role}: the token's own tile ({term_safe(why)})",
                  file=sys.stderr)  # fmt: skip
    return linears, predicted, tiles, table


def _apart(
    table: Table | None, args: argparse.Namespace, config: ModelConfig, device: str
) -> TableApart | None:
    """The process a table that names plugins runs its modes in (None: a table of
    matprobe's own families, or none)."""
    if table is None or not table.plugins:
        return None
    from matprobe.dispatch.apart import TableApart
    from matprobe.measure.device import detect

    print(f"matprobe: token: the table's plugins ({term_safe(', '.join(table.plugins))}) "
          "run in a process of their own; this one poses, times and judges their modes",
          file=sys.stderr)  # fmt: skip
    return TableApart(
        table, detect(device), config=config, context=args.context, dtype=args.dtype,
        seed=args.seed,
    )  # fmt: skip


def _predict(
    table: DispatchTable, config: ModelConfig, context: int, dtype: str
) -> tuple[dict[str, float], str | None]:
    """The table's predicted matmul share (µs) for the baseline and itself, or why
    there is none (a table without every weight spec has no figure for the rest)."""
    from matprobe.token.predict import weight_calls

    calls = weight_calls(config, context=context, dtype=dtype)
    try:
        baseline_us, table_us = table.predict_matmul_us(calls)
    except MatprobeError as exc:
        return {}, f"no prediction: {exc}"
    return {"baseline": baseline_us, "table": table_us}, None


def _backend_namer(device: str, mode_kernels: str) -> Callable[[str], str]:
    """The backend a profile names for a matmul site (by role): the table's
    kernels for the weight matmuls of a table mode, else the torch library's."""
    from matprobe.token.step import WEIGHT_SITES

    library = "cublas" if device == "cuda" else "cpu-blas"

    def backend_of(role: str) -> str:
        if role in WEIGHT_SITES and mode_kernels == "table":
            return "matprobe-table"
        return library

    return backend_of


def _problems(token: TokenResult, strict: bool) -> list[str]:
    problems = []
    base = token.get("eager")
    if base is None or base.status != "PASS":
        why = base.reason if base is not None else "did not run"
        problems.append(f"the eager baseline {base.status if base else 'ERROR'}: {why}")
    if not any(r.timed for r in token.modes):
        problems.append("no mode was timed")
    if strict:
        problems += [
            f"{r.mode.name} {r.status}: {r.reason}"
            for r in token.modes
            if r.status in ("FAIL", "ERROR")
        ]
    return problems


def _write_profile(
    args: argparse.Namespace,
    bench: TokenBench,
    mode: Mode,
    device: str,
    progress: Callable[[str], None],
    apart: TableApart | None = None,
) -> None:
    """``--profile``: ``--profile-tokens`` tokens of ``mode`` recorded as a JSONL
    profile (each kernel named by the backend that ran it), for ``matprobe
    analyze`` — the way back to the engine's own analysis."""
    from matprobe.token.profile import record_token, save_profile

    if apart is not None and mode.kernels in apart.kernels:
        recorded = apart.profile(mode.name, args.profile_tokens)
        progress(f"{mode.name}: recorded in the table's process (its durations are its word)")
    else:
        recorded = record_token(
            bench.step, bench.linears[mode.kernels], tokens=args.profile_tokens,
            device_kind=device,
        )  # fmt: skip
    written = save_profile(
        args.profile,
        recorded,
        bench.specs,
        backend_of=_backend_namer(device, mode.kernels),
        reason=f"matprobe token, mode {mode.name}: {mode.description}",
        weight_bytes=bench.weights.weight_bytes(),
    )
    progress(
        f"wrote {written} events ({args.profile_tokens} tokens, mode {mode.name}) to {args.profile}"
    )


def cmd_token(args: argparse.Namespace, out: TextIO) -> int:
    from matprobe.profile.models import get_model
    from matprobe.token.modes import MODES, parse_modes, pdl_problem, select_modes, triton_problem
    from matprobe.token.weights import small_config

    device = _device(args.device)
    config = small_config() if args.small else get_model(args.model)
    if args.fused and args.modes:
        raise MatprobeError("--fused names the modes itself: give --fused or --modes, not both")
    names = parse_modes(args.modes) if args.modes else None
    if args.fused:
        names = FUSED_MODES + (Q8_PEER_MODES if args.dtype == "q8_0" else ())
    for target in (args.json, args.profile):
        if target and target != "-":
            _check_writable(Path(target))
    profile_mode = MODES[args.profile_mode]
    if args.profile and profile_mode.needs_table and not args.table:
        raise MatprobeError(f"--profile-mode {profile_mode.name} needs --table FILE")

    linears, predicted, tiles, table = _from_table(args, config, device, names)
    selection = select_modes(
        names,
        device_kind=device,
        have_table=bool(args.table),
        dtype=args.dtype,
        triton_problem=triton_problem(device),
        pdl_problem=pdl_problem(device),
    )

    apart = _apart(table, args, config, device)
    try:
        return _measure(args, out, config, device, selection, linears, tiles, predicted, apart)
    finally:
        if apart is not None:
            apart.close()


def _progress(message: str) -> None:
    print(f"matprobe: token: {term_safe(message)}", file=sys.stderr)


def _measure(
    args: argparse.Namespace,
    out: TextIO,
    config: ModelConfig,
    device: str,
    selection: ModeSelection,
    linears: dict[str, LinearFn],
    tiles: dict[str, DecodeTile],
    predicted: dict[str, float],
    apart: TableApart | None,
) -> int:
    """The token measured and reported (``cmd_token`` has checked the arguments)."""
    from matprobe.token.bench import TokenBench
    from matprobe.token.floor import measure_read_ceiling
    from matprobe.token.modes import MODES
    from matprobe.token.predict import check_predictions
    from matprobe.token.report import render_text, to_json

    bench = TokenBench(
        config, context=args.context, dtype=args.dtype, device=device, seed=args.seed,
        linears=linears, progress=_progress, tiles=tiles, apart=apart,
    )  # fmt: skip
    ceiling = measure_read_ceiling if device == "cuda" else None
    token = bench.run(selection, rounds=args.rounds, read_ceiling=ceiling)

    shares = {r.mode.name: r.share_us for r in token.modes}
    checks = check_predictions(predicted, shares)

    text = render_text(token, checks)
    (sys.stderr if args.json == "-" else out).write(text)
    if args.json:
        data = json.dumps(to_json(token, checks), indent=2) + "\n"
        if args.json == "-":
            out.write(data)
        else:
            _write(Path(args.json), data)

    if args.profile:
        _write_profile(args, bench, MODES[args.profile_mode], device, _progress, apart)

    problems = _problems(token, args.strict)
    if apart is not None and (busy := apart.problem()):
        problems.append(f"{busy}; the token's figures are no verdict")
    for problem in problems:
        print(f"matprobe: {term_safe(problem)}", file=sys.stderr)
    return EXIT_FAILED if problems else 0


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise MatprobeError(f"cannot write {term_safe(str(path))}: {exc.strerror or exc}") from None
