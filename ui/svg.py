"""The run timeline drawn as SVG, on the server: one row per step, one bar per call attempt.

The time axis is linear except across idle stretches: a gap of more than ``GAP_MS`` in which no call
was running (a dead worker, a long sleep) is drawn as a fixed-width break labelled with its length,
so refund-40's 30 fast steps are not squeezed into a sliver next to the seconds a restart took.
Waits and lost attempts that cross a break are still drawn across it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from .timeline import Call, Timeline

GAP_MS = 1000  # idle stretches longer than this are collapsed
GAP_PX = 44
LABEL_PX = 78
ROW_PX = 18
HEADER_PX = 34
PLOT_PX = 1040
MIN_BAR_PX = 3


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


@dataclass(frozen=True)
class _Segment:
    t0: int
    t1: int
    x0: float
    x1: float
    gap: bool


class TimeAxis:
    """Maps a time (ms) to x: linear over busy stretches, fixed width over collapsed idle ones."""

    def __init__(self, start_ms: int, end_ms: int, busy: Sequence[tuple[int, int]], width: float = PLOT_PX):
        end_ms = max(end_ms, start_ms + 1)
        merged: list[list[int]] = []
        for b0, b1 in sorted((max(start_ms, b0), min(end_ms, max(b0, b1))) for b0, b1 in busy):
            if merged and b0 <= merged[-1][1] + GAP_MS:
                merged[-1][1] = max(merged[-1][1], b1)
            else:
                merged.append([b0, b1])
        # Boundaries: busy stretches joined by short gaps; long gaps become breaks.
        pieces: list[tuple[int, int, bool]] = []
        cursor = start_ms
        for b0, b1 in merged:
            if b0 - cursor > GAP_MS:
                pieces.append((cursor, b0, True))
                cursor = b0
            pieces.append((cursor, b1, False))
            cursor = b1
        if end_ms - cursor > GAP_MS:
            pieces.append((cursor, end_ms, True))
        elif end_ms > cursor or not pieces:
            pieces.append((cursor, end_ms, False))
        gaps = sum(1 for p in pieces if p[2])
        linear_ms = sum(t1 - t0 for t0, t1, gap in pieces if not gap) or 1
        scale = max(width - gaps * GAP_PX, width / 4) / linear_ms
        x = 0.0
        self.segments: list[_Segment] = []
        for t0, t1, gap in pieces:
            w = GAP_PX if gap else (t1 - t0) * scale
            self.segments.append(_Segment(t0, t1, x, x + w, gap))
            x += w
        self.width = x
        self.start_ms, self.end_ms = start_ms, end_ms

    def x(self, t: int) -> float:
        for s in self.segments:
            if t <= s.t1:
                if t <= s.t0 or s.t1 == s.t0:
                    return s.x0
                return s.x0 + (s.x1 - s.x0) * (t - s.t0) / (s.t1 - s.t0)
        return self.segments[-1].x1 if self.segments else 0.0

    @property
    def breaks(self) -> list[_Segment]:
        return [s for s in self.segments if s.gap]


def _busy(timeline: Timeline) -> list[tuple[int, int]]:
    busy = []
    for call in timeline.calls:
        for attempt in call.attempts:
            if attempt.outcome != "lost":
                busy.append(
                    (attempt.start_ms, attempt.end_ms if attempt.end_ms is not None else timeline.end_ms)
                )
        busy.append((call.scheduled_ms, call.scheduled_ms))
    return busy


def _fmt_ms(ms: float) -> str:
    if ms >= 60_000:
        return f"{ms / 60_000:.1f} min"
    if ms >= 1000:
        return f"{ms / 1000:.1f} s"
    return f"{ms:.0f} ms"


def render(timeline: Timeline) -> str:
    """The whole timeline as an ``<svg>`` element (its calls are clickable: ``data-call``)."""
    axis = TimeAxis(timeline.start_ms, timeline.end_ms, _busy(timeline))
    rows = timeline.steps + (1 if any(c.step == 0 for c in timeline.calls) else 0)
    first_step = 0 if any(c.step == 0 for c in timeline.calls) else 1
    height = HEADER_PX + max(rows, 1) * ROW_PX + 24
    width = LABEL_PX + axis.width + 150

    def y_of(step: int) -> float:
        return HEADER_PX + (step - first_step) * ROW_PX

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{width:.0f}" height="{height}" '
        f'viewBox="0 0 {width:.0f} {height}" role="img" aria-label="run timeline">'
    ]
    # Step rows with their labels (clickable: the step's calls).
    for step in range(first_step, timeline.steps + 1):
        y = y_of(step)
        shade = " odd" if step % 2 else ""
        out.append(
            f'<g class="step-row{shade}" data-step="{step}"><rect class="row-bg" x="0" y="{y}" '
            f'width="{width:.0f}" height="{ROW_PX}"/><text class="step-label" x="6" y="{y + 13}">'
            f"step {step}</text></g>"
        )
    # The axis: ticks in each linear segment, breaks drawn as zigzags with their length.
    out.append(f'<g class="axis" transform="translate({LABEL_PX},0)">')
    for seg in axis.segments:
        if seg.gap:
            mid = (seg.x0 + seg.x1) / 2
            out.append(
                f'<rect class="gap" x="{seg.x0:.1f}" y="{HEADER_PX - 6}" width="{seg.x1 - seg.x0:.1f}" '
                f'height="{height - HEADER_PX - 12}"><title>{_esc(_fmt_ms(seg.t1 - seg.t0))} without a running call</title></rect>'
                f'<text class="gap-label" x="{mid:.1f}" y="{HEADER_PX - 10}" text-anchor="middle">'
                f"\u22ef {_esc(_fmt_ms(seg.t1 - seg.t0))} \u22ef</text>"
            )
        else:
            out.append(
                f'<text class="tick" x="{seg.x0 + 2:.1f}" y="12">+{_esc(_fmt_ms(seg.t0 - timeline.start_ms))}</text>'
                f'<line class="tick-line" x1="{seg.x0:.1f}" x2="{seg.x0:.1f}" y1="14" y2="{HEADER_PX - 4}"/>'
            )
    out.append("</g>")
    out.append(f'<g class="plot" transform="translate({LABEL_PX},0)">')
    for span in timeline.spans:
        y = y_of(max(span.step, first_step))
        x0 = axis.x(span.start_ms)
        end = span.end_ms if span.end_ms is not None else (span.fire_at_ms or timeline.end_ms)
        x1 = max(axis.x(min(end, timeline.end_ms)), x0 + MIN_BAR_PX)
        state = "done" if span.end_ms is not None else "waiting"
        out.append(
            f'<rect class="span {span.kind} {state}" x="{x0:.1f}" y="{y + 2}" width="{x1 - x0:.1f}" '
            f'height="{ROW_PX - 4}"><title>{_esc(span.kind)} {_esc(span.name)} (position {span.position}, '
            f"{_esc(state)})</title></rect>"
        )
    by_step: dict[int, list[Call]] = {}
    for call in timeline.calls:
        by_step.setdefault(max(call.step, first_step), []).append(call)
    for step, calls in by_step.items():
        out.append(_step_calls(calls, axis, y_of(step)))
    for change in timeline.epochs:
        x = axis.x(change.at_ms)
        out.append(
            f'<g class="epoch-change" data-epoch="{change.epoch}"><line x1="{x:.1f}" x2="{x:.1f}" y1="{HEADER_PX - 4}" '
            f'y2="{height - 14}"/><text x="{x + 3:.1f}" y="{height - 4}">worker {_esc(change.worker or "?")} '
            f"\u00b7 epoch {change.epoch}</text><title>epoch {change.previous_epoch} \u2192 {change.epoch}: "
            f"worker {_esc(change.worker or '?')} claimed the partition</title></g>"
        )
    out.append("</g></svg>")
    return "".join(out)


_IN_DOUBT_SUFFIX = " \u00b7 in doubt"
_FLAG_MARKS = {
    "redecided": "\u21bb re-decided",
    "non_determinism": "\u2260 non-determinism",
    "prompt_drift": "\u0394 prompt drift",
    "parked": "\u23f8 parked",
    "permit_wait": "\u29d7 waited for a permit",
}


def _bars(call: Call, axis: TimeAxis, y: float) -> tuple[str, float]:
    """One call's attempts, stacked in its row; returns the SVG and the x where the last one ends."""
    attempts = call.attempts
    lane_h = (ROW_PX - 4) / max(len(attempts), 1)
    classes = f"call {call.kind} {call.outcome}" + (" in-doubt" if call.in_doubt else "")
    classes += "".join(f" flag-{f.kind}" for f in call.flags)
    parts = [
        f'<g class="{classes}" data-call="{call.position}" data-step="{call.step}" tabindex="0">'
        f"<title>step {call.step} \u00b7 {_esc(call.kind)} {_esc(call.name)} \u00b7 position {call.position} "
        f"\u00b7 {_esc(call.outcome)}{_IN_DOUBT_SUFFIX if call.in_doubt else ''}</title>"
    ]
    last_x = axis.x(call.scheduled_ms)
    first_start = attempts[0].start_ms if attempts else call.scheduled_ms
    if first_start - call.scheduled_ms >= 1:
        # Scheduled (appended, acknowledged; for an effect, the fencing check) but not yet running.
        parts.append(
            f'<line class="queued" x1="{last_x:.1f}" x2="{axis.x(first_start):.1f}" y1="{y + ROW_PX / 2:.1f}" '
            f'y2="{y + ROW_PX / 2:.1f}"><title>scheduled {first_start - call.scheduled_ms} ms before it '
            "started</title></line>"
        )
    for lane, attempt in enumerate(attempts):
        x0 = axis.x(attempt.start_ms)
        end = attempt.end_ms if attempt.end_ms is not None else axis.end_ms
        x1 = max(axis.x(end), x0 + MIN_BAR_PX)
        last_x = max(last_x, x1)
        parts.append(
            f'<rect class="attempt {attempt.outcome}{" in-doubt" if attempt.in_doubt else ""}" '
            f'x="{x0:.1f}" y="{y + 2 + lane * lane_h:.1f}" width="{x1 - x0:.1f}" height="{max(lane_h - 1, 2):.1f}"/>'
        )
    parts.append("</g>")
    return "".join(parts), last_x


