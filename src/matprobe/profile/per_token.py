"""Calls per decode token, from a profile's own structure.

A profile counts calls over a whole run, not per token. Dividing every count
by the run's tokens is right for the weight matmuls (each runs once a layer,
every token) but wrong for attention: its shapes carry the context length L,
which grows by one a token, so each L is seen in exactly one decode step. The
built-in profile's Q·Kᵀ shapes have count 24 (the layers) at 17 distinct L;
÷ 95 tokens made them 8.6 calls per token instead of 24 (48 with P·V).

A *site* is a group of attention-shaped specs identical except for the
context-length dimension (n of Q·Kᵀ, tB = 1; k of P·V, tB = 0). Its calls per
token are Σ count ÷ distinct lengths seen, and each of its specs weighs its
count ÷ that number. Any other spec weighs count ÷ tokens.

Pure Python over :class:`~matprobe.spec.MatmulSpec`: no torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from matprobe.spec import MatmulSpec


@dataclass(frozen=True)
class Site:
    """One attention product of a layer, over the context lengths the profile saw."""

    label: str  # the specs' common key, the context-length dimension shown as L
    context_dim: str  # "n" or "k"
    lengths: tuple[int, ...]  # distinct context lengths, ascending
    calls: int  # Σ count over the site's specs

    @property
    def calls_per_token(self) -> float:
        return self.calls / len(self.lengths)


@dataclass(frozen=True)
class PerToken:
    """Calls per token of each spec (by key), and how they were derived."""

    weights: Mapping[str, float | None]  # spec key → calls per token (None: no tokens)
    sites: tuple[Site, ...]
    tokens: int | None

    def weight(self, spec: MatmulSpec) -> float | None:
        return self.weights.get(spec.key())

    def describe(self) -> str:
        """One line: how the counts became calls per token."""
        if self.tokens:
            parts = [f"other specs count ÷ {self.tokens} tokens"]
        else:
            parts = ["other specs: no token count (give --tokens)"]
        if self.sites:
            parts.append(_describe_sites(self.sites))
        return "calls per token: " + "; ".join(parts)


def _describe_sites(sites: Sequence[Site]) -> str:
    """``2 attention sites: Σ count ÷ context lengths seen = 24 per site (528 ÷ 22 with
    k=L, 288 ÷ 12 with n=L); 48 attention calls per token``."""
    each = ", ".join(f"{s.calls} ÷ {len(s.lengths)} with {s.context_dim}=L" for s in sites)
    per_site = {round(s.calls_per_token, 6) for s in sites}
    figure = (
        f"{sites[0].calls_per_token:g} per site"
        if len(per_site) == 1
        else " / ".join(f"{s.calls_per_token:g}" for s in sites)
    )
    total = sum(s.calls_per_token for s in sites)
    noun = "site" if len(sites) == 1 else "sites"
    return (
        f"{len(sites)} attention {noun}: Σ count ÷ context lengths seen = {figure} "
        f"({each}); {total:g} attention calls per token"
    )


def context_dim(spec: MatmulSpec) -> str | None:
    """The dimension holding the context length, for an attention-shaped spec:
    batched over heads (batch > 1; decode's weight matmuls are batch 1), with n
    the keys (Q·Kᵀ, tB = 1) or k the keys (P·V, tB = 0). None otherwise."""
    if spec.batch is None or spec.batch <= 1 or spec.tB is None:
        return None
    dim = "n" if spec.tB else "k"
    return dim if getattr(spec, dim) is not None else None


def _count(spec: MatmulSpec) -> int:
    return spec.provenance.count if spec.provenance else 0


def find_sites(specs: Sequence[MatmulSpec]) -> dict[str, tuple[Site, list[MatmulSpec]]]:
    """Sites (≥ 2 distinct context lengths) by label, each with its specs."""
    groups: dict[str, tuple[str, list[MatmulSpec]]] = {}
    for spec in specs:
        dim = context_dim(spec)
        if dim is None or _count(spec) <= 0:
            continue
        # Everything but L must match: the key with L blanked out says exactly that.
        blank = replace(spec, n=None) if dim == "n" else replace(spec, k=None)
        label = blank.key().replace(f"{dim}=?", f"{dim}=L")
        groups.setdefault(label, (dim, []))[1].append(spec)
    sites = {}
    for label, (dim, members) in groups.items():
        lengths = tuple(sorted({int(getattr(s, dim)) for s in members}))
        if len(lengths) >= 2:  # one length: nothing says how many steps it spans
            site = Site(label, dim, lengths, sum(_count(s) for s in members))
            sites[label] = (site, members)
    return sites


def per_token_weights(specs: Sequence[MatmulSpec], tokens: int | None) -> PerToken:
    """Calls per token of every spec: a site member's count ÷ its site's distinct
    context lengths, any other spec's count ÷ ``tokens`` (None without tokens)."""
    weights: dict[str, float | None] = {}
    sites = find_sites(specs)
    for site, members in sites.values():
        for spec in members:
            weights[spec.key()] = _count(spec) / len(site.lengths)
    for spec in specs:
        if spec.key() not in weights:
            weights[spec.key()] = _count(spec) / tokens if tokens else None
    return PerToken(weights, tuple(site for site, _ in sites.values()), tokens)
