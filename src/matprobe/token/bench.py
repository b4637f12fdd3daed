"""One decode token in several modes, in one process: build, validate, time.

:class:`TokenBench` holds one model's step (weights on the device, in the
token's dtype) and its float64 reference logits. :meth:`TokenBench.run` builds
every selected mode's call (eager, or compiled by ``torch.compile``; on CUDA
captured as one graph), validates its logits against float64 on every trial,
counts its kernels, then times every mode that passed (and the matmul-less
ones) in interleaved rounds. A mode that fails or errors costs its own row
only, and is never timed: a wrong token is never a fast one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch

from matprobe.errors import MatprobeError
from matprobe.profile.models import ModelConfig
from matprobe.token.apart import Apart, ApartOwner, RemoteCall, aside, warmed
from matprobe.token.calls import (
    Compiler,
    device_description,
    fused_step_call,
    inductor,
    one_line,
    step_call,
)
from matprobe.token.floor import ByteFloor
from matprobe.token.judge import (
    InputDraws,
    JudgedBench,
    ReplayJudge,
    cache_failure,
    keeping,
    step_inputs,
    validation_error,
)

if TYPE_CHECKING:
    from matprobe.kernels.triton.decode import DecodeTile
    from matprobe.token.fused import DecodeKernels
from matprobe.token.linear import LinearFn, NoMatmul, torch_linear
from matprobe.token.modes import BASELINE, PEER_DTYPE, Mode, ModeSelection
from matprobe.token.result import ModeResult, TokenResult
from matprobe.token.step import DecodeStep, FusedOps, site_specs
from matprobe.token.timing import (
    WINDOW,
    TokenCall,
    back_to_back_us,
    count_kernels,
    cuda_time_us,
    host_time_us,
    interleaved_rounds,
    prepare,
)
from matprobe.token.validate import (
    Tolerance,
    baseline_bound,
    relative_to_baseline,
)
from matprobe.token.weights import embeddings, make_weights, place, position_tables

__all__ = ["TokenBench", "step_call"]

#: Validation trials: the generated embedding, then fresh ones written in place,
#: so a kernel that memoises its output (by pointer, or from the first call)
#: fails on the second.
DEFAULT_TRIALS = 2


class TokenBench:
    """One model's decode step on one device, with its float64 reference logits.

    ``linears`` supplies the kernels modes other than torch's and none need:
    ``"table"`` (the dispatch table's kernels, eager) and ``"table-op"`` (the
    same as custom ops, for torch.compile); the ``triton.gemv_decode`` modes
    make theirs (``fused`` replaces the eager fused mode's).

    With ``dtype="q8_0"`` the weight matrices are Q8_0 and the peer modes
    (``f16:…``) run the same model unquantized, in its own bench (:meth:`peer`),
    validated against its own float64 reference and timed in the same rounds.

    ``apart``: the process the modes of a table that names plugins run in
    (:mod:`~matprobe.token.apart`); this one poses, times and judges them. A bench
    that only replays, there, is made with ``judged=False`` (no references)."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        context: int,
        dtype: str,
        device: str,
        seed: int = 0,
        trials: int = DEFAULT_TRIALS,
        linears: Mapping[str, LinearFn] | None = None,
        compiler: Compiler = inductor,
        progress: Callable[[str], None] | None = None,
        fused: FusedOps | None = None,
        tiles: Mapping[str, DecodeTile] | None = None,
        apart: Apart | None = None,
        judged: bool = True,
    ) -> None:
        if trials < 1:
            raise MatprobeError(f"trials must be at least 1, got {trials}")
        self.config = config
        self.context = context
        self.dtype = dtype
        self.device = device
        self.trials = trials
        self.compiler = compiler
        self.progress = progress or (lambda message: None)
        self.specs = site_specs(config, context=context, dtype=dtype)
        self.weights = make_weights(config, context=context, dtype=dtype, device=device, seed=seed)
        self.step = DecodeStep(config, self.weights, self.specs, context=context)
        none = NoMatmul()
        none.prepare(self.specs, self.step.dtype, device)
        tied = NoMatmul(tied=True)
        tied.prepare(self.specs, self.step.dtype, device)
        self.linears: dict[str, LinearFn] = {
            "torch": torch_linear,
            "none": none,
            "none-tied": tied,
        }
        self.linears.update(linears or {})
        self.seed = seed
        self._slot_draws: torch.Generator | None = None
        self._decode_kernels: dict[tuple[bool, bool], DecodeKernels] = {}
        #: the eager fused mode's kernels when not triton.gemv_decode's (tests)
        self.fused = fused
        #: GEMV tiles by site for the triton.gemv_decode modes (a table's winners)
        self.tiles = dict(tiles or {})
        self._peer: TokenBench | None = None
        self.apart = apart
        #: the modes built apart, by name
        self.remote: dict[str, RemoteCall] = {}
        extra = embeddings(config, trials - 1, dtype=dtype, device=device, seed=seed + 1)
        self.inputs = [self.weights.x0.clone(), *extra]
        self.references = self._references() if judged else []

    def _references(self) -> list[torch.Tensor]:
        """float64 logits of every trial: the same step over the same weights, upcast."""
        self._exact = self.weights.map(lambda t: t.to(torch.float64))
        self._exact_step = DecodeStep(self.config, self._exact, self.specs, context=self.context)
        return [self.reference(x0) for x0 in self.inputs]

    def reference(self, x0: torch.Tensor, position: int | None = None) -> torch.Tensor:
        """float64 logits (on the CPU) of the step on the input embedding ``x0`` at RoPE
        ``position`` (None: the bench's, ``context - 1``)."""
        self._exact.x0.copy_(x0)
        at = self.context - 1 if position is None else position
        place(self._exact, self.config.head_dim, at, self.step.dtype)
        return self._exact_step.forward(torch_linear).to("cpu")

    def place(self, position: int) -> None:
        """The step's RoPE tables for ``position`` (``context - 1`` puts them back)."""
        place(self.weights, self.config.head_dim, position, self.step.dtype)

    def tables(self, position: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The RoPE tables :meth:`place` writes for ``position``, as new tensors."""
        return position_tables(self.weights, self.config.head_dim, position, self.step.dtype)

    def scramble_new_slot(self) -> None:
        """Fresh values in every layer's KV slot at ``context - 1`` before a judged
        call: the step writes that slot before it reads it, so only a call that
        never wrote it leaves them there (after a mode that did, the slot would
        already hold the right key for the same input)."""
        pos = self.context - 1
        for cache in (*self.weights.k_cache, *self.weights.v_cache):
            slot = cache[:, pos]
            if self._slot_draws is None:  # its own stream of values, seeded by the OS
                self._slot_draws = torch.Generator(device=slot.device)
                self._slot_draws.seed()
            drawn = torch.rand(slot.shape, device=slot.device, generator=self._slot_draws)
            slot.copy_(drawn * 4 - 2)

    def new_slot(self, *, exact: bool = False) -> torch.Tensor:
        """Every layer's key and value at ``context - 1``, ``[layers, 2, kv_width]``:
        what the step's last call appended (``exact``: the float64 step's, after
        :meth:`reference`)."""
        weights = self._exact if exact else self.weights
        pos = self.context - 1
        return torch.stack(
            [torch.stack((k[:, pos].reshape(-1), v[:, pos].reshape(-1)))
             for k, v in zip(weights.k_cache, weights.v_cache, strict=True)]
        )  # fmt: skip

    def decode_kernels(self, *, as_op: bool, pdl: bool = False) -> DecodeKernels:
        """The ``triton.gemv_decode`` kernels over this step's weights (made once a
        kind): as custom ops, or launched with programmatic dependent launch."""
        if (as_op, pdl) not in self._decode_kernels:
            from matprobe.token.fused import DecodeKernels

            self._decode_kernels[as_op, pdl] = DecodeKernels(
                self.weights, self.specs, as_op=as_op, pdl=pdl, tiles=self.tiles
            )
        return self._decode_kernels[as_op, pdl]

    def peer(self) -> TokenBench:
        """The same model in :data:`~matprobe.token.modes.PEER_DTYPE` (the same
        draws, unquantized), for a Q8_0 token's peer modes; made once."""
        if self._peer is None:
            self._peer = TokenBench(
                self.config, context=self.context, dtype=PEER_DTYPE, device=self.device,
                seed=self.seed, trials=self.trials, compiler=self.compiler,
                progress=self.progress,
            )  # fmt: skip
        return self._peer

    def build(self, mode: Mode) -> TokenCall:
        """The call that runs ``mode``'s token: its graph on CUDA, else the step."""
        if mode.peer is not None:
            return self.peer().build(mode.own)
        if self.apart is not None and mode.kernels in self.apart.kernels:
            self.remote[mode.name] = self.apart.call(mode, self)
            return self.remote[mode.name]
        kernels = mode.kernels
        if kernels in ("layer", "layer-pdl"):
            own = self.decode_kernels(as_op=False, pdl=kernels == "layer-pdl")
            call = fused_step_call(self.step, own, attention=own.attention())
        elif mode.fused:
            as_op = kernels == "fused-op"
            fused = self.fused if self.fused and not as_op else self.decode_kernels(as_op=as_op)
            call = fused_step_call(self.step, fused)
        else:
            if kernels == "none" and mode.compile is not None:
                kernels = "none-tied"  # a constant would be folded away with the whole step
            if kernels == "decode":
                self.linears.setdefault("decode", self.decode_kernels(as_op=False).linear())
            linear = self.linears.get(kernels)
            if linear is None:
                raise MatprobeError(f"no {mode.kernels!r} kernels given for mode {mode.name}")
            call = step_call(self.step, linear)
        if mode.compile is not None:
            call = self.compiler(call, mode.compile)
        return prepare(call, self.device)

    def _check(self, mode: Mode, tolerance: Tolerance) -> tuple[ModeResult, TokenCall | None]:
        """Build ``mode`` and validate its logits (within ``tolerance``; a peer's
        against its own float64 reference): the row, and the call if it was built.
        Any exception costs this mode its row only."""
        result = ModeResult(mode, "ERROR")
        try:
            call = self.build(mode)
            if mode.validated:
                owner = self._owner(mode)
                result.error = validation_error(owner, call)
                if broke := self._apart_failure(mode):
                    result.status, result.reason = "ERROR", broke
                    return result, None
                failure = tolerance.failure(result.error) or cache_failure(owner, tolerance)
                result.status, result.reason = ("FAIL", failure) if failure else ("PASS", "")
            else:
                call()
                result.status, result.reason = "UNCHECKED", "matmuls left out: not validated"
        except Exception as exc:  # a crash, a compile error, a wrong output shape
            result.status, result.reason = "ERROR", one_line(exc)
            return result, None
        return result, call

    def _owner(self, mode: Mode) -> JudgedBench:
        """What judges ``mode``: its peer bench, this bench as a mode run apart sees
        it, or this bench."""
        if mode.peer is not None:
            return self.peer()
        remote = self.remote.get(mode.name)
        return self if remote is None else ApartOwner(self, remote)

    def _apart_failure(self, mode: Mode) -> str | None:
        remote = self.remote.get(mode.name)
        if remote is None or remote.failure is None:
            return None
        return f"judged apart: {remote.failure}"

    def _count_kernels(
        self,
        results: list[ModeResult],
        built: dict[str, TokenCall],
        samples: dict[str, list[float]],
    ) -> None:
        """Each built mode's kernels, counted after the rounds: once the profiler
        (CUPTI) has run in a process, every later graph launch costs more host
        time — on an H100 the one-replay-after-a-sync clock of a token rose by
        ~145 µs when its kernels were counted before the rounds."""
        for result in results:
            call = built.get(result.mode.name)
            if call is None:
                continue
            remote = self.remote.get(result.mode.name)
            if remote is not None and remote.failure is not None:
                continue  # its process is gone: its row says so
            try:
                result.kernels = remote.count() if remote else count_kernels(call, self.device)
            except Exception as exc:
                result.status, result.reason = "ERROR", f"counting kernels: {one_line(exc)}"
                samples.pop(result.mode.name, None)
                result.latency_samples_us = []

    def run(
        self,
        selection: ModeSelection,
        *,
        rounds: int,
        read_ceiling: Callable[[], tuple[float, str]] | None = None,
    ) -> TokenResult:
        """Validate every mode, time those that passed in interleaved rounds (every
        timed replay judged on a fresh input), and report them. ``read_ceiling``
        (GB/s and how it was reached; :func:`~matprobe.token.floor.measure_read_ceiling`)
        is measured once every mode is timed: measured before the modes were
        captured, its kernels left the graphs captured next in another state than
        a graph an engine captures (eager 1940 against 2300 µs on an H200,
        layer+pdl 440 against 429; BENCHMARKS.md, thirtieth session)."""
        if not selection.modes or selection.modes[0].name != BASELINE:
            raise MatprobeError(f"the modes must start with the baseline, {BASELINE}")
        k_max = max(spec.k or 0 for spec in self.specs.values())
        bound = baseline_bound(self.dtype, self.config.layers, k_max)
        results, built, tolerances = self._validate_modes(selection, bound, k_max)
        calls = {
            r.mode.name: built[r.mode.name]
            for r in results
            if r.status in ("PASS", "UNCHECKED") and r.mode.name in built
        }
        samples = self._timed_rounds(results, calls, tolerances, rounds, k_max)
        self._count_kernels(results, built, samples)
        read_gbps, ceiling = read_ceiling() if read_ceiling is not None else (None, "")
        for result in results:
            result.samples_us = samples.get(result.mode.name, [])
            rest = result.mode.rest
            if result.samples_us and rest is not None and samples.get(rest):
                result.share_samples_us = [
                    mine - other
                    for mine, other in zip(result.samples_us, samples[rest], strict=True)
                ]
        tolerance = tolerances[None]
        device_name, versions = device_description(self.device)
        return TokenResult(
            config=self.config,
            context=self.context,
            dtype=self.dtype,
            device_kind=self.device,
            device_name=device_name,
            versions=versions,
            rounds=rounds if calls else 0,
            trials=self.trials,
            clock=(
                f"CUDA events; µs/token: {WINDOW} graph replays back to back, each on a "
                "fresh input (its copies subtracted); after sync: one replay from an idle GPU"
                if self.device == "cuda"
                else "host clock around each eager call"
            ),
            modes=results,
            skipped=list(selection.skipped),
            notes=[*selection.notes, *self._apart_notes()],
            baseline_bound=bound,
            tolerance=tolerance if tolerance is not bound else None,
            floor=ByteFloor(
                self.weights.weight_bytes(), self.weights.kv_bytes(), read_gbps, ceiling
            ),
        )

    def _apart_notes(self) -> list[str]:
        if self.apart is None or not self.remote:
            return []
        return [f"{', '.join(self.remote)}: {self.apart.clock}"]

    def _validate_modes(
        self, selection: ModeSelection, bound: Tolerance, k_max: int
    ) -> tuple[list[ModeResult], dict[str, TokenCall], dict[str | None, Tolerance]]:
        """Each mode checked against float64 (:meth:`_check`): the results, the calls
        of the modes that were built, and the bound each peer dtype's modes are
        held to (the baseline's absolute bound until a baseline passes, then a
        multiple of its error)."""
        tolerances = {None: bound, PEER_DTYPE: baseline_bound(PEER_DTYPE, self.config.layers,
                                                              k_max)}  # fmt: skip
        results: list[ModeResult] = []
        calls: dict[str, TokenCall] = {}
        for mode in selection.modes:
            result, call = self._check(mode, tolerances[mode.peer])
            results.append(result)
            self.progress(f"{mode.name}: {result.status} {result.reason}".rstrip())
            if mode.own.name == BASELINE and result.status == "PASS" and result.error is not None:
                dtype = mode.peer or self.dtype
                tolerances[mode.peer] = relative_to_baseline(result.error, dtype, k_max)
            if call is not None:
                calls[mode.name] = call
        return results, calls, tolerances

    def _window(
        self, mode: Mode, call: TokenCall, judge: ReplayJudge | None
    ) -> Callable[[], float]:
        """One back-to-back window of ``call`` on fresh inputs (:data:`WINDOW`), its
        logits handed to ``judge`` (a mode that computes nothing has none)."""
        owner = self._owner(mode)
        draws = judge.draws if judge is not None else InputDraws(owner)
        inputs = step_inputs(owner)
        remote = self.remote.get(mode.name)

        def window() -> float:
            drawn, staged = draws.window(WINDOW)
            if judge is not None:
                owner.scramble_new_slot()  # the window's last replay must append
            if remote is not None:
                us, kept = remote.replays(staged)
            else:
                us, kept = back_to_back_us(call, inputs, staged)
            if judge is not None:
                judge.keep_window(drawn, kept, owner.new_slot())
            return us

        if remote is not None:
            return warmed(remote, window)
        return aside(self.apart, window, self._warm(call, judge))

    def _timer(self, name: str, call: TokenCall, judge: ReplayJudge | None) -> Callable[[], float]:
        """One latency sample of ``call``: this process's clock around it, with the
        process of the modes run apart stopped meanwhile; a mode run apart, the
        clock this process kept around its message."""
        kept = keeping(call, judge)
        remote = self.remote.get(name)
        if remote is not None:
            return warmed(remote, lambda: (kept(), remote.last_us)[1])
        clock = cuda_time_us if self.device == "cuda" else host_time_us
        return aside(self.apart, lambda: clock(kept), self._warm(call, judge))

    def _warm(self, call: TokenCall, judge: ReplayJudge | None) -> Callable[[], None]:
        """``call`` untimed (on an input of its own where judged), then the device
        waited for: a latency replay still starts from an idle card."""

        def warm() -> None:
            if judge is None:
                call()
            else:
                judge.elsewhere(call)
            if self.device == "cuda":
                torch.cuda.synchronize()

        return warm

    def _timed_rounds(
        self,
        results: list[ModeResult],
        calls: dict[str, TokenCall],
        tolerances: dict[str | None, Tolerance],
        rounds: int,
        k_max: int,
    ) -> dict[str, list[float]]:
        """The modes' calls in interleaved rounds, each timed replay of a validated
        mode on a fresh input and judged afterwards; the samples of every mode
        whose timed replays all passed (a failing one's result says why)."""
        if not calls:
            return {}
        judges = {
            r.mode.name: ReplayJudge(self._owner(r.mode), r.mode)
            for r in results
            if r.mode.name in calls and r.mode.validated
        }
        latency = interleaved_rounds(
            {name: self._timer(name, call, judges.get(name)) for name, call in calls.items()},
            rounds,
            lambda timer: timer(),
            before=lambda name, index: judges[name].fresh(index) if name in judges else None,
            after=lambda name, index: judges[name].keep(index) if name in judges else None,
        )
        samples = latency
        if self.device == "cuda":  # the headline: back to back, as a serving loop runs
            modes = {r.mode.name: r.mode for r in results}
            windows = {
                name: self._window(modes[name], call, judges.get(name))
                for name, call in calls.items()
            }
            samples = interleaved_rounds(
                windows,
                rounds,
                lambda window: window(),
            )
            for result in results:
                result.latency_samples_us = latency.get(result.mode.name, [])
        for result in results:
            judge = judges.get(result.mode.name)
            if judge is None:
                continue
            # The baseline is held to its absolute bound, every other mode to the one
            # it was validated against (a multiple of the baseline's error).
            if failure := self._apart_failure(result.mode):
                result.status, result.reason = "ERROR", failure
                samples.pop(result.mode.name, None)
                continue
            own = result.mode.own.name == BASELINE
            bound_of = (
                baseline_bound(result.mode.peer or self.dtype, self.config.layers, k_max)
                if own
                else tolerances[result.mode.peer]
            )
            result.judged, failure = judge.verdict(bound_of)
            if failure:
                result.status, result.reason = "FAIL", failure
                samples.pop(result.mode.name, None)  # a wrong token is never a fast one
        return samples
