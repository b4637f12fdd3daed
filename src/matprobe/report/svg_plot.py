"""Plots drawn as inline SVG, for the HTML report without a plotting library.

Two charts, both a row per item with a label, a dot and a whisker on a shared
x axis (logarithmic when the values span more than :data:`LOG_SPAN`, so a
5 µs kernel and a 239 µs production figure share one readable axis):

* :func:`timing_chart` — per spec, every validated variant's device time
  (median, p10–p90) beside the baseline's and the production figure, and each
  one's share of the measured read ceiling as a bar (the roofline's memory
  bound: 100 % is the fastest a memory-bound kernel can be);
* :func:`ratio_chart` — per spec, each pair's B ÷ A ratio with its interval,
  around a band of ±noise.

Every text is escaped here (:func:`esc`); nothing of a name reaches the markup
raw. Coordinates are rounded to 0.1 px to keep the file small.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

from matprobe.safetext import term_safe

#: Values spanning more than this factor get a logarithmic axis.
LOG_SPAN = 8.0
ROW_H = 18
LABEL_W = 290
PLOT_W = 430
BAR_W = 130
GAP = 24
TOP = 34
BOTTOM = 36
#: Labels longer than this are cut (the whole name is in the row's tooltip and table).
LABEL_CHARS = 44

COLOURS = {
    "ours": "#1f77b4",
    "best": "#2ca02c",
    "baseline": "#e67e00",
    "peer": "#7f7f7f",
    "production": "#9467bd",
    "FASTER": "#2ca02c",
    "SLOWER": "#d62728",
    "SAME": "#1f77b4",
    "UNSURE": "#7f7f7f",
}


def esc(text: object) -> str:
    """Text as literal HTML/SVG: control characters shown as ``\\xNN`` (as on the
    terminal), then ``& < > " '`` escaped."""
    return html.escape(term_safe(str(text)), quote=True)


def _n(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class Axis:
    """Maps values in [lo, hi] to pixels [x0, x0 + width], linear or logarithmic."""

    lo: float
    hi: float
    x0: float
    width: float
    log: bool

    @classmethod
    def fit(
        cls, values: Sequence[float], x0: float, width: float, *, log: bool | None = None
    ) -> Axis:
        positive = [v for v in values if v > 0 and math.isfinite(v)]
        lo, hi = (min(positive), max(positive)) if positive else (1.0, 10.0)
        if log is None:
            log = hi / lo > LOG_SPAN
        if log:
            return cls(lo / 1.15, hi * 1.15, x0, width, True)
        pad = (hi - lo) * 0.08 or hi * 0.05 or 1.0
        return cls(max(0.0, lo - pad), hi + pad, x0, width, False)

    def x(self, value: float) -> float:
        value = min(max(value, self.lo), self.hi)
        if self.log:
            share = math.log(value / self.lo) / math.log(self.hi / self.lo)
        else:
            share = (value - self.lo) / (self.hi - self.lo)
        return self.x0 + share * self.width

    def ticks(self) -> list[float]:
        """1-2-5 steps of each decade on a log axis spanning one or more; evenly
        spaced round values on a linear one or on a log axis within a decade."""
        if self.log:
            found = []
            for exponent in range(math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi))):
                for mantissa in (1, 2, 5):
                    value = mantissa * 10.0**exponent
                    if self.lo <= value <= self.hi:
                        found.append(value)
            if len(found) >= 3:
                return found
        raw = (self.hi - self.lo) / 5
        step = 10 ** math.floor(math.log10(raw))
        step *= next(m for m in (1, 2, 5, 10) if raw <= m * step)
        first = math.ceil(self.lo / step) * step
        count = int((self.hi - first) / step + 1e-9) + 1
        return [round(first + i * step, 12) for i in range(count)]


def _tick_label(value: float) -> str:
    return f"{value:.3g}"


