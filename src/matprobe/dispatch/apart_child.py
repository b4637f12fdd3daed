"""The process a token's table modes run in when the table names plugins
(:mod:`~matprobe.token.apart`, the judge's side).

It answers the judge's pings before it imports anything of the plugins' (so the
judge learns what a message costs before plugin code could slow one), imports
them, then builds the decode step over a copy of the weights of its own — drawn
from the same seed, so the same values as the judge's — and the table modes'
calls (a CUDA graph each on a card). For each ``run`` it replays one mode on the
inputs the judge wrote into the shared block (an embedding and the RoPE tables
of a position per replay, back to back), writes each replay's logits and the KV
slot the last one appended back there, and says ``done`` once the card has
finished. It sends JSON only; whatever it says of itself — done, the kernels it
counted, a profile — the judge believes only its own clock and the block for
a verdict.

Messages, judge → here: ``("ping",)``, ``("import",)``, ``("table", setup)``,
``("bench", handle)``, ``("build", mode)``, ``("run", mode, replays)``,
``("count", mode)``, ``("profile", mode, tokens)``, ``None`` to stop; here →
judge: ``("ready",)``, ``("pong",)``, ``("imported",)``, ``("loaded",)``,
``("built",)``, ``("done",)``, ``("counted", kernels, copies, what)``,
``("profiled", tokens)``, ``("error", text)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: What answers in the table's process
#: (:func:`~matprobe.run.witness_child.child_main`'s ``served``).
TABLE_SERVER = "matprobe.dispatch.apart_child:TableServer"


class TableServer:
    """The step, its modes' calls and the shared block, once ``bench`` has set them up."""

    def __init__(self, factory: str, plugins: tuple[str, ...], kind: str) -> None:
        self.factory, self.plugins, self.kind = factory, plugins, kind
        self.bench: Any = None
        self.block: dict[str, Any] = {}
        self.keep: Any = None  # the block's mapping, held while it is used
        self.calls: dict[str, Callable[[], Any]] = {}
        self.linears: dict[str, Any] = {}
        self.setup: dict[str, Any] = {}

    def imports(self) -> None:
        from matprobe.measure.variants import registry_with_plugins

        registry_with_plugins(self.factory, self.plugins)

    def handlers(self) -> dict[str, Callable[..., tuple[Any, ...]]]:
        return {
            "table": self._table,
            "bench": self._bench,
            "build": self._build,
            "run": self._run,
            "count": self._count,
            "profile": self._profile,
        }

    def _table(self, setup: dict[str, Any]) -> tuple[Any, ...]:
        """The table's kernels, checked against this device and the plugins' code
        (a table for another card, or of changed kernels, fails here)."""
        from matprobe.dispatch import DispatchTable, custom_op_linear, table_linear
        from matprobe.measure.device import detect

        info = detect(self.kind)
        table = DispatchTable.from_dict(setup["table"])
        self.linears = {"table": table_linear(table, info)}
        if "table-op" in setup["kernels"]:
            self.linears["table-op"] = custom_op_linear(table, info)
        self.setup = setup
        return ("loaded",)

    def _bench(self, handle: dict[str, Any]) -> tuple[Any, ...]:
        from matprobe.profile.models import ModelConfig
        from matprobe.run.shared_arena import attach
        from matprobe.token.bench import TokenBench

        setup = self.setup
        self.bench = TokenBench(
            ModelConfig(**setup["config"]),
            context=int(setup["context"]),
            dtype=str(setup["dtype"]),
            device=self.kind,
            seed=int(setup["seed"]),
            linears=self.linears,
            judged=False,
        )
        self.block, self.keep = attach(handle)
        return ("built",)

    def _build(self, name: str) -> tuple[Any, ...]:
        from matprobe.token.modes import MODES

        self.calls[name] = self.bench.build(MODES[name])
        return ("built",)

    def _run(self, name: str, replays: int) -> tuple[Any, ...]:
        """``replays`` replays of ``name`` back to back, each on row ``i`` of the
        block's inputs, its logits copied into row ``i``; the KV slot after the last."""
        call, block, weights = self.calls[name], self.block, self.bench.weights
        for i in range(int(replays)):
            weights.x0.copy_(block["x0"][i])
            weights.cos.copy_(block["cos"][i])
            weights.sin.copy_(block["sin"][i])
            block["logits"][i].copy_(call())
        block["slot"].copy_(self.bench.new_slot())
        if self.kind == "cuda":
            import torch

            torch.cuda.synchronize()
        return ("done",)

    def _count(self, name: str) -> tuple[Any, ...]:
        from matprobe.token.timing import count_kernels

        counted = count_kernels(self.calls[name], self.kind)
        return ("counted", counted.kernels, counted.copies, counted.what)

    def _profile(self, name: str, tokens: int) -> tuple[Any, ...]:
        from matprobe.token.modes import MODES
        from matprobe.token.profile import record_token

        linear = self.bench.linears[MODES[name].kernels]
        recorded = record_token(self.bench.step, linear, tokens=int(tokens), device_kind=self.kind)
        return ("profiled", [[[s.label, s.start_us, s.kernels] for s in one] for one in recorded])
