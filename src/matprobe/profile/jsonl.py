"""Stream a metallic profiling JSONL file into per-group duration samples.

One pass, constant memory apart from the samples themselves, which are kept
as packed float64 arrays (8 bytes a sample) because exact percentiles need
them all. Lines that are not events are counted by category with their first
line numbers and never stop the scan.

Classification follows metallic's ``analyze_jsonl.py`` (DESIGN.md §3.2), so
the figures match the original on the same file; where the original was
silent or lossy it is made explicit here (see ``_matmul_meta``). What a scan
gathers, and the schema it reads: :mod:`~matprobe.profile.events`.
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import multiprocessing
import os
import re
import sys
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import IO, Any, cast

from matprobe.errors import ProfileError
from matprobe.profile.events import (
    KNOWN_EVENT_TYPES,
    MAX_DURATION_US,
    REQUIRED_FIELDS,
    Problems,
    ProfileScan,
)

try:  # orjson parses profiles ~3x faster; the standard library is the fallback.
    import orjson

    _loads: Callable[[bytes | str], Any] = orjson.loads
    _DECODE_ERRORS: tuple[type[Exception], ...] = (orjson.JSONDecodeError, ValueError)
except ImportError:  # pragma: no cover - exercised where orjson is absent
    _loads = json.loads
    _DECODE_ERRORS = (json.JSONDecodeError, ValueError)


SHAPE_BASE_KEYS: tuple[str, ...] = ("op", "batch", "m", "n", "k", "tA", "tB")
_NOT_EXTRA = frozenset((*SHAPE_BASE_KEYS, "backend"))
UNKNOWN = "<unknown>"


_BLOCK_PART = re.compile(r"_block_\d+")


# ---- classification helpers (pure, memoized by the scanner) ----------------


def kernel_type(op_name: str) -> str:
    """The kernel type of a scope path: its last segment with ``block_N`` folded.

    ``…/sdpa_block_3_op`` → ``sdpa``; ``forward_cpu_block_8`` → ``forward_cpu``;
    ``…/matmul/gemv_addmm (Q)`` → ``gemv_addmm (Q)``.
    """
    base = op_name.rsplit("/", 1)[-1] if op_name else UNKNOWN
    base = _BLOCK_PART.sub("", base)
    base = base.removesuffix("_op")
    return base.rstrip("_") or base


def legacy_matmul_meta(op_name: str) -> dict[str, str] | None:
    """Shape data encoded in an old-style path: ``…/matmul/op=matmul/m=1/…/X::Y``.

    Segments after the first ``matmul_cache/`` or ``matmul/`` marker, up to a
    segment naming a Rust type (``::``); a ``#suffix`` on a segment is dropped.
    """
    for marker in ("matmul_cache/", "matmul/"):
        at = op_name.find(marker)
        if at != -1:
            break
    else:
        return None
    meta: dict[str, str] = {}
    for segment in op_name[at:].split("/")[1:]:
        if "::" in segment:
            break
        token = segment.split("#", 1)[0]
        key, sep, value = token.partition("=")
        if sep and key:
            meta[key] = value
    return meta or None


def shape_key(meta: dict[str, Any]) -> str:
    """The profile's shape key: base keys (``?`` if absent), then the rest sorted."""
    parts = [f"{key}={meta.get(key, '?')}" for key in SHAPE_BASE_KEYS]
    extras = sorted((k, v) for k, v in meta.items() if k not in _NOT_EXTRA)
    parts.extend(f"{k}={v}" for k, v in extras)
    return " | ".join(parts)


def _shape_entry(meta: dict[str, Any], fallback_backend: Any) -> tuple[str, str, str]:
    """(shape key, op, backend) of one matmul's shape data; values are stringified."""
    meta = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in meta.items()}
    backend = str(meta.get("backend") or fallback_backend or UNKNOWN)
    return shape_key(meta), str(meta.get("op", UNKNOWN)), backend


def _nested_shape(data: dict[str, Any]) -> dict[str, Any] | None:
    """Shape data of a GpuOpCompleted: nested ``data`` (or ``data.data``) with an ``op``."""
    nested = data.get("data")
    if isinstance(nested, dict):
        inner = nested.get("data")
        if isinstance(inner, dict) and "op" in inner:
            return inner
        if "op" in nested:
            return nested
    return None


# ---- the scan ---------------------------------------------------------------

_SNIFF_LINES = 200


