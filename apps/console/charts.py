"""Charts drawn on the server as SVG markup: no JavaScript, no chart library, nothing to download.

Each function returns a complete ``<svg>`` element, safe to place in a template as it is: every text
that comes from data (a team's name, a model a client asked for) is escaped here, and control
characters are dropped. The picture scales with its box through ``viewBox`` (no fixed width or
height), so a chart stays readable from phone width up; the sizes below are in viewBox units.

Accessibility: the ``<svg>`` is an image (``role="img"``) labelled by its own ``<title>`` and
``<desc>``; every bar and point carries a ``<title>`` with its label and value (a tooltip on hover).
Pages show the same numbers in a table beside each chart for screen readers and for copying.
"""

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

Number = int | float | Decimal

WIDTH = 480
FONT = 15  # about 11 px on a 390 px phone, 13 px in a half-width desktop column
# Series colours: the console's accent, then colours that stay apart for the common colour blindness.
PALETTE = ("#2457c5", "#d55e00", "#1a7f37", "#9a6700", "#6f42c1")
INK, MUTED, GRID = "#1b1f24", "#5b6570", "#d8dde3"

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_ID = re.compile(r"[^a-z0-9-]")


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[Number | None]  # None: no value at that label (a gap in the line)


def text(value: object) -> str:
    """A label as SVG text: control characters dropped, markup escaped."""
    return escape(_CONTROL.sub("", str(value)))


def truncate(value: str, length: int) -> str:
    value = str(value)
    return value if len(value) <= length else value[: length - 1] + "…"


def nice_ticks(maximum: float, count: int = 4) -> list[float]:
    """0 and about ``count`` evenly spaced round values reaching at least ``maximum`` (1, 2, 2.5 or 5
    times a power of ten apart)."""
    if not math.isfinite(maximum) or maximum <= 0:
        return [0.0, 1.0]
    raw = maximum / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    ticks = [0.0]
    while ticks[-1] < maximum * (1 - 1e-9):
        ticks.append(round(ticks[-1] + step, 12))
    return ticks