def _axis_svg(axis: Axis, y: float, title: str) -> list[str]:
    end = _n(axis.x0 + axis.width)
    parts = [f'<line class="axis" x1="{_n(axis.x0)}" y1="{_n(y)}" x2="{end}" y2="{_n(y)}"/>']
    for tick in axis.ticks():
        x = _n(axis.x(tick))
        parts.append(f'<line class="grid" x1="{x}" y1="{TOP - 6}" x2="{x}" y2="{_n(y)}"/>')
        parts.append(f'<text class="tick" x="{x}" y="{_n(y + 13)}">{esc(_tick_label(tick))}</text>')
    scale = " (log scale)" if axis.log else ""
    parts.append(
        f'<text class="axis-title" x="{_n(axis.x0 + axis.width / 2)}" y="{_n(y + 28)}">'
        f"{esc(title + scale)}</text>"
    )
    return parts


def _label(y: float, text: str, css: str) -> str:
    shown = text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"
    return f'<text class="label {css}" x="{LABEL_W - 8}" y="{_n(y + 4)}">{esc(shown)}</text>'


def _frame(width: float, height: float, title: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
        f'viewBox="0 0 {_n(width)} {_n(height)}" width="{_n(width)}" height="{_n(height)}">'
        f"<title>{esc(title)}</title>" + "".join(body) + "</svg>"
    )


def _vline(axis: Axis, value: float, bottom: float, colour: str, text: str, row: int) -> list[str]:
    x = _n(axis.x(value))
    anchor = "end" if axis.x(value) > axis.x0 + axis.width * 0.6 else "start"
    return [
        f'<line class="ref" stroke="{colour}" x1="{x}" y1="{TOP - 8}" x2="{x}" y2="{_n(bottom)}"/>',
        f'<text class="ref-label" fill="{colour}" text-anchor="{anchor}" x="{x}" '
        f'y="{10 + 11 * row}">{esc(text)}</text>',
    ]


@dataclass(frozen=True)
class TimedRow:
    """One validated variant's device time, for :func:`timing_chart`."""

    label: str
    median_us: float
    p10_us: float
    p90_us: float
    n: int
    kind: str  # "best", "baseline", "peer" or "ours" (the colour)
    pct_read: float | None = None


def timing_chart(
    title: str,
    rows: Sequence[TimedRow],
    *,
    baseline_us: float | None,
    production_us: float | None,
    production_label: str = "production",
    read_ceiling: bool,
) -> str:
    """Every row's median device time with its p10–p90 whisker, reference lines at
    the baseline and the production figure, and (``read_ceiling``) a % bar."""
    bars = read_ceiling
    width = LABEL_W + PLOT_W + (GAP + BAR_W if bars else 0) + 16
    if not rows:
        body = [
            f'<text class="empty" x="{_n(width / 2)}" y="26">no validated, timed variant to '
            f"plot: see the table below for why</text>"
        ]
        return _frame(width, 44, title, body)
    bottom = TOP + ROW_H * len(rows)
    height = bottom + BOTTOM
    values = [v for r in rows for v in (r.p10_us, r.median_us, r.p90_us)]
    values += [v for v in (baseline_us, production_us) if v]
    axis = Axis.fit(values, LABEL_W, PLOT_W)
    body = _axis_svg(axis, bottom + 4, "device µs per call (dot: median; whisker: p10–p90)")
    refs = 0
    if baseline_us:
        body += _vline(
            axis, baseline_us, bottom, COLOURS["baseline"], f"baseline {baseline_us:.3g} µs", refs
        )
        refs += 1
    if production_us:
        body += _vline(
            axis,
            production_us,
            bottom,
            COLOURS["production"],
            f"{production_label} {production_us:.3g} µs",
            refs,
        )
    if bars:
        bar_x = LABEL_W + PLOT_W + GAP
        body.append(
            f'<text class="axis-title" x="{_n(bar_x + BAR_W / 2)}" y="{_n(bottom + 32)}">'
            f"% of read ceiling</text>"
        )
    for i, row in enumerate(rows):
        y = TOP + ROW_H * i + ROW_H / 2
        colour = COLOURS.get(row.kind, COLOURS["ours"])
        tip = (
            f"{row.label}: {row.median_us:.3g} µs "
            f"(p10–p90 {row.p10_us:.3g}–{row.p90_us:.3g}, n={row.n})"
        )
        if row.pct_read is not None:
            tip += f"; {row.pct_read:.0f}% of the read ceiling"
        parts = [
            f"<title>{esc(tip)}</title>",
            _label(y, row.label, row.kind),
            f'<line class="whisker" stroke="{colour}" x1="{_n(axis.x(row.p10_us))}" y1="{_n(y)}" '
            f'x2="{_n(axis.x(row.p90_us))}" y2="{_n(y)}"/>',
            f'<circle fill="{colour}" cx="{_n(axis.x(row.median_us))}" cy="{_n(y)}" r="4"/>',
        ]
        if bars:
            parts += _read_bar(LABEL_W + PLOT_W + GAP, y, row.pct_read)
        body.append('<g class="row">' + "".join(parts) + "</g>")
    return _frame(width, height, title, body)