def open_binary(path: str | Path) -> IO[bytes]:
    """Open a profile for reading; gzip is detected by its magic bytes."""
    path = Path(path)
    if path.is_dir():
        raise ProfileError(f"{path} is a directory, not a profile")
    try:
        raw = path.open("rb")
    except OSError as exc:
        raise ProfileError(f"cannot read {path}: {exc.strerror or exc}") from None
    if raw.peek(2)[:2] == b"\x1f\x8b":
        return cast(IO[bytes], gzip.GzipFile(fileobj=raw))
    return raw


def open_text(path: str | Path) -> IO[str]:
    """The same, as text (undecodable bytes replaced, never fatal)."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", errors="replace")


def _not_jsonl_message(path: str, first_bad: list[str]) -> str:
    from matprobe.profile.textsummary import looks_like_shape_header

    def summary_like(line: str) -> bool:
        text = line.strip()
        return (
            looks_like_shape_header(text)
            or text.startswith(("=== Analyzing", "Total events:"))
            or text.endswith("summary:")
        )

    if any(summary_like(line) for line in first_bad):
        return (
            f"{path} looks like an analyzer text summary, not a JSONL profile; "
            f"`matprobe shapes {path}` reads those"
        )
    return f"{path} is not a JSONL profile: none of its first lines is a JSON event"


#: Files at least this big are scanned by several processes (plain files only:
#: a gzip stream cannot be split).
PARALLEL_MIN_BYTES = 32 * 2**20


def scan(path: str | Path, workers: int | None = None) -> ProfileScan:
    """Read a whole JSONL profile. Raises :class:`ProfileError` for a file that
    is empty or not JSONL at all; bad lines inside a real profile are counted.

    A large plain file is split at line boundaries into one chunk per CPU
    (``workers`` overrides); the chunks' results merge into the same figures a
    single pass gives.
    """
    path = Path(path)
    with open_binary(path) as handle:
        compressed = isinstance(handle, gzip.GzipFile)
        if workers is None:
            workers = min(os.cpu_count() or 1, 8)
        if not compressed and workers > 1 and path.stat().st_size >= PARALLEL_MIN_BYTES:
            return _scan_parallel(path, workers)
        lines = _UntilBroken(handle)
        try:
            result = scan_lines(lines, str(path))
        except ProfileError:
            if lines.error is None:
                raise
            raise ProfileError(
                f"cannot read {path}: the compressed stream breaks before its "
                f"first event ({lines.error})"
            ) from None
        except OSError as exc:  # a read error that is not a broken stream
            raise ProfileError(f"cannot read {path}: {exc}") from None
        if lines.error is not None:
            result.problems.add("truncated", result.lines + 1, type(lines.error).__name__)
        return result


class _UntilBroken:
    """The lines of a (gzip) stream up to where it breaks: a truncated or corrupt
    .gz is analysed as far as it goes, and the break is reported, not fatal."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.error: Exception | None = None

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self.handle
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            self.error = exc