def _step_calls(calls: list[Call], axis: TimeAxis, y: float) -> str:
    """A step's calls, then one label after the last: the names, the in-doubt mark, the flags."""
    parts: list[str] = []
    end_x = 0.0
    for call in calls:
        svg, last_x = _bars(call, axis, y)
        parts.append(svg)
        end_x = max(end_x, last_x)
    x = end_x + 4
    for call in calls:
        if call.in_doubt:
            parts.append(
                f'<text class="in-doubt-marker" data-call="{call.position}" x="{x:.1f}" y="{y + 13}">'
                f"\u26a0 in doubt ({_esc(call.name)})</text>"
            )
            x += 7 * (len(call.name) + 14)
        for flag in call.flags:
            mark = _FLAG_MARKS.get(flag.kind, flag.kind)
            parts.append(
                f'<text class="flag-marker {flag.kind}" data-call="{call.position}" x="{x:.1f}" y="{y + 13}">'
                f"{_esc(mark)}</text>"
            )
            x += 7 * len(mark) + 6
    names = " \u2192 ".join(c.name for c in calls)
    parts.append(f'<text class="call-name" x="{x:.1f}" y="{y + 13}">{_esc(names)}</text>')
    return "".join(parts)


def gauge(value: int, warn: int, limit: int, label: str) -> str:
    """A horizontal bar of ``value`` against the warn and limit thresholds (scale: the limit)."""
    width, height = 260, 26
    scale = width / max(limit, 1)
    filled = min(value * scale, width)
    level = "over-limit" if value >= limit else "over-warn" if value >= warn else "ok"
    wx = warn * scale
    return (
        f'<svg class="gauge {level}" width="{width + 2}" height="{height + 14}" role="img" '
        f'aria-label="{_esc(label)}: {value} of {limit}">'
        f'<rect class="gauge-bg" x="1" y="1" width="{width}" height="{height - 8}"/>'
        f'<rect class="gauge-fill" x="1" y="1" width="{filled:.1f}" height="{height - 8}"/>'
        f'<line class="gauge-warn" x1="{wx + 1:.1f}" x2="{wx + 1:.1f}" y1="0" y2="{height - 6}"/>'
        f'<text x="{max(wx + 1, 1):.1f}" y="{height + 10}" text-anchor="{"start" if wx < 40 else "middle"}">'
        f"warn {warn:,}</text>"
        f'<text x="{width:.0f}" y="{height + 10}" text-anchor="end">limit {limit:,}</text></svg>'
    )