def _read_bar(x0: float, y: float, pct: float | None) -> list[str]:
    """The roofline's memory bound as a bar: how much of the read ceiling a row reaches."""
    top = _n(y - 6)
    parts = [f'<rect class="bar-bg" x="{_n(x0)}" y="{top}" width="{BAR_W}" height="12"/>']
    if pct is None:
        return parts
    over = pct > 100.0
    length = BAR_W * min(pct, 100.0) / 100.0
    parts.append(
        f'<rect class="bar{" over" if over else ""}" x="{_n(x0)}" y="{top}" '
        f'width="{_n(length)}" height="12"/>'
    )
    text = ">100%!" if over else f"{pct:.0f}%"
    parts.append(f'<text class="bar-label" x="{_n(x0 + 4)}" y="{_n(y + 4)}">{esc(text)}</text>')
    return parts


@dataclass(frozen=True)
class RatioRow:
    """One compared pair, for :func:`ratio_chart`."""

    label: str
    ratio: float
    lo: float
    hi: float
    verdict: str


def ratio_chart(title: str, rows: Sequence[RatioRow], noise: float) -> str:
    """B ÷ A per pair: dot at the estimate, whisker over the interval, a band of
    ±``noise`` around 1 (changes inside it are not reported)."""
    width = LABEL_W + PLOT_W + 16
    bottom = TOP + ROW_H * len(rows)
    height = bottom + BOTTOM
    values = [v for r in rows for v in (r.lo, r.hi)] + [1.0 / (1 + 4 * noise), 1 + 4 * noise]
    spread = max(max(values), 1.0 / min(values))  # symmetric around 1 on the log scale
    axis = Axis.fit([1.0 / spread, spread], LABEL_W, PLOT_W, log=True)
    band = (axis.x(1.0 - noise), axis.x(1.0 + noise))
    body = [
        f'<rect class="band" x="{_n(band[0])}" y="{TOP - 6}" width="{_n(band[1] - band[0])}" '
        f'height="{_n(bottom - TOP + 6)}"/>',
        *_axis_svg(axis, bottom + 4, "B ÷ A (dot: estimate; whisker: interval)"),
        f'<line class="one" x1="{_n(axis.x(1.0))}" y1="{TOP - 8}" x2="{_n(axis.x(1.0))}" '
        f'y2="{_n(bottom)}"/>',
    ]
    for i, row in enumerate(rows):
        y = TOP + ROW_H * i + ROW_H / 2
        colour = COLOURS.get(row.verdict, COLOURS["UNSURE"])
        tip = f"{row.label}: {row.ratio:.3f}× [{row.lo:.3f}–{row.hi:.3f}] {row.verdict}"
        body.append(
            '<g class="row">'
            f"<title>{esc(tip)}</title>"
            + _label(y, row.label, row.verdict)
            + f'<line class="whisker" stroke="{colour}" x1="{_n(axis.x(row.lo))}" y1="{_n(y)}" '
            f'x2="{_n(axis.x(row.hi))}" y2="{_n(y)}"/>'
            f'<circle fill="{colour}" cx="{_n(axis.x(row.ratio))}" cy="{_n(y)}" r="4"/>'
            "</g>"
        )
    return _frame(width, height, title, body)
