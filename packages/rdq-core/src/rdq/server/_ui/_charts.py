"""The console's charts as plain SVG geometry, computed here so the templates only place it:
a sparkline per queue (succeeded, failed and dead per minute over the last hour) and a queue's
per-minute bar chart. No script, no style attribute (the pages' CSP allows neither): the
colours come from classes in console.css."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from rdq.spi import Counts

__all__ = ["Bar", "BarChart", "Sparkline", "bar_chart", "sparkline", "summary"]

SERIES = ("succeeded", "failed", "dead")
SPARK_W, SPARK_H = 120, 28
CHART_W, CHART_H = 600, 120


@dataclass(frozen=True)
class Sparkline:
    width: int
    height: int
    lines: list[tuple[str, str]]
    """(series, SVG points) for each series that has any attempt."""
    label: str
    """What it shows, for screen readers and the tooltip."""


def _peak(counts: list[Counts], names: tuple[str, ...]) -> int:
    values: list[int] = [getattr(c, n) for c in counts for n in names]
    return max(values or [0])


def summary(counts: list[Counts], minutes: int | None = None) -> dict[str, int]:
    """Totals of the last ``minutes`` minutes (all of them when ``None``)."""
    chosen = counts[-minutes:] if minutes else counts
    return {n: sum(getattr(c, n) for c in chosen) for n in (*SERIES, "deferred")}


def sparkline(counts: list[Counts]) -> Sparkline:
    """A line per series over the minutes of ``counts`` (oldest first), all on one scale."""
    peak = _peak(counts, SERIES)
    lines: list[tuple[str, str]] = []
    steps = max(len(counts) - 1, 1)
    for name in SERIES:
        values = [getattr(c, name) for c in counts]
        if not any(values):
            continue
        points = " ".join(
            f"{i * SPARK_W / steps:.1f},{SPARK_H - 2 - (v / peak) * (SPARK_H - 4):.1f}"
            for i, v in enumerate(values)
        )
        lines.append((name, points))
    totals = summary(counts)
    label = (
        f"last {len(counts)} min: {totals['succeeded']:,} succeeded, {totals['failed']:,} "
        f"failed, {totals['dead']:,} dead"
    )
    return Sparkline(SPARK_W, SPARK_H, lines, label)


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    minute: datetime
    parts: list[tuple[str, float, float, int]]
    """(series, y, height, count), bottom up."""
    title: str


@dataclass(frozen=True)
class BarChart:
    width: int
    height: int
    bars: list[Bar]
    peak: int
    ticks: list[str] = field(default_factory=list)
    """Labels spread evenly along the time axis, oldest first."""
    totals: dict[str, int] = field(default_factory=dict)


def bar_chart(counts: list[Counts], now: datetime | None = None) -> BarChart:
    """Stacked bars per minute (succeeded at the bottom, then failed, dead, deferred)."""
    names = (*SERIES, "deferred")
    peak = max([sum(getattr(c, n) for n in names) for c in counts] or [0])
    slot = CHART_W / max(len(counts), 1)
    bars: list[Bar] = []
    for i, c in enumerate(counts):
        parts: list[tuple[str, float, float, int]] = []
        base = float(CHART_H)
        for name in names:
            value = getattr(c, name)
            if not value or not peak:
                continue
            height = max(value / peak * (CHART_H - 4), 1.0)
            base -= height
            parts.append((name, round(base, 2), round(height, 2), value))
        said = ", ".join(f"{getattr(c, n):,} {n}" for n in names if getattr(c, n)) or "nothing"
        bars.append(
            Bar(
                x=round(i * slot + slot * 0.1, 2),
                width=round(slot * 0.8, 2),
                minute=c.minute,
                parts=parts,
                title=f"{c.minute:%H:%M} UTC: {said}",
            )
        )
    span = len(counts)
    ticks = [
        f"−{span} min",
        f"−{span * 3 // 4} min",
        f"−{span // 2} min",
        f"−{span // 4} min",
        "now",
    ]
    return BarChart(CHART_W, CHART_H, bars, peak, ticks, summary(counts))
