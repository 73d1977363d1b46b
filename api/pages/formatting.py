"""How the pages write times, durations, JSON and a run's status and output: the templates'
filters (api/pages/render.py) and what the page modules show with them. Formatting only."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from markupsafe import Markup

from signoff.engine.models import Job, as_utc, utcnow


def aware(when: datetime | None) -> datetime | None:
    """A template's datetime in UTC (the models' already are: engine.models.UTCDateTime)."""
    return None if when is None else as_utc(when)


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {sec} s" if sec else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def ago(when: datetime | None, now: datetime | None = None) -> str:
    when = aware(when)
    if when is None:
        return ""
    seconds = ((now or utcnow()) - when).total_seconds()
    if seconds < 45:
        return "just now"
    text = duration_text(seconds)
    if " min " in text and text.endswith(" s"):  # "3 min 12 s" -> "3 min"
        text = text.rsplit(" ", 2)[0]
    return text + " ago"


def stamp(when: datetime | None) -> str:
    when = aware(when)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC") if when else ""


def clock(when: datetime | None) -> str:
    when = aware(when)
    return when.strftime("%H:%M:%S") if when else ""


def iso(when: datetime | None) -> str:
    when = aware(when)
    return when.isoformat() if when else ""


def compact_json(value: Any, limit: int = 4000) -> str:
    text = json.dumps(value, ensure_ascii=False, indent=2, default=str, sort_keys=False)
    return text if len(text) <= limit else text[:limit] + "\n…"


STATUS_TEXT = {
    "queued": ("Queued", "circle"),
    "in_progress": ("Running", "running"),
    "suspended": ("Waiting for a decision", "pause"),
    "completed": ("Completed", "check"),
    "failed": ("Failed", "x"),
    "cancelled": ("Cancelled", "ban"),
    "timed_out": ("Timed out", "clock"),
}


def run_duration(job: Job) -> float | None:
    end = job.finished_at if job.finished_at else (None if not job.status.terminal else job.updated_at)
    return ((end or utcnow()) - job.created_at).total_seconds()


def output_text(job: Job) -> str | None:
    result = job.result or {}
    output = result.get("output")
    if isinstance(output, dict) and output.get("text") is not None:
        return str(output["text"])
    if isinstance(output, str):
        return output
    return None


def time_left(due: datetime | None, now: datetime | None = None) -> str:
    if due is None:
        return ""
    left = (aware(due) - (now or utcnow())).total_seconds()
    if left <= 0:
        return "past its deadline"
    return duration_text(left) + " left"


def relative(when: datetime | None, now: datetime | None = None) -> str:
    """The relative hint beside a time: "in 2 h", "3 min ago", "just now" (the whole units the
    script writes too, api/pages/static/signoff.js: relTime)."""
    when = aware(when)
    if when is None:
        return ""
    seconds = (when - (now or utcnow())).total_seconds()
    span = abs(seconds)
    if span < 45:
        return "just now"
    minutes = round(span / 60)
    if minutes < 60:
        amount = f"{minutes} min"
    elif minutes < 48 * 60:
        amount = f"{round(minutes / 60)} h"
    else:
        amount = f"{round(minutes / 1440)} d"
    return f"in {amount}" if seconds > 0 else f"{amount} ago"


def when(value: datetime | None, now: datetime | None = None) -> Markup:
    """A time as every page shows it: ``<time datetime="ISO-UTC" data-when>2026-12-03 14:05 UTC ·
    in 2 h</time>``, one format server-side; the pages' script rewrites it to the browser's time
    zone with the same hint (no inline script: the CSP allows none)."""
    at = aware(value)
    if at is None:
        return Markup("")
    text = f"{at.strftime('%Y-%m-%d %H:%M')} UTC · {relative(at, now)}"
    return Markup('<time datetime="{}" data-when title="{}">{}</time>').format(
        at.isoformat(), at.strftime("%Y-%m-%d %H:%M:%S UTC"), text)