def _chunk_bounds(path: Path, parts: int) -> list[tuple[int, int]]:
    size = path.stat().st_size
    cuts = [0]
    with path.open("rb") as handle:
        for i in range(1, parts):
            handle.seek(size * i // parts)
            handle.readline()  # move to the start of the next line
            cut = handle.tell()
            if cuts[-1] < cut < size:
                cuts.append(cut)
    cuts.append(size)
    return list(itertools.pairwise(cuts))


def _chunk_lines(path: Path, start: int, end: int) -> Iterator[bytes]:
    with path.open("rb") as handle:
        handle.seek(start)
        pos = start
        for line in handle:
            if pos >= end:
                return
            pos += len(line)
            yield line


def _scan_chunk(path: Path, start: int, end: int, first: bool) -> ProfileScan:
    """Worker: scan one chunk. The first sniffs whether this is a profile at all, as
    a single pass does; whether the file holds any event is decided after the merge
    (a first chunk of a few long lines that are not events is not a verdict)."""
    result = scan_lines(
        _chunk_lines(path, start, end), str(path), require_events=first, judge_end=False
    )
    return result.plain()


def _scan_parallel(path: Path, workers: int) -> ProfileScan:
    bounds = _chunk_bounds(path, workers)
    method = "fork" if sys.platform == "linux" else "spawn"
    with ProcessPoolExecutor(len(bounds), mp_context=multiprocessing.get_context(method)) as pool:
        futures = [
            pool.submit(_scan_chunk, path, start, end, i == 0)
            for i, (start, end) in enumerate(bounds)
        ]
        parts = [future.result() for future in futures]
    merged = parts[0]
    for part in parts[1:]:
        merged.merge(part)
    if merged.total_events == 0:
        raise ProfileError(f"{path} is not a JSONL profile: none of its lines is a JSON event")
    return merged


def scan_lines(
    lines: Iterable[bytes | str],
    path: str = "<lines>",
    *,
    require_events: bool = True,
    judge_end: bool = True,
) -> ProfileScan:
    """The scan proper: each line parsed, its event checked, its duration filed. The
    hot path (a million events in a few seconds): one flat loop over locals, the
    rare paths in helpers, and a timed event filed by one call of a recorder that
    keeps its groups and memos in closure cells (:func:`_gpu_op_recorder`)."""
    result = ProfileScan(path=path)
    problems = result.problems
    # locals, not globals, for the loop's lookups
    loads, decode_errors = _loads, _DECODE_ERRORS
    required_fields, known_types = _REQUIRED_FIELDS, KNOWN_EVENT_TYPES
    event_counts, event_durations, sync = result.event_counts, result.event_durations, result.sync
    record_gpu_op = _gpu_op_recorder(result)
    record_internal = _internal_recorder(result)

    total = lineno = nonblank = 0
    first_bad: list[str] = []  # a few unusable lines, to say what the file looks like

    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        nonblank += 1
        try:
            payload = loads(line)
        except decode_errors:
            problems.add("not_json", lineno)
            if total == 0 and require_events:
                _sniff(path, first_bad, line, nonblank)
            continue
        try:  # the common case first; anything odd falls to the careful path
            event = payload["event"]
            event_type = event["type"]
            data = event["data"]
        except (KeyError, TypeError, IndexError):
            event_type, data = _event_parts(payload)
        if type(event_type) is not str or not event_type or type(data) is not dict:
            problems.add("not_an_event", lineno)
            if total == 0 and require_events:
                _sniff(path, first_bad, line, nonblank)
            continue

        total += 1
        event_counts[event_type] += 1
        raw_duration: Any = data.get("duration_us")
        # bool is not a duration: compare exact types, not isinstance
        has_duration = type(raw_duration) is int or type(raw_duration) is float
        duration = float(raw_duration) if has_duration else 0.0
        out_of_range = False
        if has_duration and not 0.0 <= duration <= MAX_DURATION_US:  # NaN fails too
            problems.add("bad_value", lineno, f"{event_type}.duration_us")
            has_duration, out_of_range = False, True
        required = required_fields.get(event_type)
        if required is not None and not out_of_range:
            if not (required <= data.keys()) or (not has_duration and "duration_us" in required):
                _add_missing_field(problems, lineno, event_type, data, required, has_duration)
        elif event_type not in known_types:
            problems.add("unknown_type", lineno, event_type)

        if has_duration:
            event_durations[event_type].append(duration)
            name = data.get("internal_kernel_name") or data.get("op_name") or ""
            if isinstance(name, str) and "sync" in name.lower():
                sync.append(duration)
            if event_type == "GpuOpCompleted":
                record_gpu_op(data, duration)
            elif event_type == "InternalKernelCompleted":
                record_internal(data, duration)
        if event_type == "KernelBackendSelected":
            _record_selection(result, data)

    result.total_events = total
    result.lines = lineno
    if judge_end and require_events:
        _judge_whole_file(path, nonblank, total, first_bad)
    return result


_REQUIRED_FIELDS = {name: frozenset(names) for name, names in REQUIRED_FIELDS.items()}


def _sniff(path: str, first_bad: list[str], line: bytes | str, nonblank: int) -> None:
    """Before the first event: is this a profile at all? Keeps a few unusable
    lines to say what the file looks like, and gives up after :data:`_SNIFF_LINES`."""
    if len(first_bad) < 20:
        first_bad.append(line.decode("utf-8", "replace") if isinstance(line, bytes) else line)
    if nonblank >= _SNIFF_LINES:
        raise ProfileError(_not_jsonl_message(path, first_bad))


def _judge_whole_file(path: str, nonblank: int, total: int, first_bad: list[str]) -> None:
    """A whole file that held no line, or no event, is not a profile."""
    if nonblank == 0:
        raise ProfileError(f"{path} is empty")
    if total == 0:
        raise ProfileError(_not_jsonl_message(path, first_bad))


def _event_parts(payload: Any) -> tuple[Any, Any]:
    """(type, data) of a payload that is not the plain ``{"event": {"type", "data"}}``:
    whatever is there, for the caller's check (``data`` defaults to ``{}``)."""
    event = payload.get("event") if isinstance(payload, dict) else None
    if not isinstance(event, dict):
        return None, None
    return event.get("type"), event.get("data", {})


def _add_missing_field(
    problems: Problems,
    lineno: int,
    event_type: str,
    data: dict[str, Any],
    required: frozenset[str],
    has_duration: bool,
) -> None:
    """Count an event of a known type that lacks a field the analysis needs (a
    duration that is there but not a number counts as missing)."""
    missing = sorted(
        name
        for name in required
        if data.get(name) is None or (name == "duration_us" and not has_duration)
    )
    problems.add("missing_field", lineno, f"{event_type}.{'/'.join(missing)}")


def _gpu_op_recorder(result: ProfileScan) -> Callable[[dict[str, Any], float], None]:
    """Files one timed GpuOpCompleted as command-buffer GPU time (``/cb_gpu``), a
    host wait (``cb_wait``, or a name ending in ``wait``) or a kernel, by name and
    kernel type, and then, when it carries shape data, as a matmul by backend,
    op/backend and shape. Routes are memoized by op name and shape entries by shape
    data: both repeat a lot."""
    cb_gpu, gpu_waits = result.cb_gpu, result.gpu_waits
    gpu_kernels, gpu_kernel_types = result.gpu_kernels, result.gpu_kernel_types
    matmul_backends, matmul_op_backends = result.matmul_backends, result.matmul_op_backends
    matmul_shapes = result.matmul_shapes
    # op_name → (the group it is filed in, kernel type, legacy shape data)
    op_routes: dict[str, tuple[dict[str, array[float]], str, dict[str, str] | None]] = {}
    # (shape data items, event backend) → (shape key, op, backend)
    shape_memo: dict[Any, tuple[str, str, str]] = {}

    def record(data: dict[str, Any], duration: float) -> None:
        op_name = data.get("op_name")
        if not isinstance(op_name, str) or not op_name:
            op_name = UNKNOWN
        route = op_routes.get(op_name)
        if route is None:
            if "/cb_gpu" in op_name:
                route = (cb_gpu, "", None)
            elif "cb_wait" in op_name or op_name.endswith("wait"):
                route = (gpu_waits, "", None)
            else:
                route = (gpu_kernels, kernel_type(op_name), legacy_matmul_meta(op_name))
            op_routes[op_name] = route
        group, type_name, legacy_meta = route
        group[op_name].append(duration)
        if group is not gpu_kernels:
            return
        gpu_kernel_types[type_name].append(duration)
        meta = _nested_shape(data) if "data" in data else None
        if meta is None:
            meta = legacy_meta
            if meta is None:
                return
        event_backend = data.get("backend")
        try:
            memo_key: Any = (tuple(meta.items()), event_backend)
            entry = shape_memo.get(memo_key)
        except TypeError:  # unhashable values: compute, do not memoize
            memo_key, entry = None, None
        if entry is None:
            entry = _shape_entry(meta, event_backend)
            if memo_key is not None:
                shape_memo[memo_key] = entry
        key, op, backend = entry
        matmul_backends[backend].append(duration)
        matmul_op_backends[(op, backend)].append(duration)
        matmul_shapes[key][backend].append(duration)

    return record


def _internal_recorder(result: ProfileScan) -> Callable[[dict[str, Any], float], None]:
    """Files one timed InternalKernelCompleted by parent, parent/kernel and kernel."""
    by_parent, by_parent_op, kernels = (
        result.internal_by_parent,
        result.internal_by_parent_op,
        result.kernels,
    )

    def record(data: dict[str, Any], duration: float) -> None:
        parent = str(data.get("parent_op_name") or UNKNOWN)
        kernel = str(data.get("internal_kernel_name") or UNKNOWN)
        by_parent[parent].append(duration)
        by_parent_op[(parent, kernel)].append(duration)
        kernels[kernel].append(duration)

    return record


def _record_selection(result: ProfileScan, data: dict[str, Any]) -> None:
    """Counts one KernelBackendSelected by backend, reason and op/backend."""
    op_name = str(data.get("op_name") or UNKNOWN)
    backend = str(data.get("backend") or UNKNOWN)
    result.selection_by_backend[backend] += 1
    result.selection_by_reason[str(data.get("reason") or UNKNOWN)] += 1
    result.selection_by_op_backend[(op_name, backend)] += 1