def _fmt(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _axis_left(ticks: list[float], value_label: Callable[[Number], str], axis_label: str) -> float:
    """Where the plot starts: after the widest tick label ("$0.00015" needs more room than "$5"),
    and the rotated axis label if there is one."""
    widest = max(len(value_label(tick)) for tick in ticks) * FONT * 0.58
    return max(40.0, widest + 12 + (FONT + 6 if axis_label else 0))


def _chart_id(chart_id: str) -> str:
    cleaned = _ID.sub("-", chart_id.lower()).strip("-")
    return f"chart-{cleaned or 'x'}"


def _open(chart_id: str, title: str, description: str, height: float) -> list[str]:
    ident = _chart_id(chart_id)
    return [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {_fmt(height)}" '
        f'role="img" aria-labelledby="{ident}-title {ident}-desc" font-family="system-ui, sans-serif" '
        f'font-size="{FONT}">',
        f'<title id="{ident}-title">{text(title)}</title>',
        f'<desc id="{ident}-desc">{text(description)}</desc>',
    ]


def _empty(chart_id: str, title: str, description: str) -> SafeString:
    parts = _open(chart_id, title, description, 80)
    parts.append(
        f'<text x="{WIDTH / 2}" y="45" text-anchor="middle" fill="{MUTED}">No data for this period</text>'
    )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 (every data text above went through text())


def _value_axis(
    ticks: list[float],
    *,
    left: float,
    right: float,
    y_of: Callable[[float], float],
    value_label: Callable[[Number], str],
    axis_label: str,
    top: float,
    bottom: float,
) -> list[str]:
    parts = []
    for tick in ticks:
        y = y_of(tick)
        parts.append(
            f'<line x1="{_fmt(left)}" x2="{_fmt(right)}" y1="{_fmt(y)}" y2="{_fmt(y)}" stroke="{GRID}"/>'
        )
        parts.append(
            f'<text x="{_fmt(left - 6)}" y="{_fmt(y + FONT / 3)}" text-anchor="end" fill="{MUTED}">'
            f"{text(value_label(tick))}</text>"
        )
    if axis_label:
        middle = (top + bottom) / 2
        parts.append(
            f'<text transform="translate(12 {_fmt(middle)}) rotate(-90)" text-anchor="middle" '
            f'fill="{MUTED}">{text(axis_label)}</text>'
        )
    return parts


def _category_axis(labels: Sequence[str], x_of: Callable[[int], float], y: float) -> list[str]:
    """At most about six labels under the axis, evenly chosen, so they never overlap; each kept
    inside the picture (the first and last would otherwise be cut at its edges)."""
    if not labels:
        return []
    every = max(1, math.ceil(len(labels) / 6))
    parts = []
    for index, label in enumerate(labels):
        if index % every:
            continue
        label = truncate(label, 12)
        half = len(label) * FONT * 0.32  # about half the label's width
        x = min(max(x_of(index), half + 2), WIDTH - half - 2)
        parts.append(
            f'<text x="{_fmt(x)}" y="{_fmt(y)}" text-anchor="middle" fill="{MUTED}">{text(label)}</text>'
        )
    return parts


def bar_chart(
    *,
    chart_id: str,
    title: str,
    description: str,
    bars: Sequence[tuple[str, Number]],
    value_label: Callable[[Number], str] = str,
    axis_label: str = "",
) -> SafeString:
    """Vertical bars over a sequence of labels (a time axis: one bar per hour or day)."""
    if not bars:
        return _empty(chart_id, title, description)
    height, top, bottom, right = 250.0, 12.0, 220.0, WIDTH - 8.0
    ticks = nice_ticks(max(float(value) for _, value in bars))
    left = _axis_left(ticks, value_label, axis_label)
    scale = (bottom - top) / ticks[-1]

    def y_of(value: float) -> float:
        return bottom - value * scale

    slot = (right - left) / len(bars)
    width = max(1.0, slot * 0.8)
    parts = _open(chart_id, title, description, height)
    parts += _value_axis(
        ticks,
        left=left,
        right=right,
        y_of=y_of,
        value_label=value_label,
        axis_label=axis_label,
        top=top,
        bottom=bottom,
    )
    for index, (label, value) in enumerate(bars):
        x = left + index * slot + (slot - width) / 2
        y = y_of(max(0.0, float(value)))
        parts.append(
            f'<rect x="{_fmt(x)}" y="{_fmt(y)}" width="{_fmt(width)}" height="{_fmt(bottom - y)}" '
            f'fill="{PALETTE[0]}"><title>{text(label)}: {text(value_label(value))}</title></rect>'
        )
    parts.append(f'<line x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}" stroke="{INK}"/>')
    parts += _category_axis(
        [label for label, _ in bars], lambda i: left + i * slot + slot / 2, bottom + FONT + 6
    )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 (every data text above went through text())


def horizontal_bar_chart(
    *,
    chart_id: str,
    title: str,
    description: str,
    bars: Sequence[tuple[str, Number]],
    value_label: Callable[[Number], str] = str,
    label_length: int = 16,
) -> SafeString:
    """One labelled horizontal bar per category (a team, a model, a provider), biggest as given."""
    if not bars:
        return _empty(chart_id, title, description)
    row, top, label_width = 28.0, 8.0, 160.0
    # Room after the longest bar for its value ("$0.130451"): about 0.6 of the font size a character.
    widest_value = max(len(value_label(value)) for _, value in bars) * FONT * 0.6 + 8
    left, right = label_width + 8, WIDTH - max(70.0, widest_value)
    height = top * 2 + row * len(bars)
    biggest = max(float(value) for _, value in bars) or 1.0
    parts = _open(chart_id, title, description, height)
    for index, (label, value) in enumerate(bars):
        y = top + index * row
        width = (right - left) * max(0.0, float(value)) / biggest
        parts.append(
            f'<text x="{_fmt(label_width)}" y="{_fmt(y + row / 2 + FONT / 3)}" text-anchor="end" '
            f'fill="{INK}">{text(truncate(label, label_length))}</text>'
        )
        parts.append(
            f'<rect x="{_fmt(left)}" y="{_fmt(y + 4)}" width="{_fmt(max(width, 1.0))}" '
            f'height="{_fmt(row - 8)}" fill="{PALETTE[0]}">'
            f"<title>{text(label)}: {text(value_label(value))}</title></rect>"
        )
        parts.append(
            f'<text x="{_fmt(left + max(width, 1.0) + 4)}" y="{_fmt(y + row / 2 + FONT / 3)}" '
            f'fill="{MUTED}">{text(value_label(value))}</text>'
        )
    parts.append(
        f'<line x1="{_fmt(left)}" x2="{_fmt(left)}" y1="{_fmt(top)}" y2="{_fmt(height - top)}" '
        f'stroke="{INK}"/>'
    )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 (every data text above went through text())


def line_chart(
    *,
    chart_id: str,
    title: str,
    description: str,
    labels: Sequence[str],
    series: Sequence[Series],
    value_label: Callable[[Number], str] = str,
    axis_label: str = "",
) -> SafeString:
    """One line per series over a sequence of labels (a time axis), with a legend above it. A
    ``None`` value is a gap: the line breaks there."""
    values = [float(v) for s in series for v in s.values if v is not None]
    if not labels or not values:
        return _empty(chart_id, title, description)
    legend = 24.0
    height, top, bottom, right = 272.0, 12.0 + legend, 242.0, WIDTH - 12.0
    ticks = nice_ticks(max(values))
    left = _axis_left(ticks, value_label, axis_label)
    scale = (bottom - top) / ticks[-1]
    step = (right - left) / max(1, len(labels) - 1)

    def x_of(index: int) -> float:
        return left + index * step if len(labels) > 1 else (left + right) / 2

    def y_of(value: float) -> float:
        return bottom - value * scale

    parts = _open(chart_id, title, description, height)
    for number, line in enumerate(series):
        colour = PALETTE[number % len(PALETTE)]
        x = left + number * 130
        parts.append(f'<rect x="{_fmt(x)}" y="6" width="12" height="12" fill="{colour}"/>')
        parts.append(f'<text x="{_fmt(x + 16)}" y="16" fill="{INK}">{text(truncate(line.name, 14))}</text>')
    parts += _value_axis(
        ticks,
        left=left,
        right=right,
        y_of=y_of,
        value_label=value_label,
        axis_label=axis_label,
        top=top,
        bottom=bottom,
    )
    for number, line in enumerate(series):
        colour = PALETTE[number % len(PALETTE)]
        runs: list[list[str]] = [[]]
        for index, value in enumerate(line.values):
            if value is None:
                runs.append([])
            else:
                runs[-1].append(f"{_fmt(x_of(index))},{_fmt(y_of(float(value)))}")
        for run in runs:
            if len(run) > 1:
                parts.append(
                    f'<polyline points="{" ".join(run)}" fill="none" stroke="{colour}" stroke-width="2"/>'
                )
        for index, value in enumerate(line.values):
            if value is not None:
                parts.append(
                    f'<circle cx="{_fmt(x_of(index))}" cy="{_fmt(y_of(float(value)))}" r="3" fill="{colour}">'
                    f"<title>{text(line.name)}, {text(labels[index])}: {text(value_label(value))}</title>"
                    "</circle>"
                )
    parts.append(f'<line x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}" stroke="{INK}"/>')
    parts += _category_axis(labels, x_of, bottom + FONT + 6)
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 (every data text above went through text())
