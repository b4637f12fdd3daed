"""What a capture holds: every matmul call of one decode step, in the order it ran.

Torch-free, so the comparison and the profile writer can be used (and tested)
on captures built by hand.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from matprobe.profile.models import ModelConfig
from matprobe.spec import MatmulSpec

_LAYER_INDEX = re.compile(r"(^|\.)layers\.\d+(?=\.|$)")


@dataclass(frozen=True)
class CapturedCall:
    """One matmul: its spec, the module that ran it and the call that computed it.

    ``site`` is the module's path in the model (``model.layers.3.self_attn.q_proj``,
    ``""`` for the model itself); ``call`` the aten op (``addmm``) or, for attention,
    which of its two products this is (``sdpa_qk``, ``sdpa_pv``).
    """

    spec: MatmulSpec
    site: str
    call: str

    @property
    def site_pattern(self) -> str:
        """The site with its layer number folded (``model.layers.*.mlp.up_proj``):
        every layer runs the same matmuls, so this is what one spec's calls share."""
        return _LAYER_INDEX.sub(r"\1layers.*", self.site)


@dataclass(frozen=True)
class Capture:
    """One decode step of a model: one new token after ``cached`` cached tokens.

    ``model`` holds the numbers the model was built from (``layers`` as run, after
    ``--layers``); ``known_name`` says whether ``matprobe shapes --model`` knows it.
    ``unhandled`` counts calls (``aten::mv``) whose name looks like a matmul but that no rule
    turns into a spec (so a new op is reported, never silently dropped);
    ``warnings`` are the messages transformers gave, to be shown escaped.
    """

    model: ModelConfig
    known_name: bool
    architecture: str
    cached: int
    dtype: str
    device: str
    calls: tuple[CapturedCall, ...]
    unhandled: tuple[tuple[str, int], ...] = ()
    warnings: tuple[str, ...] = ()
    versions: tuple[tuple[str, str], ...] = ()

    @property
    def context(self) -> int:
        """Keys the new token attends to: the cached tokens and itself."""
        return self.cached + 1

    def counts(self) -> dict[MatmulSpec, int]:
        """Calls per token of each spec, in the order each first ran."""
        return dict(Counter(call.spec for call in self.calls))

    def sites(self) -> dict[MatmulSpec, tuple[str, ...]]:
        """The (layer-folded) modules each spec ran in, in first-seen order."""
        found: dict[MatmulSpec, dict[str, None]] = {}
        for call in self.calls:
            found.setdefault(call.spec, {})[call.site_pattern or "(model)"] = None
        return {spec: tuple(sites) for spec, sites in found.items()}
