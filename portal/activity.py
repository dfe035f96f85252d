"""Calls per day per tool for the activity page: one aggregate query and the geometry of its chart.

The chart is drawn on the server as inline SVG: no script, and colours come
from CSS classes (`series-0` … `series-7`) because the CSP forbids inline
styles. The counts are kept beside the geometry so tests and the legend read
exact numbers, not pixels.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from django.db.models import Count
from django.db.models.functions import TruncDate
from django.utils import timezone

from connections_app.selectors import Viewer, invocations_seen_by

CHART_DAYS = 14
SERIES_CLASSES = 8  # how many distinct colours the stylesheet defines

WIDTH, HEIGHT = 1100, 240
LEFT, RIGHT, TOP, BOTTOM = 40, 8, 12, 28
PLOT_WIDTH, PLOT_HEIGHT = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
BAR_SHARE = 0.62  # of each day's slot; the rest is the gap between days


@dataclass(frozen=True, slots=True)
class ChartSeries:
    tool_id: str
    css_class: str
    total: int


@dataclass(frozen=True, slots=True)
class ChartBar:
    x: float
    y: float
    width: float
    height: float
    css_class: str
    title: str


@dataclass(frozen=True, slots=True)
class ChartLabel:
    x: float
    y: float
    text: str


@dataclass(frozen=True, slots=True)
class ActivityChart:
    days: tuple[date, ...]
    counts: dict[tuple[date, str], int]
    series: tuple[ChartSeries, ...]
    bars: tuple[ChartBar, ...]
    day_labels: tuple[ChartLabel, ...]
    value_ticks: tuple[ChartLabel, ...]
    total: int
    width: int = WIDTH
    height: int = HEIGHT
    plot_left: int = LEFT
    plot_right: int = WIDTH - RIGHT


UNKNOWN_TOOL = "unknown tool"


def chart_days(*, today: date, days: int = CHART_DAYS) -> list[date]:
    """The `days` calendar days ending with `today`, oldest first."""
    return [today - timedelta(days=offset) for offset in range(days - 1, -1, -1)]


def activity_per_day(
    *,
    tenant_id: int,
    viewer: Viewer,
    since: date,
    run_id: str = "",
    tool_id: str = "",
    ok: bool | None = None,
    subject_id: str = "",
) -> dict[tuple[date, str], int]:
    """{(day, tool id): calls} of a tenant's finished calls since `since`, in one GROUP BY query.

    Built on `invocations_seen_by` so the chart counts exactly the rows the list
    shows this viewer under the same filters; its ordering is dropped because an
    ORDER BY column would otherwise join the GROUP BY.
    """
    start = timezone.make_aware(datetime.combine(since, time.min))
    rows = (
        invocations_seen_by(
            tenant_id=tenant_id, viewer=viewer, run_id=run_id, tool_id=tool_id, ok=ok, subject_id=subject_id
        )
        .select_related(None)
        .order_by()
        .filter(started_at__gte=start)
        .annotate(day=TruncDate("started_at"))
        .values("day", "tool_id")
        .annotate(calls=Count("id"))
    )
    return {(row["day"], row["tool_id"]): row["calls"] for row in rows}


def activity_chart(
    *, counts: dict[tuple[date, str], int], days: list[date], known_tool_ids: Collection[str] | None = None
) -> ActivityChart:
    """Stacked bars, one per day, one segment per tool, scaled to a round maximum.

    Refused calls may name any id a caller typed: ids outside `known_tool_ids` share one
    "unknown tool" series (last), so the legend lists tools, not typos.
    """
    if known_tool_ids is not None:
        grouped: dict[tuple[date, str], int] = {}
        for (day, tool_id), calls in counts.items():
            key = (day, tool_id if tool_id in known_tool_ids else UNKNOWN_TOOL)
            grouped[key] = grouped.get(key, 0) + calls
        counts = grouped
    tool_ids = sorted({tool_id for (day, tool_id) in counts if day in days}, key=lambda one: (one == UNKNOWN_TOOL, one))
    series = tuple(
        ChartSeries(
            tool_id=tool_id,
            css_class=f"series-{index % SERIES_CLASSES}",
            total=sum(counts.get((day, tool_id), 0) for day in days),
        )
        for index, tool_id in enumerate(tool_ids)
    )
    daily_totals = [sum(counts.get((day, tool_id), 0) for tool_id in tool_ids) for day in days]
    scale_max = _round_maximum(max(daily_totals, default=0))
    slot = PLOT_WIDTH / len(days)
    bar_width = slot * BAR_SHARE
    baseline = TOP + PLOT_HEIGHT

    bars: list[ChartBar] = []
    for index, day in enumerate(days):
        x = LEFT + index * slot + (slot - bar_width) / 2
        top = float(baseline)
        for one in series:
            calls = counts.get((day, one.tool_id), 0)
            if not calls:
                continue
            height = calls / scale_max * PLOT_HEIGHT
            top -= height
            noun = "call" if calls == 1 else "calls"
            bars.append(
                ChartBar(
                    x=round(x, 1),
                    y=round(top, 1),
                    width=round(bar_width, 1),
                    height=round(height, 1),
                    css_class=one.css_class,
                    title=f"{one.tool_id}: {calls} {noun} on {day.isoformat()}",
                )
            )

    day_labels = tuple(
        ChartLabel(
            x=round(LEFT + index * slot + slot / 2, 1),
            y=HEIGHT - 10,
            text=f"{day:%b} {day.day}" if index == 0 or day.day == 1 else str(day.day),
        )
        for index, day in enumerate(days)
    )
    tick_values = [0, scale_max // 2, scale_max] if scale_max % 2 == 0 else [0, scale_max]
    value_ticks = tuple(
        ChartLabel(x=LEFT - 6, y=round(baseline - value / scale_max * PLOT_HEIGHT, 1), text=str(value))
        for value in tick_values
    )
    return ActivityChart(
        days=tuple(days),
        counts={key: calls for key, calls in counts.items() if key[0] in days},
        series=series,
        bars=tuple(bars),
        day_labels=day_labels,
        value_ticks=value_ticks,
        total=sum(daily_totals),
    )


def _round_maximum(value: int) -> int:
    """The smallest of 1, 2, 4, 6, 8, 10, 20, 40 … that is at least `value`: ticks land on whole numbers."""
    magnitude = 1
    while True:
        for step in (1, 2, 4, 6, 8):
            if step * magnitude >= value:
                return step * magnitude
        magnitude *= 10
